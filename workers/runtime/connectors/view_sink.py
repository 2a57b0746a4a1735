"""The `view` sink: the integrated output of an operator kept in a spine of the pipeline's
storage location, so it is checkpointed with the state and rolled back by the restore
itself; readable while the pipeline runs (`lookup`: by key range, or by page) as of the
newest step it wrote, which it publishes with the spine's snapshot after each step."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from pipeline_spec.model import ViewSink as ViewSinkSpec
from storage_engine import Batch, Spine, StorageLocation, ZSetSchema
from storage_engine.errors import CorruptionError
from storage_engine.kernels import merge_sorted
from storage_engine.key_range import KeyRange
from storage_engine.merging import merge_stream
from storage_engine.schema import WEIGHT
from storage_engine.spine_entry import Entry

from .sink import SinkContext

# A merge may delete a replaced file under a lookup of an older snapshot; it then reads
# the newer one, which does not list it. More misses in a row are a real fault.
_READ_ATTEMPTS = 3


@dataclass(frozen=True)
class ViewRows:
    """A view's rows in a key range (or a page of all of them) as of `step`."""

    step: int
    rows: pa.Table


class ViewSink:
    """The integrated output of an operator, in a spine checkpointed with the state."""

    rolls_back = True  # by the restore of the state it is checkpointed with

    def __init__(self, spec: ViewSinkSpec, schema: pa.Schema, location: StorageLocation) -> None:
        self.name = spec.name
        self._last = 0  # the spine does not say which step it holds: this run's
        self.schema = ZSetSchema(tuple(schema), ())
        self.spine: Spine = location.spine(f"view.{spec.name}", self.schema)
        # The newest step's contents for readers on other threads: swapped whole.
        self._published: tuple[int, tuple[Entry, ...]] = (0, self.spine.snapshot())

    def rollback(self, step: int) -> None:
        self._last = min(self._last, step)  # the spine was restored with the checkpoint
        self._published = (step, self.spine.snapshot())

    def sync(self) -> None:
        pass  # checkpointed with the state

    def last_step(self) -> int:
        return self._last

    def write(self, step: int, delta: pa.Table) -> None:
        self._last = step
        if delta.num_rows:
            self.spine.insert(Batch.from_arrow(self.schema, delta))
        self._published = (step, self.spine.snapshot())

    def lookup(self, within: KeyRange | None, offset: int = 0, limit: int = 100) -> ViewRows:
        """The view's rows as of the newest step written (or rolled back to): those in key
        range `within` (its values as text: ValueError naming a column that they are not
        of), or all, `limit` of them from `offset`. Safe from any thread."""
        typed = None if within is None else within.typed(self.schema.keys)
        for attempt in itertools.count(1):
            step, entries = self._published
            try:
                if typed is None:
                    live = self._page(entries, offset + limit)
                else:
                    live = _positive(
                        merge_sorted([e.in_range(typed) for e in entries], self.schema)
                    )
                break
            except (OSError, CorruptionError):
                if attempt >= _READ_ATTEMPTS or self._published[1] is entries:
                    raise
        t = pa.Table.from_batches([live]).select(list(self.schema.key_names))
        return ViewRows(step, t.slice(offset, limit))

    def _page(self, entries: Sequence[Entry], upto: int) -> pa.RecordBatch:
        """The first `upto` live rows in key order, streamed: no more is read."""
        got, n = [], 0
        chunks = merge_stream([e.chunks(max(upto, 1)) for e in entries], self.schema)
        for rb in chunks:
            rb = _positive(rb)
            got.append(rb)
            n += rb.num_rows
            if n >= upto:
                break
        if not got:
            return Batch.empty(self.schema).data
        return pa.concat_batches(got)

    def forget_through(self, step: int) -> None:
        pass  # checkpointed with the state

    def close(self) -> None:
        pass


def _positive(rb: pa.RecordBatch) -> pa.RecordBatch:
    """The rows the view holds: a consolidated batch's rows of positive weight."""
    return rb.filter(pa.compute.greater(rb.column(WEIGHT), 0))


def open_sink(spec: ViewSinkSpec, ctx: SinkContext) -> ViewSink:
    return ViewSink(spec, ctx.schema, ctx.location)


__all__ = ["ViewRows", "ViewSink", "open_sink"]
