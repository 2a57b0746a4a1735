"""Reading a batch file: a read-only, memory-mapped (or fetched on demand) file whose
header, footer, schema and block index are verified at open and whose blocks are verified
at their first read, then decoded lazily through the buffer cache.

The seek paths (block index, bloom filters, whole-file search) are the lookup package's
(`lookup/file_seek.py`); the layout is in `layout.py`.
"""

from __future__ import annotations

import functools
import itertools
import os
import struct
import zlib
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from .. import kernels
from ..batch import Batch
from ..cache import BufferCache
from ..errors import CorruptionError, FormatVersionError, SchemaMismatchError
from ..fileio import FileLayer
from ..key_range import KeyRange
from ..lookup.file_seek import FileSeeks
from ..schema import ZSetSchema
from .bloom import PROBES_V2
from .layout import (
    COMPRESSION_NAMES,
    END_MAGIC,
    FLAG_BLOOM,
    FOOTER_SIZE,
    FORMAT_VERSION,
    HEADER_SIZE,
    INDEX_COLUMNS,
    MAGIC,
    BlockInfo,
    checksum,
)

_file_ids = itertools.count(1)
_VIEW_CHARGE = 1024  # cache budget charged for a zero-copy block (Python objects only)


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


class BatchFile(FileSeeks):
    """A read-only, memory-mapped batch file. Blocks are decoded lazily via the cache; its
    seeks (`seek`, `seek_keyed`, `find`, `candidate_blocks`) are `FileSeeks`'s."""

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
        self.compression = COMPRESSION_NAMES.get((flags >> 1) & 3)
        self.has_bloom = bool(flags & FLAG_BLOOM)
        self.bloom_probes = probes if version >= 3 else PROBES_V2
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
        fields = [pa.field(n, pa.uint64()) for n in INDEX_COLUMNS]
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

    def in_range(self, r: KeyRange) -> pa.RecordBatch:
        """The rows in key range `r`, reading only the blocks whose key range may hold them
        (the block index: a point lookup reads one or two blocks)."""
        names = self.schema.key_names
        parts = [self.block(i) for i in r.blocks(self._firsts, self._lasts, names)]
        if not parts:
            return kernels.empty(self.schema)
        return r.select(pa.concat_batches(parts) if len(parts) > 1 else parts[0], names)

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
