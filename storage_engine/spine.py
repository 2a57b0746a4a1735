"""The spine: one operator's state as a size-tiered LSM of batches.

Invariants:
- the spine's contents are the Z-set sum of its batches, minus rows below `lower_bound`;
- readers work on an immutable snapshot (a tuple of entries), so a merge swapping its output
  in never changes what an in-flight read sees;
- merges run on the location's merger threads and are swapped in only when complete; the
  inputs stay live (and in any checkpoint that lists them) until then;
- in-memory batches count against the location's memory budget; over it, merges stream their
  outputs to files (freeing their inputs' memory), and the largest idle batches are spilled to
  files when no merge of the spine is pending (a pending merge frees memory without writing
  its inputs twice) or an insert finds `_HARD_LIMIT` times the budget used. Large merge
  outputs always go to files. So state can exceed RAM.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from . import kernels, lookup
from .batch import Batch
from .errors import SchemaMismatchError, StorageError
from .file_format import BatchFile
from .lookup.probes import key_table, probe_table
from .merging import merge_stream
from .schema import ZSetSchema
from .spine_entry import Entry
from .spine_store import SpineStore

log = logging.getLogger(__name__)

_HARD_LIMIT = 1.5  # inserts spill themselves beyond this multiple of the budget


@dataclass(frozen=True)
class SpineStats:
    batches: int
    rows: int
    mem_bytes: int
    file_bytes: int
    merge_backlog: int
    merging: bool


def _lead_range(entries: Sequence[Entry]) -> tuple[Any, Any] | None:
    """The range of the first key column over the batches (None: unknown or empty)."""
    firsts, lasts = [], []
    for e in entries:
        first, last = e.key_bounds()
        if first is None or last is None:
            continue
        if first[0] is None or last[0] is None:
            return None
        firsts.append(first[0])
        lasts.append(last[0])
    return (min(firsts), max(lasts)) if firsts else None


class Spine:
    def __init__(
        self,
        op_id: str,
        schema: ZSetSchema,
        location: SpineStore,
        restored: Sequence[BatchFile] = (),
        lower_bound: Sequence[Any] | None = None,
    ) -> None:
        self.op_id = op_id
        self.schema = schema
        self._loc = location
        self._settings = location.settings
        for f in restored:
            if f.schema.fingerprint() != schema.fingerprint():
                raise SchemaMismatchError(
                    f"spine {op_id!r}: checkpointed batch {f.name} has a different schema"
                )
        self._entries: tuple[Entry, ...] = tuple(Entry(file=f) for f in restored)
        self.lower_bound: tuple[Any, ...] | None = tuple(lower_bound) if lower_bound else None
        self._lock = threading.Condition()
        self._io_lock = threading.Lock()
        self._spill_queued = False  # one writer of an entry's file at a time
        self._inflight = 0  # merge and spill tasks queued or running
        self._merging = 0  # merge tasks queued or running
        self.merge_error: BaseException | None = None

    # -- writes --------------------------------------------------------------------------

    def insert(self, batch: Batch) -> None:
        """Add a consolidated batch of changes (weights may be negative)."""
        if batch.schema != self.schema:
            raise SchemaMismatchError(f"spine {self.op_id!r}: batch schema differs")
        self._raise_merge_error()
        if len(batch) == 0:
            return
        entry = Entry(mem=batch)
        self._loc.budget.add(entry.mem_bytes)
        with self._lock:
            self._entries = (*self._entries, entry)
            self._schedule_locked()
            while (
                len(self._entries) > self._settings.max_batches_per_spine
                and self._inflight
                and self.merge_error is None
            ):
                self._lock.wait()
        self._relieve_memory()

    def truncate_below(self, bound: Sequence[Any]) -> None:
        """Forget rows whose key is below `bound` (monotone: a lower bound never decreases)."""
        b = tuple(bound)
        old = self.lower_bound
        if old is None:
            self.lower_bound = b
            return
        common = min(len(b), len(old))
        order = kernels.compare_rows(b[:common], old[:common])
        if order > 0 or (order == 0 and len(b) > len(old)):
            self.lower_bound = b

    # -- reads ---------------------------------------------------------------------------

    def snapshot(self) -> tuple[Entry, ...]:
        return self._entries

    def seek(self, keys: Any) -> Batch:
        """The consolidated rows for the given keys, across all batches (one vectorised probe).

        Materialized late (`lookup`) where the schema and data allow; otherwise each batch's
        rows are taken out and merged (`_seek_batches`). Both give the same rows."""
        entries = self.snapshot()
        lead = _lead_range(entries)
        found = self._find(entries, keys, lead) if lookup.applies(self.schema) else None
        if found is not None:
            return Batch(self.schema, self._apply_lower_bound(found))
        return self._seek_batches(entries, keys, lead)

    def _seek_batches(
        self, entries: Sequence[Entry], keys: Any, lead: tuple[Any, Any] | None
    ) -> Batch:
        """`seek` by the general path: every batch's found rows as a record batch (any
        column type), merged."""
        probes, encodings = probe_table(keys, self.schema, lead)
        if self.lower_bound is not None:
            below = kernels.count_below(probes, self.schema.key_names, self.lower_bound)
            probes = probes.slice(below)
            for cut, (enc, valid) in encodings.by_cut.items():
                assert valid is None  # probe_table's: one row per probe, in order
                encodings.by_cut[cut] = (enc.slice(below), None)
        parts = [e.seek(probes, encodings) for e in entries]
        merged = kernels.merge_keyed([p for p, _ in parts], self.schema, [k for _, k in parts])
        return Batch(self.schema, *merged)

    def _find(
        self, entries: Sequence[Entry], keys: Any, lead: tuple[Any, Any] | None
    ) -> pa.RecordBatch | None:
        """`seek` materialized late (`lookup`), or None where it does not apply (also when
        the key range is unknown: no batch, or null keys, which have no encoding)."""
        probes = lookup.Probes.of(keys, self.schema, lead) if lead is not None else None
        if probes is None:
            return None
        found = []
        for e in entries:
            f = e.find(probes)
            if f is None:
                return None
            found.append(f)
        return lookup.result(probes, found)

    def prefetch(self, keys: Any) -> None:
        """Hint the blocks that a coming `seek(keys)` will need."""
        probes = key_table(keys, self.schema)
        for e in self.snapshot():
            if e.mem is None and e.file is not None:
                e.file.prefetch([b for b, _, _ in e.file.candidate_blocks(probes)[1]])

    def scan(self, chunk_rows: int | None = None) -> Iterator[Batch]:
        """All live rows in key order, as consolidated chunks, streaming from disk."""
        rows = chunk_rows or self._settings.block_rows
        for rb in merge_stream([e.chunks(rows) for e in self.snapshot()], self.schema):
            rb = self._apply_lower_bound(rb)
            if rb.num_rows:
                yield Batch(self.schema, rb)

    def range(self, lo: Sequence[Any] | None = None, hi: Sequence[Any] | None = None) -> Batch:
        parts = [e.range(lo, hi) for e in self.snapshot()]
        return Batch(self.schema, self._apply_lower_bound(kernels.merge_sorted(parts, self.schema)))

    def to_batch(self) -> Batch:
        parts = [b.data for b in self.scan()]
        return Batch(self.schema, kernels.merge_sorted(parts, self.schema))

    def _apply_lower_bound(self, rb: pa.RecordBatch) -> pa.RecordBatch:
        if self.lower_bound is None:
            return rb
        return rb.slice(kernels.count_below(rb, self.schema.key_names, self.lower_bound))

    def stats(self) -> SpineStats:
        snap = self.snapshot()
        return SpineStats(
            batches=len(snap),
            rows=sum(e.rows for e in snap),
            mem_bytes=sum(e.mem_bytes for e in snap),
            file_bytes=sum(e.file.size for e in snap if e.file is not None),
            merge_backlog=len(self._plan(snap)),
            merging=self._inflight > 0,
        )

    # -- merging -------------------------------------------------------------------------

    def _level(self, rows: int) -> int:
        base = self._settings.merge_base_rows
        if rows <= base:
            return 0
        return 1 + int(math.log(rows / base, self._settings.merge_fanout))

    def _plan(self, snap: tuple[Entry, ...]) -> list[list[Entry]]:
        fanout = self._settings.merge_fanout
        levels: dict[int, list[Entry]] = {}
        for e in snap:
            if not e.busy:
                levels.setdefault(self._level(e.rows), []).append(e)
        return [group[:fanout] for _, group in sorted(levels.items()) if len(group) >= fanout]

    def _schedule_locked(self) -> None:
        if self.merge_error is not None:
            return
        for group in self._plan(self._entries):
            for e in group:
                e.busy = True
            self._inflight += 1
            self._merging += 1
            self._loc.merger.submit(functools.partial(self._merge, group))

    def _merge(self, group: list[Entry]) -> None:
        try:
            out = self._merge_entries(group)
        except BaseException as e:  # surfaced on the next insert or commit
            with self._lock:
                self.merge_error = e
                for g in group:
                    g.busy = False
                self._inflight -= 1
                self._merging -= 1
                self._lock.notify_all()
            return
        with self._lock, self._io_lock:
            ids = {id(g) for g in group}
            kept = tuple(e for e in self._entries if id(e) not in ids)
            self._entries = (*kept, out) if out is not None else kept
            # The group stops being charged and the output starts, in one step that no
            # spill can interleave with.
            released = 0
            retired: list[str] = []
            if out is not None and out.file is None:
                # Under the same lock as a spill giving an input its own file: the output
                # adopts exactly the files the inputs stand for now.
                durable = [g.files() for g in group]
                if all(durable) and sum(map(len, durable)) <= self._settings.merge_fanout**3:
                    out.sources = tuple(f for fs in durable for f in fs)
            adopted = {f.name for f in out.files()} if out is not None else set()
            for g in group:
                g.retired = True
                released += g.mem_bytes
                retired += [f.name for f in g.all_files() if f.name not in adopted]
            self._loc.budget.add((out.mem_bytes if out else 0) - released)
            self._inflight -= 1
            self._merging -= 1
            self._schedule_locked()
            self._lock.notify_all()
        try:
            self._loc.retire_files(retired)
            self._relieve_memory(background=True)
        except BaseException as e:  # the merge itself stands; surface the failure
            with self._lock:
                self.merge_error = e
                self._lock.notify_all()

    def _merge_entries(self, group: list[Entry]) -> Entry | None:
        total = sum(g.nbytes for g in group)
        limit = min(self._settings.max_memory_batch_bytes, self._loc.budget.limit // 4)
        to_file = total > limit or self._loc.budget.over()
        if not to_file:
            mems = [g.mem for g in group]  # read once: a spill may drop them meanwhile
            out, keys = kernels.merge_keyed(
                [m.data if m is not None else g.data() for g, m in zip(group, mems, strict=True)],
                self.schema,
                [m.known_key_encoding if m is not None else None for m in mems],
            )
            cut = self._apply_lower_bound(out)
            if cut.num_rows != out.num_rows:
                out, keys = cut, None
            if not out.num_rows:
                return None
            return Entry(mem=Batch(self.schema, out, keys))  # sources: set at the swap
        stream = merge_stream([g.chunks(self._settings.block_rows) for g in group], self.schema)
        f = self._loc.write_batch_stream(
            self.schema, (self._apply_lower_bound(c) for c in stream), durable=False
        )
        return Entry(file=f) if f is not None else None

    def _relieve_memory(self, background: bool = False) -> None:
        """Keep in-memory batches under the budget.

        While a merge of the spine is pending, nothing is spilled below `_HARD_LIMIT` times
        the budget: over the budget, merges write their outputs to files and free their
        inputs, and every merge ends by calling this again. (Spilling batches that a merge
        then read back and wrote again cost the over-budget ingest of `bench.engine` a
        quarter of its time: 1.8 extra writes of every row.) Otherwise dropping the memory
        copy of a batch that already has a file is free and comes first; then the largest
        batches are spilled. The inserting thread hands spilling to the merger thread and
        only spills itself (backpressure) past `_HARD_LIMIT` times the budget.
        """
        budget = self._loc.budget
        if not budget.over():
            return
        hard = budget.used > budget.limit * _HARD_LIMIT
        if self._merging and (background or not hard):
            return
        if not background and not hard:
            with self._lock:
                if self._spill_queued:
                    return
                self._spill_queued = True
                self._inflight += 1
            self._loc.merger.submit(self._background_spill)
            return
        snap = self.snapshot()
        self._drop_copies(snap)
        for e in sorted(snap, key=lambda e: -e.mem_bytes):
            if not budget.over():
                break
            if e.mem is None or e.retired:
                continue
            if self._ensure_file(e, self._spill_write, for_commit=False) is None:
                continue  # a merge replaced it meanwhile
            with self._io_lock:
                if e.mem is None or e.retired:
                    continue
                freed = e.mem_bytes
                e.mem = None
            budget.add(-freed)

    def _drop_copies(self, entries: Sequence[Entry]) -> None:
        """While over the budget, drop the memory copies of those of `entries` that have a
        file: free, as nothing is written."""
        budget = self._loc.budget
        for e in entries:
            if not budget.over():
                return
            with self._io_lock:
                if e.file is None or e.mem is None or e.retired:
                    continue
                freed = e.mem_bytes
                e.mem = None
            budget.add(-freed)

    def _spill_write(self, batch: Batch) -> BatchFile:
        return self._loc.write_batch(batch, durable=False)

    def _ensure_file(
        self, e: Entry, write: Callable[[Batch], BatchFile], for_commit: bool
    ) -> BatchFile | None:
        """The entry's own file, writing it if it has none. The write runs outside the locks
        (a merge swap or an insert must not wait for a file write); if another writer (spill
        or commit) won meanwhile, ours is discarded. A spill of an entry that a merge retired
        meanwhile is discarded too (None); a commit keeps its file, as its snapshot needs it.
        """
        f = e.file
        if f is not None:
            return f
        mem = e.mem
        if mem is None:  # dropped after a file was set
            return e.file
        new = write(mem)
        with self._io_lock:
            won = e.file is None and (for_commit or not e.retired)
            if won:
                e.file = new
            existing = e.file
        if not won:
            self._loc.discard_file(new)
        return existing

    def _background_spill(self) -> None:
        try:
            with self._lock:
                self._spill_queued = False
            self._relieve_memory(background=True)
        except BaseException as e:  # surfaced on the next insert or commit
            self.merge_error = e
        finally:
            with self._lock:
                self._inflight -= 1
                self._lock.notify_all()

    def wait_idle(self) -> None:
        """Block until no merge is running or schedulable (benchmarks, tests, shutdown)."""
        with self._lock:
            while self._inflight and self.merge_error is None:
                self._lock.wait()
        self._raise_merge_error()

    def _raise_merge_error(self) -> None:
        if self.merge_error is not None:
            raise StorageError(
                f"spine {self.op_id!r}: background merge failed: {self.merge_error}"
            ) from self.merge_error

    # -- checkpointing (called by the location) ------------------------------------------

    def persist(
        self, write: Callable[[Batch], BatchFile], entries: Sequence[Entry]
    ) -> list[BatchFile]:
        """Make the entries of a snapshot file-backed; return their files, in spine order.

        A commit persists the snapshot taken when it was requested, on the commit thread,
        while the spine goes on changing: entries are immutable apart from gaining a file.
        """
        self._raise_merge_error()
        files: list[BatchFile] = []
        for e in entries:
            files += self._durable_files(e, write)
        # Each of them has a file now: a step's batches that took the state over the budget
        # leave memory at its commit, not only once a background spill gets to them.
        self._drop_copies(entries)
        return files

    def _durable_files(
        self, e: Entry, write: Callable[[Batch], BatchFile]
    ) -> tuple[BatchFile, ...]:
        """Files holding the entry's rows on disk. Merge outputs and spills are written
        unsynced (`durable=False`): this waits for their fsync. An entry with no file is
        written now; one whose file (or a source's) fsync failed is written again to a new
        file, and the failed files are let go."""
        have = e.files()
        lost = [f for f in have if not f.durable()]
        if have and not lost:
            return have
        f = self._ensure_file(e, write, for_commit=True)  # a spill may have won meanwhile
        assert f is not None
        if not f.durable():
            lost.append(f)
            log.warning(
                "spine %r: fsync of %s failed; writing its rows to a new file", self.op_id, f.name
            )
            f = self._loc.write_batch_stream(
                self.schema, (rb for rb, _ in e.chunks(self._settings.block_rows))
            )
            assert f is not None  # entries are never empty
        with self._io_lock:
            e.file = f
            if e.sources:
                e.sources = tuple(s for s in e.sources if s not in lost) or None
        self._loc.retire_files(list({g.name for g in lost}))
        return (f,)

    def live_files(self) -> set[str]:
        return {f.name for e in self.snapshot() for f in e.all_files()}

    def release(self) -> None:
        self._loc.budget.add(-sum(e.mem_bytes for e in self.snapshot()))
        self._entries = ()
