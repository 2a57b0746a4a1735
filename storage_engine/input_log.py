"""The input log: an append-only, offset-addressed log of records pushed through the ingest
API (seed 000's persisted ingress), read by the `log` source of a pipeline.

Layout: one directory per stream, one immutable segment per append,

    <first offset:020d>-<records:010d>.arrow     Arrow IPC file of the appended records

written as `.mut`, fsynced, renamed and the directory fsynced, so a segment either exists
whole or not at all, and readers in other processes (Spark's Python workers) see a
consistent prefix by listing the directory. Offsets are record positions: an append of n
records at end offset e covers [e, e + n). Appenders serialise on an flock; readers take no
lock. `truncate_below(offset)` deletes segments that end at or before `offset` (the runner
calls it with the oldest retained checkpoint's source offset).
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from .errors import CorruptionError, StorageError
from .fileio import FileLayer, PosixFileLayer, write_durably

_SEGMENT = re.compile(r"^(\d{20})-(\d{10})\.arrow$")
LOCK = "APPEND.lock"
LOG_DIR = "input-log"  # under a storage location: input-log/<stream>/<segment>


@dataclass(frozen=True)
class Segment:
    first: int
    count: int
    name: str

    @property
    def end(self) -> int:
        return self.first + self.count


def list_segments(fs: FileLayer, path: str) -> list[Segment]:
    """The whole segments in the log directory `path`, in offset order."""
    segs = [s for s in map(parse_segment, fs.listdir(path)) if s is not None]
    return sorted(segs, key=lambda s: s.first)


def parse_segment(name: str) -> Segment | None:
    m = _SEGMENT.match(name)
    return Segment(int(m.group(1)), int(m.group(2)), name) if m else None


def _fields(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)


class InputLog:
    def __init__(self, path: str, schema: pa.Schema, fs: FileLayer | None = None) -> None:
        self.path = path
        self.schema = schema
        self.fs = fs or PosixFileLayer()
        os.makedirs(path, exist_ok=True)

    def segments(self) -> list[Segment]:
        return list_segments(self.fs, self.path)

    def end(self) -> int:
        """The offset the next appended record gets."""
        segs = self.segments()
        return segs[-1].end if segs else 0

    def start(self) -> int:
        """The first offset still readable (after truncation)."""
        segs = self.segments()
        return segs[0].first if segs else self.end()

    def append(self, records: pa.Table | pa.RecordBatch, at_least: int = 0) -> tuple[int, int]:
        """Durably append; returns the records' offsets [first, end). `at_least`: the first
        offset the records may take (a log lost with its storage continues after what the
        restored state has consumed, instead of starting again at 0 below it)."""
        t = pa.Table.from_batches([records]) if isinstance(records, pa.RecordBatch) else records
        try:
            t = t.select(self.schema.names).cast(self.schema)
        except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise StorageError(
                f"records do not match the stream's schema {self.schema}: {e}"
            ) from None
        if t.num_rows == 0:
            end = self.end()
            return end, end
        fd = os.open(os.path.join(self.path, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            first = max(self.end(), at_least)
            sink = pa.BufferOutputStream()
            with pa.ipc.new_file(sink, self.schema) as w:
                w.write_table(t)
            name = f"{first:020d}-{t.num_rows:010d}.arrow"
            write_durably(self.fs, os.path.join(self.path, name), [sink.getvalue().to_pybytes()])
        finally:
            os.close(fd)
        return first, first + t.num_rows

    def read(self, start: int, stop: int) -> Iterator[pa.RecordBatch]:
        """Records with offsets in [start, stop), in order."""
        if start < self.start() and start < stop:
            raise StorageError(
                f"{self.path}: offset {start} was truncated (the log starts at {self.start()})"
            )
        for seg in self.segments():
            if seg.end <= start or seg.first >= stop:
                continue
            p = os.path.join(self.path, seg.name)
            try:
                table = pa.ipc.open_file(pa.memory_map(p)).read_all()
            except (pa.ArrowInvalid, OSError) as e:
                raise CorruptionError(p, f"unreadable log segment: {e}") from e
            if table.num_rows != seg.count:
                raise CorruptionError(p, f"{table.num_rows} records, its name says {seg.count}")
            table = self._conform(table, p)
            lo, hi = max(start, seg.first) - seg.first, min(stop, seg.end) - seg.first
            yield from table.slice(lo, hi - lo).to_batches()

    def _conform(self, table: pa.Table, path: str) -> pa.Table:
        """`table` in this log's schema, as readers address columns by position: a segment
        written under another schema (a spec that reordered, added or widened fields) is
        read by field name, a field it lacks as nulls (as Parquet files are read); one whose
        values do not cast is a clear error, not garbage."""
        if table.schema.equals(self.schema):
            return table
        present = set(table.schema.names)
        columns = [
            table.column(f.name) if f.name in present else pa.nulls(table.num_rows, f.type)
            for f in self.schema
        ]
        try:
            return pa.Table.from_arrays(columns, names=self.schema.names).cast(self.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise StorageError(
                f"{path}: the segment's schema ({_fields(table.schema)}) does not match the "
                f"stream's ({_fields(self.schema)}): {e}"
            ) from None

    def truncate_below(self, offset: int) -> int:
        """Delete segments entirely below `offset`; returns how many. The newest segment is
        always kept: its name carries the log's end offset."""
        gone = 0
        for seg in self.segments()[:-1]:
            if seg.end <= offset:
                self.fs.remove(os.path.join(self.path, seg.name))
                gone += 1
        if gone:
            self.fs.sync_dir(self.path)
        return gone
