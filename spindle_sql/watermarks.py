"""Event-time watermarks of input tables, and what they let the dataflow forget.

A table declared with an event-time column and a lateness has a watermark: after each step,
the largest event time of its rows so far minus the lateness. A row whose event time is
below the watermark of the step before (or NULL) is late: it is dropped at the scan and
counted (`Watermarks.admit`). So every later delta of the table has its event time at or
above the current watermark.

That lower bound travels through the plan (`column_bounds`): a filter keeps it, a
projection keeps it on the columns it copies, TUMBLE and HOP give `window_start` and
`window_end` their own (a row's windows end after it), SESSION gives `window_end` one, an
aggregate keeps it on its group columns, an inner join on key columns bounded on both
sides, top-N on its partition columns, a union on columns bounded in every input. A stateful
operator whose leading key is bounded can forget the state below the bound
(`Operator.forget_below`): groups, join rows, partitions and sessions no later row can
reach. What was emitted stays: the views' integrated output is the batch query over the
rows that were not late.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from . import plan as P
from .expr import Column

# A column's lower bound in every later delta: the least of (table watermark + offset µs).
Bound = frozenset[tuple[str, int]]


@dataclass(frozen=True)
class EventTime:
    """A table's event-time column and its allowed lateness (microseconds)."""

    column: str
    lateness_us: int


def _least(a: Bound, b: Bound) -> Bound:
    """The bound of a column that is either: the lesser of the two, per table."""
    out: dict[str, int] = {}
    for table, off in (*a, *b):
        out[table] = min(off, out.get(table, off))
    return frozenset(out.items())


def _shift(b: Bound, by: int) -> Bound:
    return frozenset((t, off + by) for t, off in b)


def column_bounds(
    node: P.Node,
    inputs: list[dict[str, Bound]],
    event_time: Mapping[str, EventTime],
    view_roots: Mapping[str, P.Node],
    known: Mapping[int, dict[str, Bound]],
) -> dict[str, Bound]:
    """The bounded columns of `node`'s output, given its inputs' (`inputs`, in
    `plan.children` order; `known`: every node computed so far, for view references)."""
    if isinstance(node, P.Scan):
        et = event_time.get(node.table)
        return {et.column: frozenset({(node.table, 0)})} if et is not None else {}
    if isinstance(node, P.ViewRef):
        root = view_roots[node.view]
        got = known.get(id(root), {})
        return {
            n: got[r] for n, r in zip(node.schema.names, root.schema.names, strict=True) if r in got
        }
    first = inputs[0] if inputs else {}
    if isinstance(node, P.Filter | P.Negate | P.Distinct):
        return dict(first)
    if isinstance(node, P.Project):
        return {
            name: first[e.name]
            for name, e in node.outputs
            if isinstance(e, Column) and e.name in first
        }
    if isinstance(node, P.Windows):
        out = dict(first)
        if node.time in first:
            t = first[node.time]
            # Windows end after their rows; the earliest starts a size before, plus 1 µs.
            out[node.start] = _shift(t, 1 - node.size_us)
            out[node.end] = _shift(t, 1)
        return out
    if isinstance(node, P.Sessions):
        # A step touches only sessions holding a row of it: they end after that row.
        return {node.end: _shift(first[node.time], 1)} if node.time in first else {}
    if isinstance(node, P.Aggregate):
        return {k: first[k] for k in node.keys if k in first}
    if isinstance(node, P.Upsert):
        return {}  # an upsert of an old key's row is never late (event times are refused)
    if isinstance(node, P.WindowAggregate):
        return {}  # its own watermark closes its windows (an operator spec's, no table's)
    if isinstance(node, P.TopN | P.RowsOver):
        return {k: first[k] for k in node.partition if k in first}
    if isinstance(node, P.Join):
        if node.kind != "inner":
            return {}
        left, right = inputs
        out = {}
        for lk, rk in zip(node.left_keys, node.right_keys, strict=True):
            if lk in left and rk in right:
                out[lk] = out[rk] = _least(left[lk], right[rk])
        return out
    if isinstance(node, P.UnionAll):
        out = {}
        for i, name in enumerate(node.schema.names):
            names = [n.schema.names[i] for n in node.inputs]
            if all(n in b for n, b in zip(names, inputs, strict=True)):
                bound: Bound = frozenset()
                for n, b in zip(names, inputs, strict=True):
                    bound = _least(bound, b[n]) if bound else b[n]
                out[name] = bound
        return out
    raise TypeError(f"no bounds for {type(node).__name__}")


class Watermarks:
    """The tables' watermarks (µs since the epoch; None before a row with an event time)
    and late rows counted, kept in checkpoints."""

    def __init__(self, event_time: Mapping[str, EventTime]) -> None:
        self.event_time = dict(event_time)
        self.watermark: dict[str, int | None] = {t: None for t in self.event_time}
        self.late_rows: dict[str, int] = {t: 0 for t in self.event_time}
        self._newest: dict[str, int] = {}

    def admit(self, table: str, delta: pa.Table) -> pa.Table:
        """The delta's rows that are not late (with an event time at or above the watermark
        of the step before); notes the newest event time for `advance`."""
        et = self.event_time.get(table)
        if et is None or delta.num_rows == 0:
            return delta
        t = pc.cast(delta.column(et.column), pa.int64())
        wm = self.watermark[table]
        keep = pc.is_valid(t) if wm is None else pc.fill_null(pc.greater_equal(t, wm), False)
        kept = delta.filter(keep)
        self.late_rows[table] += delta.num_rows - kept.num_rows
        newest = pc.max(pc.cast(kept.column(et.column), pa.int64())).as_py()
        if newest is not None:
            self._newest[table] = max(newest, self._newest.get(table, newest))
        return kept

    def observed(self) -> dict[str, int]:
        """The newest event time of each table's rows admitted since the last `advance`."""
        return dict(self._newest)

    def note(self, newest: Mapping[str, int]) -> None:
        """Take newest event times admitted elsewhere (another shard's part of the step's
        rows) into account for `advance`, as if their rows had been admitted here."""
        for table, t in newest.items():
            if table in self.event_time:
                self._newest[table] = max(int(t), self._newest.get(table, int(t)))

    def advance(self) -> None:
        """The step is done: each table's watermark moves to its newest event time minus
        the lateness (never back)."""
        for table, newest in self._newest.items():
            wm = newest - self.event_time[table].lateness_us
            old = self.watermark[table]
            self.watermark[table] = wm if old is None else max(old, wm)
        self._newest.clear()

    def value(self, bound: Bound) -> int | None:
        """The bound now, in µs (None while a table it rests on has no watermark)."""
        out: int | None = None
        for table, off in bound:
            wm = self.watermark.get(table)
            if wm is None:
                return None
            out = wm + off if out is None else min(out, wm + off)
        return out

    def state(self) -> dict[str, Any]:
        return {"watermarks": dict(self.watermark), "late_rows": dict(self.late_rows)}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Back to `state` (of `state()`) at a step's boundary: nothing admitted since."""
        self._newest.clear()
        for t, wm in (state.get("watermarks") or {}).items():
            if t in self.watermark:
                self.watermark[t] = None if wm is None else int(wm)
        for t, n in (state.get("late_rows") or {}).items():
            if t in self.late_rows:
                self.late_rows[t] = int(n)


__all__ = ["Bound", "EventTime", "Watermarks", "column_bounds"]
