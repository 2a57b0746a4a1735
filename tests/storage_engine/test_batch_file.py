"""Batch files: round trips, block index, seek, checksums, versioning, atomic writes."""

from __future__ import annotations

import errno
import itertools
import math
import os
import struct
import tempfile
import threading
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_engine import (
    Batch,
    BatchFile,
    CorruptionError,
    FormatVersionError,
    SchemaMismatchError,
    WriteOptions,
    ZSetSchema,
    fileio,
)
from storage_engine.cache import BufferCache
from storage_engine.file_format import FORMAT_VERSION, BatchFileWriter, write_batch_file
from storage_engine.fileio import PosixFileLayer
from storage_engine.key_range import KeyRange
from storage_engine.lookup.probes import key_table
from tests.conftest import trials

from .strategies import (
    CASES,
    Row,
    assert_matches,
    batch_of,
    model_of,
    restrict_keys,
    rows_strategy,
)

FS = PosixFileLayer()
INT = CASES["int64"].schema


@pytest.fixture
def cache() -> Any:
    c = BufferCache(8 << 20)
    yield c
    c.close()


def _open(path: str, cache: BufferCache, schema: ZSetSchema | None = None) -> BatchFile:
    return BatchFile(FS, path, cache, schema)


def _seek(bf: BatchFile, keys: Any) -> Batch:
    return Batch(bf.schema, bf.seek(key_table(keys, bf.schema)))


def _write(tmp: Path, batch: Batch, **opts: Any) -> str:
    path = str(tmp / f"{os.urandom(16).hex()}.batch")
    write_batch_file(FS, path, batch, WriteOptions(**opts))
    return path


# -- round trips -----------------------------------------------------------------------------


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
@pytest.mark.parametrize("bloom", [True, False])
@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip_and_seek(name: str, compression: str | None, bloom: bool) -> None:
    case = CASES[name]

    @settings(
        max_examples=trials(8, 3),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(
        rows=rows_strategy(case, 80),
        block_rows=st.integers(1, 9),
        data=st.data(),
    )
    def check(rows: list[tuple[Row, Row, int]], block_rows: int, data: st.DataObject) -> None:
        batch = batch_of(case, rows)
        model = model_of(rows)
        with tempfile.TemporaryDirectory() as d, BufferCacheCtx() as c:
            path = _write(
                Path(d), batch, block_rows=block_rows, compression=compression, bloom=bloom
            )
            assert os.listdir(d) == [os.path.basename(path)]
            bf = _open(path, c, case.schema)
            assert bf.schema == case.schema
            assert bf.compression == compression and bf.has_bloom == bloom
            assert bf.rows == len(batch)
            assert bf.num_blocks == math.ceil(len(batch) / block_rows)
            assert bf.first_key() == batch.first_key() and bf.last_key() == batch.last_key()
            assert_matches(bf.to_batch(), model)
            blocks = list(bf.iter_blocks())
            assert [b.num_rows for b in blocks[:-1]] == [block_rows] * (len(blocks) - 1)
            assert sum(b.num_rows for b in blocks) == len(batch)
            assert bf.weight_sum == sum(model.values())
            present = [r[0] for r in rows if all(x is not None for x in r[0])]
            pool = st.sampled_from(present) | case.key if present else case.key
            probes = data.draw(
                st.lists(pool.filter(lambda k: all(x is not None for x in k)), max_size=10)
            )
            assert_matches(_seek(bf, probes), restrict_keys(model, case.nkeys, probes))

    check()


class BufferCacheCtx:
    def __enter__(self) -> BufferCache:
        self.c = BufferCache(1 << 20)
        return self.c

    def __exit__(self, *exc: object) -> None:
        self.c.close()


@pytest.mark.parametrize("bloom", [True, False])
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_key_spanning_many_blocks(
    tmp_path: Path, cache: BufferCache, bloom: bool, compression: str | None
) -> None:
    rows = [((k,), (v,), 1) for k in (1, 3, 9) for v in range(5)]
    rows += [((5,), (v,), v % 3 + 1) for v in range(57)]
    batch = Batch.from_tuples(INT, rows)
    path = _write(tmp_path, batch, block_rows=8, bloom=bloom, compression=compression)
    bf = _open(path, cache, INT)
    assert bf.num_blocks == math.ceil(72 / 8)
    spans = [i for i, b in enumerate(bf.iter_blocks()) if 5 in b.column("k").to_pylist()]
    assert len(spans) >= 7  # the key's rows really are spread over many blocks
    model = model_of(rows)
    found = _seek(bf, [5])
    assert_matches(found, restrict_keys(model, 1, [(5,)]))
    assert len(found) == 57
    assert_matches(_seek(bf, [9, 5, 1, 1]), restrict_keys(model, 1, [(1,), (5,), (9,)]))
    assert_matches(_seek(bf, [3]), restrict_keys(model, 1, [(3,)]))


# Strings sharing long prefixes (the file-wide seek encoding cuts them), values too long for
# its chunks (those blocks fall back to their own encoding), and keys on either side of a
# prefix boundary.
_PREFIXED = st.sampled_from(
    [
        "user-0001",
        "user-0002",
        "user-00010",
        "user-",
        "user",
        "usez",
        "",
        "u" * 45,
        "user-" + "9" * 40,
    ]
)


@pytest.mark.parametrize(
    "keys",
    [
        [("s", pa.string())],
        [("b", pa.binary())],
        [("s", pa.string()), ("t", pa.string())],
        [("i", pa.int32()), ("s", pa.string())],
    ],
    ids=["string", "binary", "string_string", "int_string"],
)
def test_seek_with_file_wide_string_encoding(keys: list[tuple[str, pa.DataType]]) -> None:
    schema = ZSetSchema.of(keys, [("v", pa.int64())])

    def value(t: pa.DataType) -> st.SearchStrategy[Any]:
        if pa.types.is_integer(t):
            return st.integers(-2, 2)
        return _PREFIXED.map(str.encode) if pa.types.is_binary(t) else _PREFIXED

    key = st.tuples(*(value(t) for _, t in keys))

    @settings(max_examples=trials(40, 10), deadline=None)
    @given(
        rows=st.lists(
            st.tuples(key, st.tuples(st.integers(0, 2)), st.integers(-2, 2)), max_size=60
        ),
        block_rows=st.integers(1, 7),
        extra=st.lists(key, max_size=6),
        data=st.data(),
    )
    def check(rows: list[Any], block_rows: int, extra: list[Any], data: st.DataObject) -> None:
        batch = Batch.from_tuples(schema, rows)
        model = model_of(rows)
        present = [r[0] for r in rows]
        probes = data.draw(st.lists(st.sampled_from(present), max_size=8)) if present else []
        with tempfile.TemporaryDirectory() as d, BufferCacheCtx() as c:
            bf = _open(_write(Path(d), batch, block_rows=block_rows), c, schema)
            # all present keys touch every block: the whole-file search; a few keys: per block
            for ks in (present, probes + extra, probes, extra):
                assert_matches(_seek(bf, ks), restrict_keys(model, len(keys), ks))

    check()


_MANY_KEYS: dict[str, tuple[ZSetSchema, list[tuple[Any, ...]]]] = {
    "int64": (INT, [(k * 7,) for k in range(40)]),
    "string": (CASES["string"].schema, [(f"key-{k:03d}",) for k in range(40)]),
    "composite": (CASES["composite"].schema, [("abc"[k % 3], k) for k in range(40)]),
    "mixed_lengths": (CASES["string"].schema, [("x" * (k % 11) + str(k),) for k in range(40)]),
}


@pytest.mark.parametrize("name", sorted(_MANY_KEYS))
def test_seek_touching_most_blocks_searches_the_whole_file(name: str, tmp_path: Path) -> None:
    """A seek whose probes reach most blocks searches one array of all the file's keys
    (cached); later seeks of a few keys answer from it, and after eviction block by block."""
    schema, keys = _MANY_KEYS[name]
    value = [(0,), (1,)] if schema == INT or name == "composite" else [("x",), ("y",)]
    rows = [(k, v, 1 + i % 3) for i, k in enumerate(keys) for v in value[: 1 + i % 2]]
    model = model_of(rows)
    absent = [(*k[:-1], k[-1] + 1) if isinstance(k[-1], int) else (k[0] + "!",) for k in keys]
    with BufferCacheCtx() as c:
        bf = _open(_write(tmp_path, Batch.from_tuples(schema, rows), block_rows=4), c, schema)
        for ks in (keys + absent, keys[:2], absent[::3], keys[::5] + absent[::7], []):
            assert_matches(_seek(bf, ks), restrict_keys(model, len(keys[0]), ks))
        assert c.contains((bf._id, "whole-keys"))
        bf.evict()
        assert_matches(_seek(bf, keys[-3:]), restrict_keys(model, len(keys[0]), keys[-3:]))


def test_absent_keys_between_before_and_after_blocks(tmp_path: Path, cache: BufferCache) -> None:
    batch = Batch.from_tuples(INT, [((k,), (0,), 1) for k in range(0, 400, 4)])
    bf = _open(_write(tmp_path, batch, block_rows=10), cache, INT)
    assert len(_seek(bf, [-1, 1, 2, 3, 39, 41, 397, 399, 401, 10**9])) == 0
    assert _seek(bf, [396, 0, 40, 41]).to_dict() == {(0, 0): 1, (40, 0): 1, (396, 0): 1}


def test_nullable_keys_in_first_block_are_found(tmp_path: Path, cache: BufferCache) -> None:
    """Rows sharing a block with null keys (nulls sort first) must be found by seek."""
    for name, keys in (
        ("nullable_int", [1, 2, 3]),
        ("nullable_numeric", [1, 2, 3]),
        ("nullable_string", ["a", "b", "c"]),
    ):
        case = CASES[name]
        rows = [((None,), (None,), 1)] + [((k,), (None,), 1) for k in keys]
        batch = Batch.from_tuples(case.schema, rows)
        for bloom in (False, True):
            bf = _open(_write(tmp_path, batch, block_rows=2, bloom=bloom), cache, case.schema)
            assert_matches(bf.to_batch(), model_of(rows))
            got = _seek(bf, keys)
            assert got.to_dict() == {(k, None): 1 for k in keys}, (name, bloom)


def test_bloom_agrees_with_probe_hashing_for_nullable_numeric_keys(
    tmp_path: Path, cache: BufferCache
) -> None:
    """A block holding a null key hashes its other keys the same way as null-free probes."""
    case = CASES["nullable_numeric"]  # all-integer schema: null-free probes hash numerically
    rows = [((None,), (1,), 1)] + [((k,), (1,), 1) for k in range(40)]
    batch = Batch.from_tuples(case.schema, rows)
    bf = _open(_write(tmp_path, batch, block_rows=64, bloom=True), cache, case.schema)
    assert bf.num_blocks == 1
    assert _seek(bf, [7, 30]).to_dict() == {(7, 1): 1, (30, 1): 1}


def test_empty_batch_file(tmp_path: Path, cache: BufferCache) -> None:
    bf = _open(_write(tmp_path, Batch.empty(INT)), cache, INT)
    assert bf.rows == 0 and bf.num_blocks == 0
    assert bf.first_key() is None and bf.last_key() is None
    assert len(bf.to_batch()) == 0 and list(bf.iter_blocks()) == []
    assert len(_seek(bf, [1, 2])) == 0


def test_streaming_writer_cuts_exact_blocks(tmp_path: Path, cache: BufferCache) -> None:
    batch = Batch.from_tuples(INT, [((k,), (k % 3,), 1) for k in range(1000)])
    path = str(tmp_path / ("ab" * 16 + ".batch"))
    w = BatchFileWriter(FS, path, INT, WriteOptions(block_rows=64))
    for start in range(0, 1000, 37):
        w.write(batch.data.slice(start, 37))
    assert os.path.exists(path + ".mut") and not os.path.exists(path)
    size = w.finish()
    assert not os.path.exists(path + ".mut")
    assert os.path.getsize(path) == size
    bf = _open(path, cache, INT)
    assert [bf.block(i).num_rows for i in range(bf.num_blocks)] == [64] * 15 + [40]
    assert bf.to_batch().to_dict() == batch.to_dict()


def _encoders() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("batch-file-encoder")]


def test_blocks_after_the_first_are_encoded_ahead_on_a_thread_that_ends_with_the_file(
    tmp_path: Path, cache: BufferCache
) -> None:
    """Many blocks: the same file as block-by-block encoding would give (every block's
    checksum and bloom verified on read), written in order; one block: no thread at all;
    the thread is gone after finish, and after abort when a write fails midway."""
    batch = Batch.from_tuples(INT, [((k,), (k % 5,), 1) for k in range(2000)])
    before = set(_encoders())
    one = str(tmp_path / ("01" * 16 + ".batch"))
    w = BatchFileWriter(FS, one, INT, WriteOptions(block_rows=4096))
    w.write(batch.data)
    assert set(_encoders()) == before
    w.finish()
    many = str(tmp_path / ("02" * 16 + ".batch"))
    w = BatchFileWriter(FS, many, INT, WriteOptions(block_rows=50))
    for start in range(0, 2000, 333):
        w.write(batch.data.slice(start, 333))
    assert set(_encoders()) - before  # encoding ahead
    w.finish()
    assert set(_encoders()) == before
    bf = _open(many, cache, INT)
    assert bf.num_blocks == 40
    assert bf.to_batch().to_dict() == batch.to_dict() == _open(one, cache, INT).to_batch().to_dict()
    assert len(_seek(bf, [7, 1999, 5000])) == 2

    class FailingWrites(PosixFileLayer):
        def create(self, path: str) -> Any:
            inner = super().create(path)
            writes = itertools.count()

            class File:
                def __getattr__(self, name: str) -> Any:
                    return getattr(inner, name)

                def write(self, data: Any) -> None:
                    if next(writes) == 12:
                        raise OSError(errno.EIO, "injected")
                    inner.write(data)

            return File()

    bad = str(tmp_path / ("03" * 16 + ".batch"))
    w = BatchFileWriter(FailingWrites(), bad, INT, WriteOptions(block_rows=50))
    with pytest.raises(OSError, match="injected"):
        for start in range(0, 2000, 100):
            w.write(batch.data.slice(start, 100))
    w.abort()
    assert set(_encoders()) == before
    assert not os.path.exists(bad + ".mut") and not os.path.exists(bad)


def test_abort_leaves_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / ("cd" * 16 + ".batch"))
    w = BatchFileWriter(FS, path, INT, WriteOptions(block_rows=4))
    w.write(Batch.from_tuples(INT, [((1,), (1,), 1)] * 3).data)
    w.abort()
    assert os.listdir(tmp_path) == []


def test_write_is_mut_then_rename(tmp_path: Path) -> None:
    seen: list[str] = []

    class Spy(PosixFileLayer):
        def create(self, path: str) -> Any:
            seen.append(f"create {os.path.basename(path)}")
            return super().create(path)

        def rename(self, src: str, dst: str) -> None:
            seen.append(f"rename {os.path.basename(src)} {os.path.basename(dst)}")
            super().rename(src, dst)

        def sync_dir(self, path: str) -> None:
            seen.append("sync_dir")
            super().sync_dir(path)

    path = str(tmp_path / "x.batch")
    write_batch_file(Spy(), path, Batch.from_tuples(INT, [((1,), (1,), 1)]))
    assert seen == ["create x.batch.mut", "rename x.batch.mut x.batch", "sync_dir"]
    assert os.listdir(tmp_path) == ["x.batch"]


# -- integrity -------------------------------------------------------------------------------


def _flip(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def _many_blocks(tmp_path: Path, **opts: Any) -> tuple[str, Batch]:
    batch = Batch.from_tuples(INT, [((k,), (k * 7 % 5,), 1) for k in range(200)])
    return _write(tmp_path, batch, block_rows=20, **opts), batch


def test_writing_a_large_file_starts_writeback_of_each_written_megabyte(
    tmp_path: Path, cache: BufferCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real file layer asks the kernel (sync_file_range) to start writing back every
    `WRITEBACK_BYTES` written, over consecutive ranges from the file's start, so the final
    fsync has little left to wait for; the file is unchanged by it."""
    real = fileio._START_WRITEBACK
    if real is None:
        pytest.skip("no sync_file_range in this C library")
    calls: list[tuple[int, int, int]] = []

    def record(fd: int, offset: int, length: int, flags: int) -> int:
        calls.append((offset, length, os.fstat(fd).st_size))
        rc = real(fd, offset, length, flags)
        assert rc == 0
        return rc

    monkeypatch.setattr(fileio, "_START_WRITEBACK", record)
    rows = 300_000
    batch = Batch.from_columns(INT, {"k": np.arange(rows), "v": np.arange(rows) % 7})
    path = str(tmp_path / ("03" * 16 + ".batch"))
    size = write_batch_file(FS, path, batch, WriteOptions(block_rows=20_000))
    assert size > 4 * fileio.WRITEBACK_BYTES
    assert len(calls) >= size // fileio.WRITEBACK_BYTES - 1
    ends = 0
    for offset, length, on_disk in calls:
        assert offset == ends  # consecutive ranges from 0, each written out before its hint
        assert length >= fileio.WRITEBACK_BYTES and offset + length <= on_disk
        ends = offset + length
    assert _open(path, cache, INT).to_batch().to_dict() == batch.to_dict()


def test_block_checksum_verified_on_first_read(tmp_path: Path, cache: BufferCache) -> None:
    path, _batch = _many_blocks(tmp_path, bloom=True)
    probe = _open(path, cache, INT)
    off, length = int(probe._offsets[3]), int(probe._lengths[3])
    _flip(path, off + length // 2)
    bf = _open(path, cache, INT)  # header, footer, index are intact
    assert bf.block(2).num_rows == 20
    with pytest.raises(CorruptionError) as err:
        bf.block(3)
    assert err.value.block == 3 and err.value.path == path
    with pytest.raises(CorruptionError):
        _seek(bf, [60])  # key 60 lives in block 3
    with pytest.raises(CorruptionError):
        bf.to_batch()
    with pytest.raises(CorruptionError):
        bf.verify()
    assert _seek(bf, [10, 150]).to_dict() == {(10, 0): 1, (150, 0): 1}


def test_bloom_bytes_are_covered_by_the_block_checksum(tmp_path: Path, cache: BufferCache) -> None:
    path, _ = _many_blocks(tmp_path, bloom=True)
    probe = _open(path, cache, INT)
    off, length = int(probe._offsets[1]), int(probe._lengths[1])
    _flip(path, off + length + 1)  # first bytes of block 1's bloom filter
    bf = _open(path, cache, INT)
    with pytest.raises(CorruptionError):
        _seek(bf, [25])


@pytest.mark.parametrize("where", ["header", "footer", "index", "magic", "truncate"])
def test_corrupt_metadata_refuses_to_open(tmp_path: Path, cache: BufferCache, where: str) -> None:
    path, _ = _many_blocks(tmp_path)
    size = os.path.getsize(path)
    if where == "header":
        _flip(path, 20)
    elif where == "magic":
        _flip(path, 0)
    elif where == "footer":
        _flip(path, size - 40)
    elif where == "index":
        _flip(path, size - 72 - 70)
    else:
        with open(path, "r+b") as f:
            f.truncate(size - 100)
    with pytest.raises(CorruptionError):
        _open(path, cache, INT)


def test_newer_format_version_is_refused(tmp_path: Path, cache: BufferCache) -> None:
    path, batch = _many_blocks(tmp_path)
    with open(path, "r+b") as f:
        head = bytearray(f.read(64))
        assert head[:8] == b"SPNDLZS\x00"
        (version,) = struct.unpack("<H", head[8:10])
        assert version == FORMAT_VERSION
        head[8:10] = struct.pack("<H", version + 1)
        head[60:64] = struct.pack("<I", zlib.crc32(bytes(head[:60])))
        f.seek(0)
        f.write(head)
    with pytest.raises(FormatVersionError):
        _open(path, cache, INT)
    # the same edit without recomputing the crc is corruption, not a version problem
    path2, _ = _many_blocks(tmp_path)
    with open(path2, "r+b") as f:
        f.seek(8)
        f.write(struct.pack("<H", FORMAT_VERSION + 1))
    with pytest.raises(CorruptionError):
        _open(path2, cache, INT)
    assert _open(_write(tmp_path, batch), cache, INT).format_version == FORMAT_VERSION


def test_schema_mismatch(tmp_path: Path, cache: BufferCache) -> None:
    path, _ = _many_blocks(tmp_path)
    other = ZSetSchema.of([("k", pa.int64())], [("v", pa.string())])
    with pytest.raises(SchemaMismatchError):
        _open(path, cache, other)
    keys_only = ZSetSchema.of([("k", pa.int64()), ("v", pa.int64())])
    with pytest.raises(SchemaMismatchError):
        _open(path, cache, keys_only)
    assert _open(path, cache).schema == INT  # no expectation: reads its own schema


# -- zero copy and the cache -----------------------------------------------------------------


def test_uncompressed_block_is_zero_copy_view_of_the_map(
    tmp_path: Path, cache: BufferCache
) -> None:
    path, _ = _many_blocks(tmp_path, compression=None)
    bf = _open(path, cache, INT)
    base = np.frombuffer(bf._src.read(0, bf.size), dtype=np.uint8).ctypes.data
    rb = bf.block(1)
    for col in rb.columns:
        for buf in col.buffers():
            if buf is not None and buf.size:
                assert base <= buf.address < base + bf.size, "block buffer was copied"


def test_cache_hits_and_stats(tmp_path: Path) -> None:
    path, _ = _many_blocks(tmp_path)
    c = BufferCache(1 << 20)
    try:
        bf = _open(path, c, INT)
        bf.block(0)
        bf.block(0)
        bf.block(1)
        assert c.stats.misses == 2 and c.stats.hits == 1
        bf.evict()
        assert c.used_bytes == 0
        bf.block(0)
        assert c.stats.misses == 3
    finally:
        c.close()


def test_tiny_cache_evicts_but_reads_stay_correct(tmp_path: Path) -> None:
    path, batch = _many_blocks(tmp_path)
    c = BufferCache(1)
    try:
        bf = _open(path, c, INT)
        for _ in range(2):
            assert bf.to_batch().to_dict() == batch.to_dict()
        assert c.stats.evictions > 0
        assert _seek(bf, [199, 0]).to_dict() == {(0, 0): 1, (199, 3): 1}
    finally:
        c.close()


def test_rows_with_a_key_prefix_read_only_their_blocks(
    tmp_path: Path, cache: BufferCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`in_range` with a prefix (the API's key lookups of a checkpoint): a key spanning
    many blocks, keys at either end, absent keys, a null key; only the blocks that may hold
    the key are read."""
    rows = [((k,), (v,), 1) for k in (1, 3, 9) for v in range(5)]
    rows += [((5,), (v,), v % 3 + 1) for v in range(57)]
    bf = _open(_write(tmp_path, Batch.from_tuples(INT, rows), block_rows=8), cache, INT)
    read: list[int] = []
    block = bf.block
    monkeypatch.setattr(bf, "block", lambda i: read.append(i) or block(i))
    for key in (1, 3, 5, 9):
        read.clear()
        got = bf.in_range(KeyRange((key,)))
        cols = [got.column(c).to_pylist() for c in ("k", "v", "__weight")]
        want = sorted((k[0], v[0], w) for k, v, w in rows if k == (key,))
        assert sorted(zip(*cols, strict=True)) == want
        holding = [i for i in range(bf.num_blocks) if key in block(i).column("k").to_pylist()]
        assert read == holding, (key, read, holding)  # nothing else
    for absent in (0, 2, 4, 10):
        assert bf.in_range(KeyRange((absent,))).num_rows == 0
    case = CASES["nullable_int"]
    nulls = [((None,), (None,), 1), ((None,), ("p",), 1), ((1,), (None,), 1), ((2,), (None,), 1)]
    bf = _open(
        _write(tmp_path, Batch.from_tuples(case.schema, nulls), block_rows=2), cache, case.schema
    )
    assert bf.in_range(KeyRange((None,))).num_rows == 2
    assert bf.in_range(KeyRange((2,))).num_rows == 1
