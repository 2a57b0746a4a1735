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

import contextlib
import functools
import logging
import math
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from . import kernels, lookup
from .batch import Batch
from .batch_file import BatchFile
from .errors import SchemaMismatchError, StorageError
from .schema import ZSetSchema
from .settings import EngineSettings

log = logging.getLogger(__name__)

_HARD_LIMIT = 1.5  # inserts spill themselves beyond this multiple of the budget


class MemoryBudget:
    """Bytes of in-memory batches held by all spines of a location."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit = limit_bytes
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    def add(self, n: int) -> None:
        with self._lock:
            self._used += n

    def over(self) -> bool:
        return self._used > self.limit


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

    def seek(
        self, probes: pa.RecordBatch, probe_encodings: kernels.ProbeEncodings
    ) -> kernels.Keyed:
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

    def data(self) -> pa.RecordBatch:
        mem = self.mem
        if mem is not None:
            return mem.data
        assert self.file is not None
        return self.file.to_batch().data


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


def merge_stream(
    sources: Sequence[Iterator[kernels.Keyed]], schema: ZSetSchema
) -> Iterator[pa.RecordBatch]:
    """K-way merge of sorted, consolidated chunk streams into consolidated chunks, in order.

    Holds one chunk per source: each round emits every buffered row <= the smallest "last row"
    among sources that still have more to read, so equal rows always meet in one round.
    A chunk's key encoding (None: unknown) is sliced along with it.
    """
    names = schema.row_names
    its = list(sources)
    bufs: list[kernels.Keyed | None] = [next(it, None) for it in its]
    done = [b is None for b in bufs]
    while True:
        live = [i for i, b in enumerate(bufs) if b is not None and b[0].num_rows]
        if not live:
            return
        tails = [_last_row(bufs[i], names) for i in live if not done[i]]
        parts: list[kernels.Keyed] = []
        if not tails:
            parts = [b for b in (bufs[i] for i in live) if b is not None]
            for i in live:
                bufs[i] = None
        else:
            cut = tails[0]
            for t in tails[1:]:
                if kernels.compare_rows(t, cut) < 0:
                    cut = t
            for i in live:
                b = bufs[i]
                assert b is not None
                rb, enc = b
                n = kernels.count_at_most(rb, names, cut)
                if n:
                    parts.append((rb.slice(0, n), None if enc is None else enc.slice(0, n)))
                    bufs[i] = (rb.slice(n), None if enc is None else enc.slice(n))
        out = kernels.merge_keyed([p for p, _ in parts], schema, [e for _, e in parts])[0]
        if out.num_rows:
            yield out
        for i, b in enumerate(bufs):
            while not done[i] and (b is None or b[0].num_rows == 0):
                b = next(its[i], None)
                if b is None:
                    done[i] = True
                bufs[i] = b


def _last_row(chunk: kernels.Keyed | None, names: list[str]) -> tuple[Any, ...]:
    assert chunk is not None
    rb = chunk[0]
    return kernels.row_tuple(rb, names, rb.num_rows - 1)


class Merger:
    """Background threads per location running merge tasks for all its spines.

    A spine plans merges of disjoint groups (entries are marked busy), so several can run
    at once: with two threads, the small merges of new batches need not wait behind a
    large merge that is writing a file.
    """

    def __init__(self, threads: int = 1) -> None:
        self._q: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._threads = [
            threading.Thread(target=self._run, name=f"spine-merger-{i}", daemon=True)
            for i in range(threads)
        ]
        for t in self._threads:
            t.start()

    def submit(self, task: Callable[[], None]) -> None:
        self._q.put(task)

    def _run(self) -> None:
        while True:
            task = self._q.get()
            if task is None:
                return
            # Tasks record their own failures on their spine; this only keeps one escaped
            # exception from silently stopping every later merge of the location.
            with contextlib.suppress(BaseException):
                task()

    def close(self) -> None:
        for _ in self._threads:
            self._q.put(None)
        for t in self._threads:
            t.join()


class SpineStore(Protocol):
    """What a spine needs of its storage location (`location.StorageLocation`)."""

    @property
    def settings(self) -> EngineSettings: ...

    @property
    def budget(self) -> MemoryBudget: ...

    @property
    def merger(self) -> Merger: ...

    def write_batch(self, batch: Batch, durable: bool = True) -> BatchFile: ...

    def write_batch_stream(
        self, schema: ZSetSchema, chunks: Iterable[pa.RecordBatch], durable: bool = True
    ) -> BatchFile | None: ...

    def retire_files(self, names: Sequence[str]) -> None: ...

    def discard_file(self, f: BatchFile) -> None: ...


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
        probes, encodings = kernels.probe_table(keys, self.schema, lead)
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
        probes = kernels.key_table(keys, self.schema)
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
        with_files = [e for e in snap if e.file is not None]
        for e in [*with_files, *sorted(snap, key=lambda e: -e.mem_bytes)]:
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
