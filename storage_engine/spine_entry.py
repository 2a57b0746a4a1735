"""One batch of a spine (`Entry`): in memory, in a file, or both, with the reads a spine
makes of it whichever it is."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from . import kernels, lookup
from .batch import Batch
from .file_format import BatchFile
from .key_range import KeyRange
from .lookup.probes import ProbeEncodings


class Entry:
    """One batch of a spine: in memory, in a file, or both (after a commit wrote it).

    `mem` may be dropped (spilled) by another thread at any time, after `file` is set:
    readers read `mem` once into a local. `retired` is set when a merge replaced the entry;
    retired entries are never spilled again. Both change only under the spine's `_io_lock`.

    `sources`: for an in-memory merge output whose inputs were all file-backed, those files;
    their Z-set sum is this batch, so a checkpoint can list them instead of writing the
    output again (after a commit every step, merges then never cost a commit a write). They
    stay live while the entry has no file of its own.
    """

    __slots__ = ("busy", "file", "mem", "retired", "rows", "sources")

    def __init__(
        self,
        mem: Batch | None = None,
        file: BatchFile | None = None,
        sources: tuple[BatchFile, ...] | None = None,
    ) -> None:
        self.mem = mem
        self.file = file
        self.sources = sources
        self.rows = len(mem) if mem is not None else (file.rows if file is not None else 0)
        self.busy = False
        self.retired = False

    @property
    def mem_bytes(self) -> int:
        mem = self.mem
        return mem.nbytes if mem is not None else 0

    def files(self) -> tuple[BatchFile, ...]:
        """The files this entry's rows are durable in (its own, or its sources), or ()."""
        f = self.file
        if f is not None:
            return (f,)
        return self.sources or ()

    def all_files(self) -> tuple[BatchFile, ...]:
        """Every file the entry holds on to: its own and its sources. A commit may have read
        `files()` before the entry got a file of its own, so sources stay alive until the
        entry is retired."""
        f, src = self.file, self.sources or ()
        return (f, *src) if f is not None else src

    @property
    def nbytes(self) -> int:
        mem, file = self.mem, self.file
        if mem is not None:
            return mem.nbytes
        return file.size if file is not None else 0

    def chunks(self, rows: int) -> Iterator[kernels.Keyed]:
        """The rows in order, in chunks of about `rows`, each with its key encoding when
        the batch has one at hand (an in-memory batch made by a sort or merge): merging
        chunks then needs no new encoding of their string keys."""
        mem = self.mem
        if mem is not None:
            data, enc = mem.data, mem.known_key_encoding
            for start in range(0, data.num_rows, rows):
                stop = start + rows
                yield data.slice(start, rows), None if enc is None else enc.slice(start, stop)
        elif self.file is not None:
            for block in self.file.iter_blocks():
                yield block, None

    def key_bounds(self) -> tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]:
        """The batch's first and last key (None when empty)."""
        mem = self.mem
        if mem is not None:
            return mem.first_key(), mem.last_key()
        assert self.file is not None
        return self.file.first_key(), self.file.last_key()

    def seek(self, probes: pa.RecordBatch, probe_encodings: ProbeEncodings) -> kernels.Keyed:
        mem = self.mem
        if mem is not None:
            return mem.seek_probes_keyed(probes, probe_encodings)
        assert self.file is not None
        return self.file.seek_keyed(probes, probe_encodings)

    def find(self, probes: lookup.Probes) -> lookup.Found | None:
        mem = self.mem
        if mem is not None:
            return mem.find(probes)
        assert self.file is not None
        return self.file.find(probes)

    def range(self, lo: Sequence[Any] | None, hi: Sequence[Any] | None) -> pa.RecordBatch:
        mem = self.mem
        if mem is not None:
            return mem.range(lo, hi).data
        assert self.file is not None
        return self.file.range(lo, hi)

    def in_range(self, r: KeyRange) -> pa.RecordBatch:
        mem = self.mem
        if mem is not None:
            return r.select(mem.data, mem.schema.key_names)
        assert self.file is not None
        return self.file.in_range(r)

    def data(self) -> pa.RecordBatch:
        mem = self.mem
        if mem is not None:
            return mem.data
        assert self.file is not None
        return self.file.to_batch().data
