"""Top-N per group: the first `limit` rows of each partition in an order, with their rank
(SQL's `ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...) <= N`), correct under retractions.

State: `<id>.rows`, every live input row keyed by its partition columns (a multiset). A step
reads the touched partitions' rows (one vectorised seek), ranks them before and after the
delta, and emits the new top rows (+1) and the old ones (-1); unchanged ones cancel out.
Ties in the order are broken by the other columns, ascending, so the top rows (and their
ranks) are a function of the partition's rows alone: a restored checkpoint plus the same
input gives the same output. NULLs come first in ascending order and last in descending
order, as in Spark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..batch import Batch
from ..location import StorageLocation
from ..schema import WEIGHT, ZSetSchema
from ..spine import Spine
from .operator import (
    CircuitError,
    Operator,
    consolidate,
    empty_delta,
    require_columns,
    to_table,
    weighted,
)

_ALL = "__all"


class TopN(Operator):
    def __init__(
        self,
        op_id: str,
        input_schema: pa.Schema,
        partition_by: Sequence[str],
        order_by: Sequence[tuple[str, bool]],
        limit: int,
        rank: str,
        input: str = "source",
    ) -> None:
        """`order_by`: (column, descending) pairs; `rank`: the output column of ranks."""
        super().__init__(op_id, [input])
        if limit < 1:
            raise CircuitError(f"operator {op_id!r}: the limit must be at least 1")
        require_columns(op_id, input_schema, list(partition_by), "partition columns")
        require_columns(op_id, input_schema, [c for c, _ in order_by], "order columns")
        if rank in input_schema.names:
            raise CircuitError(f"operator {op_id!r}: rank column {rank!r} is an input column")
        self.partition_by, self.order_by, self.limit = list(partition_by), list(order_by), limit
        self.input_schema = input_schema
        keys = [input_schema.field(c) for c in partition_by] or [pa.field(_ALL, pa.bool_())]
        self._keys = [f.name for f in keys]
        values = tuple(f for f in input_schema if f.name not in self._keys)
        self._zs = ZSetSchema(tuple(keys), values)
        self._out = input_schema.append(pa.field(rank, pa.int32()))
        self._rows: Spine | None = None

    @property
    def output_schema(self) -> pa.Schema:
        return self._out

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "top_n",
            "id": self.id,
            "input": self.inputs[0],
            "columns": [(f.name, str(f.type)) for f in self.input_schema],
            "partition_by": self.partition_by,
            "order_by": self.order_by,
            "limit": self.limit,
        }

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
        before, after = self._top(to_table(old)), self._top(to_table(new))
        before = before.set_column(before.num_columns - 1, WEIGHT, pc.negate(before.column(WEIGHT)))
        return consolidate(pa.concat_tables([after, before]), self._out)

    def _top(self, rows: pa.Table) -> pa.Table:
        """The first `limit` rows of each partition of `rows` (weights: multiplicities),
        ranked, each with weight 1."""
        w = rows.column(WEIGHT).to_numpy()
        keep = np.repeat(np.arange(rows.num_rows), np.maximum(w, 0))
        rows = rows.take(pa.array(keep, pa.int64())).drop_columns([WEIGHT])
        if rows.num_rows == 0:
            return empty_delta(self._out)
        order: list[tuple[str, str]] = []
        sortable = {}
        # Each column after its validity: NULLs first ascending, last descending (the
        # per-key null placement of newer Arrow releases is not needed).
        columns = [(c, False) for c in self._keys] + list(self.order_by)
        columns += [(c, False) for c in self.input_schema.names if c not in dict(self.order_by)]
        for i, (c, desc) in enumerate(columns):
            way = "descending" if desc else "ascending"
            sortable[f"n{i}"] = pc.is_valid(rows.column(c))
            sortable[f"v{i}"] = rows.column(c)
            order += [(f"n{i}", way), (f"v{i}", way)]
        table = pa.table(sortable)
        idx = pc.sort_indices(table, sort_keys=order)
        rows = rows.take(idx)
        starts = _partition_starts(rows.select(self._keys))
        lengths = np.diff(np.append(starts, rows.num_rows))
        rank = np.arange(rows.num_rows) - np.repeat(starts, lengths) + 1
        top = rank <= self.limit
        out = rows.filter(pa.array(top)).select(self.input_schema.names)
        out = out.append_column(self._out.field(-1), pa.array(rank[top], pa.int32()))
        return out.append_column(WEIGHT, pa.array(np.ones(out.num_rows, np.int64)))

    def metrics(self) -> dict[str, Any]:
        assert self._rows is not None
        return {"rows": self._rows.stats().rows}


def _partition_starts(keys: pa.Table) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Where each run of equal keys (NULL equal to NULL) starts in sorted `keys`."""
    n = keys.num_rows
    new = np.zeros(n, np.bool_)
    new[0] = True
    for col in keys.columns:
        a, b = col.slice(1), col.slice(0, n - 1)
        same = pc.fill_null(pc.equal(a, b), False)
        both_null = pc.and_(pc.is_null(a), pc.is_null(b))
        differ = pc.invert(pc.or_(same, both_null)).to_numpy(zero_copy_only=False)
        new[1:] |= differ
    return np.flatnonzero(new).astype(np.int64)


__all__ = ["TopN"]
