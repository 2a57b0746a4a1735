"""The batch file: an immutable, checksummed, block-indexed Z-set on disk.

Layout (little-endian; see docs/storage-format.md for the full specification):

    header   64 B   magic "SPNDLZS\\0", format version u16, flags u16, key column count u16,
                    bloom probes u16 (v3), schema fingerprint 16 B, zero padding, crc32 of
                    bytes 0..60
    block 0         Arrow IPC record-batch message (optionally lz4/zstd compressed buffers),
                    then this block's bloom filter bytes, padded to 64 B
    ...
    schema          Arrow IPC schema message of the batch columns
    index           Arrow IPC record-batch message: per block offset, length, bloom offset and
                    length, rows, checksum (of message + bloom), first key columns, last key
                    columns
    footer   72 B   schema offset/len, index offset/len, total rows, block count (u64 each),
                    reserved u64, checksum of schema+index, crc32 of the footer's first 60
                    bytes, magic "SPNDLEND"

Block and schema/index checksums are CRC-32C from version 3 on (CRC-32 before); the header's
and footer's own are CRC-32 in every version.

Block checksums are verified on first read; the footer, schema and index are verified at
open. Files are written as `<name>.mut`, fsynced, renamed and the directory fsynced.
"""

from __future__ import annotations

import functools
import itertools
import os
import struct
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import crc32c
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from . import encoding, kernels, lookup
from .batch import Batch
from .cache import BufferCache
from .errors import CorruptionError, FormatVersionError, SchemaMismatchError
from .fileio import FileLayer, _remove_quietly
from .schema import WEIGHT, ZSetSchema
from .search import SearchTree

MAGIC = b"SPNDLZS\x00"
END_MAGIC = b"SPNDLEND"
FORMAT_VERSION = 3
"""Version history: 1 — first release; 2 — bloom key hashes depend only on column types
(version 1 hashed integer keys with pandas when any column of the schema was not integral,
or when the block held a null); 3 — block and schema/index checksums are CRC-32C (the
`crc32c` package uses the CPU's CRC instruction: 8x faster than zlib's CRC-32 here), the
header's reserved field holds the bloom filters' probe count (3 written, was a fixed 7:
building filters was a quarter of an over-budget ingest), and a key hash starts from its
first column's hash instead of mixing it once more. Readers keep each earlier version's
rules for its files."""
HEADER_SIZE = 64
FOOTER_SIZE = 72
_ALIGN = 64
FLAG_BLOOM = 1
_COMPRESSION_CODES = {None: 0, "lz4": 1, "zstd": 2}
_COMPRESSION_NAMES = {v: k for k, v in _COMPRESSION_CODES.items()}
_FOOTER = struct.Struct("<QQQQQQQII")  # 7 u64 + 2 u32 = 64 bytes, then magic
_BLOOM_BITS_PER_KEY = 10
_BLOOM_PROBES = 3  # written by this build; at 10-20 bits per key, 0.3-1.7 % false positives
_BLOOM_PROBES_V2 = 7  # versions 1 and 2


def checksum(version: int) -> Callable[[Any, int], int]:
    """The checksum of blocks and of the schema/index in files of `version`:
    `f(data, previous)` extends a running checksum (start with 0)."""
    return crc32c.crc32c if version >= 3 else zlib.crc32


_CHECKSUM = checksum(FORMAT_VERSION)

_file_ids = itertools.count(1)
_VIEW_CHARGE = 1024  # cache budget charged for a zero-copy block (Python objects only)
_WHOLE_MIN_BLOCKS = 4  # files of fewer blocks are searched block by block


@dataclass(frozen=True)
class WriteOptions:
    block_rows: int = 65536
    compression: str | None = None  # None, "lz4" or "zstd"
    bloom: bool = True


# -- hashing and bloom filters ---------------------------------------------------------------


_mix64 = encoding.mix64


def key_hashes(
    keys: pa.RecordBatch, schema: ZSetSchema, version: int = FORMAT_VERSION
) -> npt.NDArray[np.uint64]:
    """Deterministic 64-bit hash per row of the key columns (same in every process).

    The hash of a column depends only on its type (never on the data, e.g. whether it has
    nulls), so the rows of a file and the probes always hash alike. `version` selects the
    rule of the file's format version.
    """
    if version == 1:
        return _key_hashes_v1(keys, schema)
    h: npt.NDArray[np.uint64] | None = None if version >= 3 else np.zeros(keys.num_rows, np.uint64)
    with np.errstate(over="ignore"):
        for f in schema.keys:
            col = keys.column(f.name)
            if encoding.is_numeric(f.type):
                nulls = col.null_count
                filled = pc.fill_null(col, kernels.filler(f.type)) if nulls else col
                values = encoding.numeric(filled)
                assert values is not None
                part = _mix64(values.astype(np.int64).view(np.uint64))
                if nulls:
                    isnull = np.asarray(pc.is_null(col).to_numpy(zero_copy_only=False))
                    part[isnull] = encoding.NULL_HASH
            elif encoding.is_stringish(f.type):
                part = encoding.string_hash(col)
            else:
                part = _object_hash(col)
            h = part if h is None else _mix64(h * np.uint64(31) + part)
    assert h is not None
    return h


def _object_hash(col: pa.Array) -> npt.NDArray[np.uint64]:
    """pandas' hash of the Python values: the rule for types without a NumPy form. (pandas
    loads here, not with the module: 0.2-0.35 s of a driver's start-up, for few schemas.)"""
    import pandas as pd

    values = np.asarray(col.to_pylist(), dtype=object)
    return np.asarray(pd.util.hash_array(values, categorize=False), dtype=np.uint64)


def _key_hashes_v1(keys: pa.RecordBatch, schema: ZSetSchema) -> npt.NDArray[np.uint64]:
    h = np.zeros(keys.num_rows, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for name in schema.key_names:
            col = keys.column(name)
            values = encoding.numeric(col) if schema.numpy_sortable and not col.null_count else None
            if values is not None:
                part = _mix64(values.astype(np.int64).view(np.uint64))
            else:
                part = _object_hash(col)
            h = _mix64(h * np.uint64(31) + part)
    return h


def _bloom_positions(h: npt.NDArray[np.uint64], m: int, k: int) -> npt.NDArray[np.uint32]:
    """Probe bit positions, (k, n): double hashing in uint32, m a power of two."""
    h1 = (h & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    h2 = ((h >> np.uint64(32)) | np.uint64(1)).astype(np.uint32)
    i = np.arange(k, dtype=np.uint32)[:, None]
    with np.errstate(over="ignore"):
        return (h1[None, :] + i * h2[None, :]) & np.uint32(m - 1)


def _bloom_positions_v1(h: npt.NDArray[np.uint64], m: int) -> npt.NDArray[np.uint64]:
    h1 = h & np.uint64(0xFFFFFFFF)
    h2 = (h >> np.uint64(32)) | np.uint64(1)
    i = np.arange(_BLOOM_PROBES_V2, dtype=np.uint64)[:, None]
    with np.errstate(over="ignore"):
        return (h1[None, :] + i * h2[None, :]) % np.uint64(m)


def build_bloom(h: npt.NDArray[np.uint64], k: int = _BLOOM_PROBES) -> bytes:
    """A bloom filter of ~10-20 bits per key (m is the power of two >= 10 bits per key) with
    `k` probes per key.

    Sets the bits of `_bloom_positions` one hash at a time (h1 + i*h2 by repeated addition)
    instead of materialising the (k, n) position matrix: the same bits, in less time.
    """
    m = 1 << max(6, int(len(h) * _BLOOM_BITS_PER_KEY - 1).bit_length())
    halves = np.ascontiguousarray(h).astype("<u8", copy=False).view("<u4").reshape(-1, 2)
    pos = halves[:, 0].astype(np.uint32)
    step = halves[:, 1].astype(np.uint32) | np.uint32(1)
    mask = np.uint32(m - 1)
    bits = np.zeros(m, dtype=bool)
    for _ in range(k):
        bits[pos & mask] = True
        pos += step  # wraps modulo 2**32, as in _bloom_positions
    return np.packbits(bits, bitorder="little").tobytes()


def bloom_may_contain(
    bloom: memoryview | bytes,
    h: npt.NDArray[np.uint64],
    version: int = FORMAT_VERSION,
    k: int = _BLOOM_PROBES,
) -> npt.NDArray[np.bool_]:
    """Which keys (by `key_hashes`) the filter may hold: the rules of `version`, `k` probes."""
    packed = np.frombuffer(bloom, dtype=np.uint8)
    if version == 1:
        bits = np.unpackbits(packed, bitorder="little")
        return np.asarray(bits[_bloom_positions_v1(h, len(bits))].all(axis=0), dtype=bool)
    pos = _bloom_positions(h, len(packed) * 8, k)
    hit = (packed[pos >> np.uint32(3)] >> (pos & np.uint32(7)).astype(np.uint8)) & np.uint8(1)
    return np.asarray(hit.all(axis=0), dtype=bool)


# -- writing --------------------------------------------------------------------------------


def _pad(n: int) -> int:
    return (-n) % _ALIGN


def _message_bytes(rb: pa.RecordBatch, options: pa.ipc.IpcWriteOptions) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rb.schema, options=options) as w:
        w.write_batch(rb)
    reader = pa.ipc.MessageReader.open_stream(sink.getvalue())
    reader.read_next_message()  # the schema message
    return reader.read_next_message().serialize()


# Blocks of one file encoded ahead of its writes (at most this many in flight), by this many
# threads: encoding a block takes about as long as merging its rows, so with one thread the
# merge ends up waiting for it.
_ENCODE_AHEAD = 3
_ENCODERS = 2


@dataclass(frozen=True)
class _EncodedBlock:
    msg: pa.Buffer
    bloom: bytes
    crc: int
    rows: int


class BatchFileWriter:
    """Streams sorted, consolidated rows into a new batch file, one block at a time.

    From a file's second block on, the caller only cuts blocks: gathering a block's rows
    into one record batch, encoding it (IPC message, bloom filter, checksum) and writing it
    run on threads of the writer's own while the caller produces the next rows, e.g. a
    merge. On a spare core a large merge output then costs the merge alone (the copies and
    the writes into the page cache were a quarter of a 1.6M-row string merge). Blocks are
    written by one thread, in order. A one-block file starts no thread.
    """

    def __init__(
        self, fs: FileLayer, path: str, schema: ZSetSchema, options: WriteOptions = WriteOptions()
    ) -> None:
        self.fs, self.path, self.schema, self.options = fs, path, schema, options
        self._ipc = pa.ipc.IpcWriteOptions(compression=options.compression)
        self._f = fs.create(path + ".mut")
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._index: list[dict[str, Any]] = []
        self._firsts: list[pa.RecordBatch] = []
        self._lasts: list[pa.RecordBatch] = []
        self._encoder: ThreadPoolExecutor | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._writing: deque[Future[None]] = deque()
        self.rows = 0
        flags = FLAG_BLOOM if options.bloom else 0
        flags |= _COMPRESSION_CODES[options.compression] << 1
        probes = _BLOOM_PROBES if options.bloom else 0
        head = MAGIC + struct.pack("<HHHH", FORMAT_VERSION, flags, len(schema.keys), probes)
        head += bytes.fromhex(schema.fingerprint())
        head = head.ljust(HEADER_SIZE - 4, b"\0")
        self._f.write(head + struct.pack("<I", zlib.crc32(head)))

    def write(self, rb: pa.RecordBatch) -> None:
        if rb.num_rows == 0:
            return
        self._pending.append(rb)
        self._pending_rows += rb.num_rows
        while self._pending_rows >= self.options.block_rows:
            self._flush_block(self.options.block_rows)

    def _flush_block(self, rows: int) -> None:
        parts: list[pa.RecordBatch] = []
        need = rows
        while need:
            head = self._pending[0]
            if head.num_rows <= need:
                parts.append(self._pending.pop(0))
                need -= head.num_rows
            else:
                parts.append(head.slice(0, need))
                self._pending[0] = head.slice(need)
                need = 0
        self._pending_rows -= rows
        names = self.schema.key_names
        # Own copies: views would keep every chunk of the file alive until `finish`.
        self._firsts.append(pa.concat_batches([parts[0].select(names).slice(0, 1)]))
        last = parts[-1]
        self._lasts.append(pa.concat_batches([last.select(names).slice(last.num_rows - 1, 1)]))
        self.rows += rows
        if not self._index and not self._writing:
            self._append(self._encode(parts))
            return
        if self._encoder is None:
            self._encoder = ThreadPoolExecutor(_ENCODERS, thread_name_prefix="batch-file-encoder")
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="batch-file-writer")
        assert self._writer is not None
        encoded = self._encoder.submit(self._encode, parts)
        self._writing.append(self._writer.submit(lambda: self._append(encoded.result())))
        while len(self._writing) > _ENCODE_AHEAD:
            self._writing.popleft().result()

    def _encode(self, parts: list[pa.RecordBatch]) -> _EncodedBlock:
        block = pa.concat_batches(parts)  # one compact record batch, even of one part
        # serialize() gives the same message bytes as a stream writer, without the round trip
        msg = block.serialize() if self.options.compression is None else None
        if msg is None:
            msg = _message_bytes(block, self._ipc)
        keys = block.select(self.schema.key_names)
        bloom = build_bloom(key_hashes(keys, self.schema)) if self.options.bloom else b""
        return _EncodedBlock(msg, bloom, _CHECKSUM(bloom, _CHECKSUM(msg, 0)), block.num_rows)

    def _append(self, e: _EncodedBlock) -> None:
        offset = self._f.tell()
        self._f.write(e.msg)
        self._f.write(e.bloom)
        self._f.write(b"\0" * _pad(e.msg.size + len(e.bloom)))
        self._index.append(
            {
                "offset": offset,
                "length": e.msg.size,
                "bloom_length": len(e.bloom),
                "rows": e.rows,
                "crc": e.crc,
            }
        )

    def _drain(self) -> None:
        """Until every block cut so far is written."""
        while self._writing:
            self._writing.popleft().result()

    def _stop_encoder(self) -> None:
        for f in self._writing:
            f.cancel()
        self._writing.clear()
        for pool in (self._writer, self._encoder):  # the writer waits for the encoders
            if pool is not None:
                pool.shutdown(wait=True)
        self._encoder = self._writer = None

    @property
    def has_pending(self) -> bool:
        return self._pending_rows > 0

    def finish(self, sync_dir: bool = True, sync: bool = True) -> int:
        """Write index and footer, fsync, rename into place; return the size in bytes.

        `sync_dir=False` leaves the directory fsync to the caller (a commit syncs once for
        all the files it wrote). `sync=False` leaves the file's fsync to the caller too: the
        file is renamed into place unsynced and stays open until `sync_and_close()`. The
        name may then survive a power cut with lost contents, so no manifest may name the
        file before that sync succeeded (startup cleanup deletes it as unreferenced).
        """
        try:
            while self._pending_rows:
                self._flush_block(min(self._pending_rows, self.options.block_rows))
            self._drain()
            self._stop_encoder()
            schema_off = self._f.tell()
            schema_msg = self.schema.arrow.serialize()
            self._f.write(schema_msg)
            self._f.write(b"\0" * _pad(schema_msg.size))
            index_off = self._f.tell()
            index_msg = _message_bytes(self._index_batch(), pa.ipc.IpcWriteOptions())
            self._f.write(index_msg)
            self._f.write(b"\0" * _pad(index_msg.size))
            meta_crc = _CHECKSUM(index_msg, _CHECKSUM(schema_msg, 0))
            body = _FOOTER.pack(
                schema_off,
                schema_msg.size,
                index_off,
                index_msg.size,
                self.rows,
                len(self._index),
                0,
                meta_crc,
                0,
            )[:-4]
            self._f.write(body + struct.pack("<I", zlib.crc32(body)) + END_MAGIC)
            size = self._f.tell()
            if sync:
                self._f.sync()
            else:
                self._f.flush()  # readers map the file at once
        except BaseException:
            self.abort()
            raise
        if sync:
            self._f.close()
        try:
            self.fs.rename(self.path + ".mut", self.path)
        except BaseException:
            if not sync:
                self._f.close()
            raise
        if sync_dir:
            self.fs.sync_dir(os.path.dirname(self.path) or ".")
        return size

    def sync_and_close(self) -> None:
        """The deferred fsync of a file finished with `sync=False`; closes it either way.
        Called once: a failed fsync is never retried on the same file."""
        try:
            self._f.sync()
        finally:
            self._f.close()

    def abort(self) -> None:
        self._stop_encoder()
        self._f.close()
        _remove_quietly(self.fs, self.path + ".mut")

    def _index_batch(self) -> pa.RecordBatch:
        cols: dict[str, pa.Array] = {
            name: pa.array([e[name] for e in self._index], pa.uint64())
            for name in ("offset", "length", "bloom_length", "rows", "crc")
        }
        ks = self.schema.key_schema
        firsts = pa.concat_batches(self._firsts) if self._firsts else ks.empty_table().to_batches()
        lasts = pa.concat_batches(self._lasts) if self._lasts else firsts
        fields = [pa.field(n, t.type) for n, t in zip(cols, cols.values(), strict=True)]
        arrays = list(cols.values())
        for prefix, src in (("first.", firsts), ("last.", lasts)):
            for f in ks:
                fields.append(pa.field(prefix + f.name, f.type))
                arrays.append(
                    src.column(f.name) if isinstance(src, pa.RecordBatch) else pa.array([], f.type)
                )
        return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def write_batch_file(
    fs: FileLayer, path: str, batch: Batch, options: WriteOptions = WriteOptions()
) -> int:
    w = BatchFileWriter(fs, path, batch.schema, options)
    w.write(batch.data)
    return w.finish()


# -- reading --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockInfo:
    """One row of a batch file's block index."""

    block: int
    offset: int
    length: int
    bloom_length: int
    rows: int
    crc: int
    first_key: list[Any]
    last_key: list[Any]


class ByteSource(Protocol):
    """Where a batch file's bytes come from. `zero_copy` sources hand out views that stay
    valid as long as the file object lives (a memory map); others hand out copies."""

    size: int
    zero_copy: bool

    def read(self, offset: int, length: int) -> memoryview | bytes: ...


class MappedSource:
    zero_copy = True

    def __init__(self, mm: memoryview) -> None:
        self._mm = mm
        self.size = len(mm)

    def read(self, offset: int, length: int) -> memoryview:
        return self._mm[offset : offset + length]


@dataclass(frozen=True)
class _WholeKeys:
    """A file's keys in its seek encoding, all blocks together (`BatchFile._whole_keys`)."""

    keys: encoding.Encoding
    starts: npt.NDArray[np.int64]  # each block's first row
    fixed: list[int | None]  # per column of `keys`, the one value it holds (None: several)
    tree: SearchTree  # over the first column (which is a view of the tree's keys)


class BatchFile:
    """A read-only, memory-mapped batch file. Blocks are decoded lazily via the cache."""

    def __init__(
        self,
        fs: FileLayer,
        path: str,
        cache: BufferCache,
        expected: ZSetSchema | None = None,
        source: ByteSource | None = None,
        pending_sync: Future[None] | None = None,
    ) -> None:
        """A local file (memory-mapped), or any `source` of its bytes, such as an object in
        the object store fetched on demand; `path` then names the object in errors.
        `pending_sync`: the file was written unsynced and this is its fsync, running in the
        background (see `durable()`)."""
        self._pending_sync = pending_sync
        self.path = path
        self.name = os.path.basename(path)
        self._cache = cache
        self._id = next(_file_ids)
        if source is None:
            try:
                source = MappedSource(fs.map(path))
            except OSError as e:
                raise CorruptionError(path, f"cannot open: {e}") from e
        self._src = source
        self.size = source.size
        self._parse(expected)
        self._verified = np.zeros(self.num_blocks, dtype=bool)
        # computed at the first seek (False: not yet; None: the keys have no such encoding)
        self._prefixes: list[bytes | None] | bool | None = False
        self._fences: tuple[Any, Any] | bool | None = False

    def durable(self) -> bool:
        """Wait for the file's deferred fsync, if it has one: True once its bytes are on
        disk. False if that fsync failed: the bytes may never reach the disk, and the file
        is not synced again (the kernel may have dropped the pages and cleared the error),
        so whoever needs the rows durable writes them to a new file. Reads stay correct
        either way: every block is checksummed."""
        pending = self._pending_sync
        if pending is None:
            return True
        try:
            pending.result()
        except OSError:
            return False
        return True

    def _parse(self, expected: ZSetSchema | None) -> None:
        read, path = self._src.read, self.path
        if self.size < HEADER_SIZE + FOOTER_SIZE:
            raise CorruptionError(path, f"truncated: {self.size} bytes")
        head = bytes(read(0, HEADER_SIZE))
        if head[:8] != MAGIC:
            raise CorruptionError(path, "bad magic in header")
        if zlib.crc32(head[:-4]) != struct.unpack("<I", head[-4:])[0]:
            raise CorruptionError(path, "header checksum mismatch")
        version, flags, nkeys, probes = struct.unpack("<HHHH", head[8:16])
        if version > FORMAT_VERSION:
            raise FormatVersionError(
                f"{path}: format version {version} is newer than this build's {FORMAT_VERSION}"
            )
        self.format_version = version
        self._checksum = checksum(version)
        self.compression = _COMPRESSION_NAMES.get((flags >> 1) & 3)
        self.has_bloom = bool(flags & FLAG_BLOOM)
        self.bloom_probes = probes if version >= 3 else _BLOOM_PROBES_V2
        if self.has_bloom and not 1 <= self.bloom_probes <= 32:
            raise CorruptionError(path, f"bloom probe count {self.bloom_probes} out of range")
        fp = head[16:32].hex()
        foot = bytes(read(self.size - FOOTER_SIZE, FOOTER_SIZE))
        if foot[-8:] != END_MAGIC:
            raise CorruptionError(path, "bad magic in footer (truncated file?)")
        body = foot[:60]
        if zlib.crc32(body) != struct.unpack("<I", foot[60:64])[0]:
            raise CorruptionError(path, "footer checksum mismatch")
        s_off, s_len, i_off, i_len, rows, nblocks, _, meta_crc = struct.unpack("<QQQQQQQI", body)
        if max(s_off + s_len, i_off + i_len) > self.size - FOOTER_SIZE:
            raise CorruptionError(path, "footer points past the end of the file")
        if i_off == s_off + s_len:  # one read of both (one request for a remote source)
            both = read(s_off, s_len + i_len)
            schema_buf, index_buf = both[:s_len], both[s_len:]
        else:
            schema_buf, index_buf = read(s_off, s_len), read(i_off, i_len)
        if self._checksum(index_buf, self._checksum(schema_buf, 0)) != meta_crc:
            raise CorruptionError(path, "schema/index checksum mismatch")
        try:
            arrow_schema = pa.ipc.read_schema(pa.py_buffer(schema_buf))
            self.schema = ZSetSchema.from_arrow(arrow_schema, nkeys)
            index = pa.ipc.read_record_batch(pa.py_buffer(index_buf), self._index_schema())
        except (pa.ArrowInvalid, ValueError) as e:
            raise CorruptionError(path, f"undecodable schema or index: {e}") from e
        if self.schema.fingerprint() != fp:
            raise CorruptionError(path, "schema fingerprint in header does not match the schema")
        if expected is not None and expected.fingerprint() != fp:
            raise SchemaMismatchError(f"{path}: batch schema differs from the spine's schema")
        self.rows = int(rows)
        self.num_blocks = int(nblocks)
        if index.num_rows != nblocks:
            raise CorruptionError(path, "index length differs from the footer's block count")
        col = index.column
        self._offsets = col("offset").to_numpy().astype(np.int64)
        self._lengths = col("length").to_numpy().astype(np.int64)
        self._bloom_lengths = col("bloom_length").to_numpy().astype(np.int64)
        self._block_rows = col("rows").to_numpy().astype(np.int64)
        self._crcs = col("crc").to_numpy().astype(np.int64)
        names = self.schema.key_names
        self._firsts = pa.record_batch(
            [col("first." + n) for n in names], schema=self.schema.key_schema
        )
        self._lasts = pa.record_batch(
            [col("last." + n) for n in names], schema=self.schema.key_schema
        )
        ends = self._offsets + self._lengths + self._bloom_lengths
        if nblocks and (self._offsets.min() < HEADER_SIZE or ends.max() > s_off):
            raise CorruptionError(path, "block index points outside the data region")

    def _index_schema(self) -> pa.Schema:
        fields = [
            pa.field(n, pa.uint64()) for n in ("offset", "length", "bloom_length", "rows", "crc")
        ]
        for prefix in ("first.", "last."):
            fields += [pa.field(prefix + f.name, f.type) for f in self.schema.keys]
        return pa.schema(fields)

    # -- blocks --

    def _load(self, i: int) -> tuple[pa.RecordBatch, int]:
        off, n, nb = int(self._offsets[i]), int(self._lengths[i]), int(self._bloom_lengths[i])
        region = memoryview(self._src.read(off, n + nb))
        if not self._verified[i]:
            if self._checksum(region, 0) != int(self._crcs[i]):
                raise CorruptionError(self.path, "block checksum mismatch", block=i)
            self._verified[i] = True
        try:
            rb = pa.ipc.read_record_batch(pa.py_buffer(region[:n]), self.schema.arrow)
        except (pa.ArrowInvalid, OSError) as e:
            raise CorruptionError(self.path, f"undecodable block: {e}", block=i) from e
        if rb.num_rows != int(self._block_rows[i]):
            raise CorruptionError(self.path, "block row count differs from the index", block=i)
        # Uncompressed blocks are views into the mapping: the page cache holds their bytes,
        # so they cost the budget only their bookkeeping. Decompressed blocks are heap.
        zero_copy = self._src.zero_copy and not self.compression
        return rb, _VIEW_CHARGE if zero_copy else int(rb.nbytes)

    def block(self, i: int) -> pa.RecordBatch:
        rb: pa.RecordBatch = self._cache.get((self._id, i), lambda: self._load(i))
        return rb

    def _bloom(self, i: int) -> memoryview:
        off, n, nb = int(self._offsets[i]), int(self._lengths[i]), int(self._bloom_lengths[i])
        if not self._verified[i]:
            self.block(i)  # verifies the checksum, which covers the bloom filter too
        return memoryview(self._src.read(off + n, nb))

    def prefetch(self, blocks: list[int]) -> None:
        self._cache.prefetch([((self._id, i), functools.partial(self._load, i)) for i in blocks])

    def iter_blocks(self, prefetch_ahead: int = 2) -> Iterator[pa.RecordBatch]:
        for i in range(self.num_blocks):
            if prefetch_ahead:
                self.prefetch(list(range(i + 1, min(i + 1 + prefetch_ahead, self.num_blocks))))
            yield self.block(i)

    def verify(self) -> None:
        """Check every block checksum and decode every block (the `validate` tool)."""
        for i in range(self.num_blocks):
            self.verify_block(i)

    def verify_block(self, i: int) -> None:
        """Check block `i`'s checksum and decode it, even if it was verified before."""
        self._verified[i] = False
        self._load(i)

    def block_index(self) -> list[BlockInfo]:
        names = self.schema.key_names
        firsts = [self._firsts.column(n).to_pylist() for n in names]
        lasts = [self._lasts.column(n).to_pylist() for n in names]
        return [
            BlockInfo(
                block=i,
                offset=int(self._offsets[i]),
                length=int(self._lengths[i]),
                bloom_length=int(self._bloom_lengths[i]),
                rows=int(self._block_rows[i]),
                crc=int(self._crcs[i]),
                first_key=[c[i] for c in firsts],
                last_key=[c[i] for c in lasts],
            )
            for i in range(self.num_blocks)
        ]

    # -- queries --

    def first_key(self) -> tuple[Any, ...] | None:
        return (
            kernels.row_tuple(self._firsts, self.schema.key_names, 0) if self.num_blocks else None
        )

    def last_key(self) -> tuple[Any, ...] | None:
        n = self.num_blocks
        return kernels.row_tuple(self._lasts, self.schema.key_names, n - 1) if n else None

    def candidate_blocks(
        self, probes: pa.RecordBatch
    ) -> tuple[pa.RecordBatch, list[tuple[int, int, int]]]:
        """(probes, [(block, probe start, probe stop)]): the blocks whose key range may hold
        some of the sorted `probes`. A superset is fine: the block seek is exact."""
        nb = self.num_blocks
        if nb == 0 or probes.num_rows == 0:
            return probes, []
        names = self.schema.key_names
        # Bounds and probes encoded together so they share one common-prefix cut.
        both = pa.concat_batches([self._firsts, self._lasts, probes.select(names)])
        lead = encoding.leading(both, names[0])
        if lead is not None:
            first, last, p = lead[:nb], lead[nb : 2 * nb], lead[2 * nb :]
            lo = np.searchsorted(p, first, side="left")
            hi = np.searchsorted(p, last, side="right")
        else:
            lo = np.array(
                [
                    kernels.count_below(probes, names, kernels.row_tuple(self._firsts, names, i))
                    for i in range(nb)
                ]
            )
            hi = np.array(
                [
                    kernels.count_at_most(probes, names, kernels.row_tuple(self._lasts, names, i))
                    for i in range(nb)
                ]
            )
        return probes, [(int(i), int(lo[i]), int(hi[i])) for i in np.flatnonzero(hi > lo)]

    def _block_encoding(self, i: int) -> kernels.KeyEncoding | None:
        def load() -> tuple[kernels.KeyEncoding | None, int]:
            enc = kernels.key_encoding(self.block(i), self.schema)
            return enc, sum(c.nbytes for c in enc.cols) if enc is not None else 0

        enc: kernels.KeyEncoding | None = self._cache.get((self._id, i, "keys"), load)
        return enc

    def _seek_prefixes(self) -> list[bytes | None] | None:
        """Per key column, the prefix cut of this file's seek encoding (None: numeric): the
        first column's is the prefix its smallest and largest value share (the file is
        sorted by it, so every value shares it), the others' none. None overall if a key
        column has no encoding."""
        if self._prefixes is False:
            self._prefixes = self._compute_prefixes()
        return self._prefixes if isinstance(self._prefixes, list) else None

    def _compute_prefixes(self) -> list[bytes | None] | None:
        out: list[bytes | None] = []
        for j, f in enumerate(self.schema.keys):
            if encoding.is_numeric(f.type):
                out.append(None)
            elif not encoding.is_stringish(f.type):
                return None
            elif j == 0 and self.num_blocks:
                lo = self._firsts.column(0)[0].as_py()
                hi = self._lasts.column(0)[self.num_blocks - 1].as_py()
                out.append(encoding.shared_prefix(lo, hi))
            else:
                out.append(b"")
        return out

    def _fence_leads(self, prefixes: list[bytes | None]) -> tuple[Any, Any] | None:
        """The first encoded key column of every block's first and last key."""
        if self._fences is False:
            name = self.schema.key_names[0]
            both = pa.concat_batches([self._firsts, self._lasts])
            enc = encoding.encode_prefixed(both, [name], prefixes[:1])
            nb = self.num_blocks
            ok = enc is not None and bool(enc[1].all())
            self._fences = (enc[0].cols[0][:nb], enc[0].cols[0][nb:]) if enc and ok else None
        return self._fences if isinstance(self._fences, tuple) else None

    def _seek_encoding(self, i: int, prefixes: list[bytes | None]) -> encoding.Encoding | None:
        """Block `i`'s keys in the file's seek encoding (cached with the block)."""

        def load() -> tuple[encoding.Encoding | None, int]:
            enc = encoding.encode_prefixed(self.block(i), self.schema.key_names, prefixes)
            if enc is None or not enc[1].all():  # values too long for the chunks
                return None, 0
            return enc[0], sum(c.nbytes for c in enc[0].cols)

        enc: encoding.Encoding | None = self._cache.get((self._id, i, "seek-keys"), load)
        return enc

    def seek(self, probes: pa.RecordBatch) -> pa.RecordBatch:
        """Rows whose key is among the sorted, unique `probes` (skips blocks via index/bloom)."""
        return self.seek_keyed(probes)[0]

    def seek_keyed(
        self, probes: pa.RecordBatch, probe_encodings: kernels.ProbeEncodings | None = None
    ) -> kernels.Keyed:
        """`seek`, with the found rows' key encoding when the file's keys have one (else
        None).

        The probes are encoded once, with the file's prefix cut, and every block's keys with
        the same cut: the blocks then need no encoding of their probe subsets.
        `probe_encodings`: the lookup's encodings of the probes, shared with its other
        batches (one with this file's cut is used, one made here is added).
        """
        if self.num_blocks == 0 or probes.num_rows == 0:
            return kernels.empty(self.schema), None
        prefixes = self._seek_prefixes()
        fences = self._fence_leads(prefixes) if prefixes is not None else None
        if prefixes is None or fences is None:
            return self._seek_blocks(probes), None
        cut = tuple(prefixes)
        shared = probe_encodings.by_cut.get(cut) if probe_encodings is not None else None
        if shared is None:
            penc = encoding.encode_prefixed(probes, self.schema.key_names, prefixes)
            if penc is None:
                return self._seek_blocks(probes), None
            enc, valid = penc
            if valid.all():
                shared = (enc, None)
            else:
                sel = np.flatnonzero(valid)
                shared = (encoding.Encoding([c[sel] for c in enc.cols], enc.layouts), valid)
            if probe_encodings is not None:
                probe_encodings.by_cut[cut] = shared
        enc, mask = shared
        if mask is not None:
            probes = probes.filter(pa.array(mask))
        found = self._matches(enc, lambda a, b: probes.slice(a, b - a), prefixes, fences)
        if found is None:
            return self._seek_blocks(probes), None
        spans, owners = found
        parts = [self.block(i).take(pa.array(rows)) for i, rows in spans]
        if not parts:
            return kernels.empty(self.schema), None
        rb = parts[0] if len(parts) == 1 else pa.concat_batches(parts)
        # the found rows' keys are the probes they equal
        return rb, encoding.Encoding([c[owners] for c in enc.cols], enc.layouts)

    def find(self, probes: lookup.Probes) -> lookup.Found | None:
        """The rows whose key is one of `probes`, as a lookup gathers them (`lookup`); None
        when the file's keys have no seek encoding or a value column has nulls."""
        prefixes = self._seek_prefixes()
        fences = self._fence_leads(prefixes) if prefixes is not None else None
        if prefixes is None or fences is None:
            return None
        got = probes.in_cut(tuple(prefixes))
        if got is None:
            return None
        penc, sel = got

        def probe_rows(a: int, b: int) -> pa.RecordBatch:
            return probes.table.slice(a, b - a) if sel is None else probes.table.take(sel[a:b])

        found = self._matches(penc, probe_rows, prefixes, fences)
        if found is None:
            return None
        spans, owners = found
        parts: list[list[npt.NDArray[Any]]] = []
        for i, rows in spans:
            cols = lookup.columns(self.block(i), self.schema)
            if cols is None:
                return None
            parts.append([c[rows] for c in cols])
        gathered = [np.concatenate(cs) for cs in zip(*parts, strict=True)]
        return lookup.Found(owners if sel is None else sel[owners], gathered)

    def _matches(
        self,
        penc: encoding.Encoding,
        probe_rows: Callable[[int, int], pa.RecordBatch],
        prefixes: list[bytes | None],
        fences: tuple[Any, Any],
    ) -> tuple[list[tuple[int, npt.NDArray[np.int64]]], npt.NDArray[np.int64]] | None:
        """The rows whose key equals one of the sorted, unique probes encoded with the
        file's cut (`penc`): per block, its ascending matching rows, in block order; and the
        probe each row equals. `probe_rows(a, b)`: the probes [a, b) as a record batch (for
        bloom filters). None if a block's keys have no seek encoding.

        A seek that touches most blocks searches all the file's keys at once
        (`_whole_keys`); otherwise each touched block is searched for its probes, skipped if
        its bloom filter rules them all out (which saves reading it: once it is cached,
        searching is cheaper)."""
        first = penc.cols[0]
        lo = np.searchsorted(first, fences[0], side="left")
        hi = np.searchsorted(first, fences[1], side="right")
        touched = np.flatnonzero(hi > lo).tolist()
        whole = self._whole_keys(prefixes, len(touched), len(penc.cols))
        if whole is not None:
            enc, starts = whole.keys, whole.starts
            bcols, pcols = encoding.align(enc, penc)
            fixed = whole.fixed if bcols is enc.cols else None
            rows, owners = kernels.seek_matches(bcols, pcols, fixed, whole.tree)
            cuts = [*np.searchsorted(rows, starts, side="left").tolist(), len(rows)]
            spans = [
                (i, rows[cuts[i] : cuts[i + 1]] - starts[i])
                for i in range(self.num_blocks)
                if cuts[i + 1] > cuts[i]
            ]
            return spans, owners
        spans, owned = [], []
        for i in touched:
            a, b = int(lo[i]), int(hi[i])
            which = np.arange(a, b)
            if self.has_bloom and not self._cache.contains((self._id, i)):
                hashes = key_hashes(probe_rows(a, b), self.schema, self.format_version)
                maybe = bloom_may_contain(
                    self._bloom(i), hashes, self.format_version, self.bloom_probes
                )
                if not maybe.any():
                    continue
                which = which[maybe]
            benc = self._seek_encoding(i, prefixes)
            if benc is None:
                return None
            mine = encoding.Encoding([c[which] for c in penc.cols], penc.layouts)
            rows, owners = kernels.seek_matches(*encoding.align(benc, mine))
            if len(rows):
                spans.append((i, rows))
                owned.append(which[owners])
        return spans, np.concatenate(owned) if owned else np.empty(0, dtype=np.int64)

    def _whole_keys(
        self, prefixes: list[bytes | None], touched: int, width: int
    ) -> _WholeKeys | None:
        """All the file's keys in its seek encoding, one array per column, with each block's
        first row: one binary search then serves every block. Built (from every block) only
        when a seek touches most blocks and the arrays fit half the cache budget; a seek of a
        few keys reads only their blocks."""
        key = (self._id, "whole-keys")
        if not self._cache.contains(key):
            if self.num_blocks < _WHOLE_MIN_BLOCKS or 2 * touched < self.num_blocks:
                return None
            if 2 * self.rows * 8 * width > self._cache.budget_bytes:
                return None

        def load() -> tuple[_WholeKeys | None, int]:
            encs = []
            for i in range(self.num_blocks):
                got = encoding.encode_prefixed(self.block(i), self.schema.key_names, prefixes)
                if got is None or not got[1].all():
                    return None, 0
                encs.append(got[0])
            whole = encoding.concat(encs)
            if whole is None:
                return None, 0
            starts = np.concatenate(([0], np.cumsum(self._block_rows)[:-1])).astype(np.int64)
            fixed = [kernels.single_value(c) for c in whole.cols]
            tree = SearchTree(whole.cols[0])
            keys = encoding.Encoding([tree.keys, *whole.cols[1:]], whole.layouts)
            size = tree.nbytes + sum(c.nbytes for c in whole.cols[1:])
            return _WholeKeys(keys, starts, fixed, tree), size

        found: _WholeKeys | None = self._cache.get(key, load)
        return found

    def _seek_blocks(self, probes: pa.RecordBatch) -> pa.RecordBatch:
        """`seek` for keys without a file-wide encoding: each block encodes its own."""
        parts: list[pa.RecordBatch] = []
        probes, blocks = self.candidate_blocks(probes)
        for i, a, b in blocks:
            sub = probes.slice(a, b - a)
            if self.has_bloom and not self._cache.contains((self._id, i)):
                hashes = key_hashes(sub, self.schema, self.format_version)
                maybe = bloom_may_contain(
                    self._bloom(i), hashes, self.format_version, self.bloom_probes
                )
                if not maybe.any():
                    continue
                if not maybe.all():
                    sub = sub.filter(pa.array(maybe))
            found = kernels.seek(self.block(i), sub, self.schema, self._block_encoding(i))
            if found.num_rows:
                parts.append(found)
        if not parts:
            return kernels.empty(self.schema)
        return parts[0] if len(parts) == 1 else pa.concat_batches(parts)

    def range(self, lo: Sequence[Any] | None, hi: Sequence[Any] | None) -> pa.RecordBatch:
        """Rows with lo <= key < hi (on a key prefix), reading only overlapping blocks."""
        names = self.schema.key_names
        parts = []
        for i in range(self.num_blocks):
            last = kernels.row_tuple(self._lasts, names, i)
            first = kernels.row_tuple(self._firsts, names, i)
            if lo is not None and kernels.compare_rows(last[: len(lo)], tuple(lo)) < 0:
                continue
            if hi is not None and kernels.compare_rows(first[: len(hi)], tuple(hi)) >= 0:
                break
            parts.append(self.block(i))
        if not parts:
            return kernels.empty(self.schema)
        rb = pa.concat_batches(parts) if len(parts) > 1 else parts[0]
        start = kernels.count_below(rb, names, lo) if lo is not None else 0
        stop = kernels.count_below(rb, names, hi) if hi is not None else rb.num_rows
        return rb.slice(start, max(stop - start, 0))

    def to_batch(self) -> Batch:
        blocks = list(self.iter_blocks(prefetch_ahead=0))
        if not blocks:
            return Batch.empty(self.schema)
        return Batch(self.schema, pa.concat_batches(blocks) if len(blocks) > 1 else blocks[0])

    def evict(self) -> None:
        self._cache.evict_file(self._id)

    @property
    def weight_sum(self) -> int:
        return int(sum(int(kernels.weights(b).sum()) for b in self.iter_blocks()))

    def __repr__(self) -> str:
        return f"BatchFile({self.name}, {self.rows} rows, {self.num_blocks} blocks)"


__all__ = ["WEIGHT", "BatchFile", "BatchFileWriter", "WriteOptions", "write_batch_file"]
