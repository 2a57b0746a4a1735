"""Which columns of each input table can reach a view that something reads: the rest need
not be read, parsed or handed to the dataflow at all.

Nexmark's tables are 22 columns wide and its queries read three to six of them; the widest
(`extra`, URLs, descriptions) are text that Spark would otherwise parse, convert and ship
to the driver for every row (docs/benchmarks.md).

A column is live when a read view's column depends on it, or when it decides which rows
exist or how they group, rank or cancel: filter predicates, grouping keys, aggregated
columns, window times. Operators that keep their input rows in state (`Join`, `Sessions`,
`Distinct`, `TopN`) keep every input column live, in every view, read or not: their state
must not depend on which views the sinks read today, as a later run with other sinks
restores it. (An aggregate's state is its groups' keys and accumulators: complete either
way.) A table's event-time column is always live: its watermark reads it.

Columns that are not live may be given to the dataflow as nulls: every read view's output,
and every operator's state, is the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from . import plan as P
from .expr import columns
from .planner import PlannedView


def live_columns(
    views: Mapping[str, PlannedView], read: Iterable[str], event_time: Mapping[str, str]
) -> dict[str, set[str]]:
    """Per input table, its live columns, given the views something reads (`read`) and each
    table's event-time column, if any (`event_time`). Every table the views scan is a key."""
    walk = _Walk(views)
    for name in read:
        root = views[name].root
        walk.need(root, set(root.schema.names))
    for view in views.values():
        walk.need(view.root, set())  # tables only unread views scan
    for table, column in event_time.items():
        walk.tables.setdefault(table, set()).add(column)
    return walk.tables


class _Walk:
    def __init__(self, views: Mapping[str, PlannedView]) -> None:
        self.views = views
        self.tables: dict[str, set[str]] = {}
        self._needed: dict[int, set[str]] = {}  # node -> its output columns found live

    def need(self, node: P.Node, wanted: set[str]) -> None:
        """Mark `wanted` of `node`'s output columns live, and what they need below it."""
        have = self._needed.get(id(node))
        if have is not None and wanted <= have:
            return
        have = self._needed.setdefault(id(node), set())
        have |= wanted
        if isinstance(node, P.Scan):
            self.tables.setdefault(node.table, set()).update(have)
        elif isinstance(node, P.ViewRef):
            self.need(self.views[node.view].root, have)
        elif isinstance(node, P.Join):
            self.need(node.left, set(node.left.schema.names))
            self.need(node.right, set(node.right.schema.names))
        elif isinstance(node, P.UnionAll):
            at = [i for i, n in enumerate(node.schema.names) if n in have]
            for child in node.inputs:
                self.need(child, {child.schema.names[i] for i in at})
        else:
            self.need(node.input, self._below(node, have))

    @staticmethod
    def _below(node: P.Node, have: set[str]) -> set[str]:
        """The input columns a one-input node needs for its live output columns `have`."""
        if isinstance(node, P.Filter):
            return have | columns(node.predicate)
        if isinstance(node, P.Project):
            return set().union(*(columns(e) for n, e in node.outputs if n in have))
        if isinstance(node, P.Windows):
            return (have - {node.start, node.end}) | {node.time}
        if isinstance(node, P.Aggregate):
            return set(node.keys) | {a.column for a in node.aggs if a.column is not None}
        if isinstance(node, P.Negate):
            return have
        assert isinstance(node, P.Sessions | P.Distinct | P.TopN)
        return set(node.input.schema.names)


__all__ = ["live_columns"]
