"""Which columns of each input table can reach a view that something reads: the rest need
not be read, parsed or handed to the dataflow at all.

Nexmark's tables are 22 columns wide and its queries read three to six of them; the widest
(`extra`, URLs, descriptions) are text that Spark would otherwise parse, convert and ship
to the driver for every row (docs/benchmarks.md).

A column is live when a read view's column depends on it, or when it decides which rows
exist or how they group, join, rank or cancel: filter and join predicates, grouping keys,
aggregated columns, window and session times.

No operator's state may depend on which views the sinks read today: a later run with other
sinks restores it. So an operator that keeps rows in state (`Join`, `Sessions`) keeps live
every column that any view, read or not, could compute from its output (found by a first
walk from every view's whole output), and `Distinct`, `TopN`, `RowsOver` and `Upsert` keep every
input column (whether two rows are one, or which of two tied rows ranks first, depends on
all of them).
An aggregate's state is its groups' keys and accumulators: complete either way. Views
reach each other only through their outputs, so adding a view changes no operator's live
columns. A table's event-time column is always live: its watermark reads it.

Columns that are not live may be given to the dataflow as nulls: every read view's output,
and every operator's state in the columns any view can see, is the same.
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
    every = _Walk(views, None)
    for view in views.values():
        every.need(view.root, set(view.root.schema.names))
    walk = _Walk(views, every.needed)
    for name in read:
        root = views[name].root
        walk.need(root, set(root.schema.names))
    for view in views.values():
        walk.need(view.root, set())  # tables only unread views scan
    for table, column in event_time.items():
        walk.tables.setdefault(table, set()).add(column)
    return walk.tables


class _Walk:
    def __init__(
        self, views: Mapping[str, PlannedView], stored: dict[int, set[str]] | None
    ) -> None:
        """`stored`: per node, the output columns any view could compute from (the walk
        from every view's whole output), which a stateful node's state keeps; None: this
        is that walk."""
        self.views = views
        self.stored = stored
        self.tables: dict[str, set[str]] = {}
        self.needed: dict[int, set[str]] = {}  # node -> its output columns found live

    def need(self, node: P.Node, wanted: set[str]) -> None:
        """Mark `wanted` of `node`'s output columns live, and what they need below it."""
        have = self.needed.get(id(node))
        if have is not None and wanted <= have:
            return
        have = self.needed.setdefault(id(node), set())
        have |= wanted
        kept = have if self.stored is None else self.stored[id(node)]
        if isinstance(node, P.Scan):
            self.tables.setdefault(node.table, set()).update(have)
        elif isinstance(node, P.ViewRef):
            self.need(self.views[node.view].root, have)
        elif isinstance(node, P.Join):
            used = kept | set(node.left_keys) | set(node.right_keys)
            if node.residual is not None:
                used |= columns(node.residual)
            self.need(node.left, used & set(node.left.schema.names))
            self.need(node.right, used & set(node.right.schema.names))
        elif isinstance(node, P.Sessions):
            self.need(
                node.input, (kept - {node.start, node.end}) | set(node.partition) | {node.time}
            )
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
            return set(node.keys) | {c for a in node.aggs for c in a.reads}
        if isinstance(node, P.Negate):
            return have
        assert isinstance(node, P.Distinct | P.TopN | P.RowsOver | P.Upsert)
        return set(node.input.schema.names)


__all__ = ["live_columns"]
