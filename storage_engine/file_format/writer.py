"""Writing a batch file: sorted, consolidated rows streamed into blocks, then the schema,
the block index and the footer (the layout is in `layout.py`)."""

from __future__ import annotations

import os
import struct
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..batch import Batch
from ..fileio import FileLayer, _remove_quietly
from ..schema import ZSetSchema
from .bloom import PROBES, build_bloom, key_hashes
from .layout import (
    CHECKSUM,
    COMPRESSION_CODES,
    END_MAGIC,
    FLAG_BLOOM,
    FOOTER,
    FORMAT_VERSION,
    HEADER_SIZE,
    INDEX_COLUMNS,
    MAGIC,
    pad,
)


@dataclass(frozen=True)
class WriteOptions:
    block_rows: int = 65536
    compression: str | None = None  # None, "lz4" or "zstd"
    bloom: bool = True


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
    merge. On a spare core a large merge output then costs the merge alone, without the
    copies and the writes into the page cache. Blocks are written by one thread, in order.
    A one-block file starts no thread.
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
        flags |= COMPRESSION_CODES[options.compression] << 1
        probes = PROBES if options.bloom else 0
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
        return _EncodedBlock(msg, bloom, CHECKSUM(bloom, CHECKSUM(msg, 0)), block.num_rows)

    def _append(self, e: _EncodedBlock) -> None:
        offset = self._f.tell()
        self._f.write(e.msg)
        self._f.write(e.bloom)
        self._f.write(b"\0" * pad(e.msg.size + len(e.bloom)))
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
            self._f.write(b"\0" * pad(schema_msg.size))
            index_off = self._f.tell()
            index_msg = _message_bytes(self._index_batch(), pa.ipc.IpcWriteOptions())
            self._f.write(index_msg)
            self._f.write(b"\0" * pad(index_msg.size))
            meta_crc = CHECKSUM(index_msg, CHECKSUM(schema_msg, 0))
            body = FOOTER.pack(
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
            name: pa.array([e[name] for e in self._index], pa.uint64()) for name in INDEX_COLUMNS
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
