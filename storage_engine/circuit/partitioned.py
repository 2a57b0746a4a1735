"""Operators whose output for a partition is a function of the partition's live rows (top-N,
session windows): each keeps every live input row keyed by its partition columns (state
`<id>.rows`, a multiset); a step reads the touched partitions' rows (one vectorised seek),
computes the function before and after the delta, and emits the new result (+) and the old
one (-); what did not change cancels out. The function must depend on the rows alone, not
their arrival order, so that a restored checkpoint plus the same input gives the same output.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..batch import Batch
from ..location import StorageLocation
from ..schema import WEIGHT, ZSetSchema
from ..spine import Spine
from .operator import Operator, consolidate, empty_delta, require_columns, to_table, weighted

_ALL = "__all"


class PartitionedOperator(Operator):
    def __init__(
        self,
        op_id: str,
        input_schema: pa.Schema,
        partition_by: Sequence[str],
        output_schema: pa.Schema,
        input: str,
    ) -> None:
        super().__init__(op_id, [input])
        require_columns(op_id, input_schema, list(partition_by), "partition columns")
        self.input_schema = input_schema
        self.partition_by = list(partition_by)
        keys = [input_schema.field(c) for c in partition_by] or [pa.field(_ALL, pa.bool_())]
        self._keys = [f.name for f in keys]
        values = tuple(f for f in input_schema if f.name not in self._keys)
        self._zs = ZSetSchema(tuple(keys), values)
        self._out = output_schema
        self._rows: Spine | None = None

    @property
    def output_schema(self) -> pa.Schema:
        return self._out

    def open(self, location: StorageLocation, state: Mapping[str, Any]) -> None:
        self._rows = location.spine(self.spine_name("rows"), self._zs)

    def step(self, deltas: Mapping[str, pa.Table]) -> pa.Table:
        assert self._rows is not None
        d = weighted(deltas[self.inputs[0]])
        if not self.partition_by:
            d = d.append_column(_ALL, pa.array(np.ones(d.num_rows, np.bool_)))
        names = [f.name for f in (*self._zs.keys, *self._zs.values)]
        change = Batch.from_arrow(self._zs, d.select([*names, WEIGHT]))
        if len(change) == 0:
            return empty_delta(self._out)
        keys = to_table(change).select(self._keys).group_by(self._keys).aggregate([])
        old = self._rows.seek(keys)
        new = old.merge(change)
        self._rows.insert(change)
        before, after = self._result(to_table(old)), self._result(to_table(new))
        before = before.set_column(before.num_columns - 1, WEIGHT, pc.negate(before.column(WEIGHT)))
        # Either may be `empty_delta` (its weight not nullable): their schemas are unified.
        return consolidate(pa.concat_tables([after, before], promote_options="default"), self._out)

    def forget_below(self, input: str, bound: Any) -> None:
        """Partitions below `bound` in the first partition column are final: their rows go."""
        assert self._rows is not None
        if self.partition_by:
            self._rows.truncate_below((bound,))

    def _all_rows(self) -> pa.Table:
        """Every live row (with the partition columns first, as `_result` takes them)."""
        assert self._rows is not None
        return to_table(self._rows.to_batch())

    def _forget(self, rows: pa.Table) -> None:
        """Drop these rows (the input's columns and `__weight`) from the state, silently."""
        assert self._rows is not None
        if rows.num_rows == 0:
            return
        if not self.partition_by:
            rows = rows.append_column(_ALL, pa.array(np.ones(rows.num_rows, np.bool_)))
        names = [f.name for f in (*self._zs.keys, *self._zs.values)]
        gone = rows.select(names).append_column(WEIGHT, pc.negate(rows.column(WEIGHT)))
        self._rows.insert(Batch.from_arrow(self._zs, gone))

    @abstractmethod
    def _result(self, rows: pa.Table) -> pa.Table:
        """The output (with `__weight`) for these partitions' rows (`__weight`: each row's
        multiplicity; the partition columns first, `__all` when there are none)."""

    def _ordered(
        self, rows: pa.Table, order_by: Sequence[tuple[str, bool]]
    ) -> tuple[pa.Table, np.ndarray[Any, np.dtype[np.int64]]] | None:
        """The live rows of `rows` (once per unit of weight, without it) sorted by partition,
        then `order_by`, then the other columns ascending: a total order, so what depends on
        it depends on the rows alone. With where each partition starts; None if no row."""
        rows = live(rows)
        if rows.num_rows == 0:
            return None
        order = list(order_by)
        order += [(c, False) for c in self.input_schema.names if c not in dict(order_by)]
        rows = self._sorted(rows, order)
        return rows, self._starts(rows)

    def _sorted(self, rows: pa.Table, order: Sequence[tuple[str, bool]]) -> pa.Table:
        """`rows` sorted by partition, then by `order` ((column, descending) pairs); NULLs
        first ascending and last descending, as in Spark."""
        sort_keys: list[tuple[str, str]] = []
        sortable = {}
        # Each column after its validity (the per-key null placement of newer Arrow
        # releases is not needed).
        for i, (c, desc) in enumerate([(c, False) for c in self._keys] + list(order)):
            way = "descending" if desc else "ascending"
            sortable[f"n{i}"] = pc.is_valid(rows.column(c))
            sortable[f"v{i}"] = rows.column(c)
            sort_keys += [(f"n{i}", way), (f"v{i}", way)]
        return rows.take(pc.sort_indices(pa.table(sortable), sort_keys=sort_keys))

    def _starts(self, rows: pa.Table) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Where each partition starts in `rows` sorted by `_sorted` (NULL equal to NULL)."""
        new = changes(rows, self._keys)
        if len(new):
            new[0] = True
        return np.flatnonzero(new).astype(np.int64)

    def metrics(self) -> dict[str, Any]:
        assert self._rows is not None
        return {"rows": self._rows.stats().rows}


def changes(rows: pa.Table, columns: Sequence[str]) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Per row, whether any of `columns` differs from the row before (NULL equal to NULL,
    NaN to NaN, as SQL groups them; the first row: False)."""
    n = rows.num_rows
    new = np.zeros(n, np.bool_)
    for c in columns:
        col = rows.column(c)
        a, b = col.slice(1), col.slice(0, n - 1)
        same = pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))
        if pa.types.is_floating(col.type):
            both_nan = pc.and_(pc.is_nan(a), pc.is_nan(b))
            same = pc.or_(same, pc.fill_null(both_nan, False))
        new[1:] |= pc.invert(same).to_numpy(zero_copy_only=False)
    return new


def live(rows: pa.Table) -> pa.Table:
    """`rows` with a positive multiplicity, each once per unit of it, without `__weight`."""
    w = rows.column(WEIGHT).to_numpy()
    keep = np.repeat(np.arange(rows.num_rows), np.maximum(w, 0))
    return rows.take(pa.array(keep, pa.int64())).drop_columns([WEIGHT])


__all__ = ["PartitionedOperator", "changes", "live"]
