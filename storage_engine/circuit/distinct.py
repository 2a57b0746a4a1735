"""Distinct: the set of rows with positive multiplicity.

State `<id>.counts`: every row (all columns as the key) with its multiplicity. A step emits
+1 for rows whose multiplicity became positive and -1 for rows whose multiplicity stopped
being positive.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..batch import Batch
from ..location import StorageLocation
from ..schema import WEIGHT, ZSetSchema
from ..spine import Spine
from .operator import (
    Operator,
    empty_delta,
    require_columns,
    to_table,
    weighted,
)


class Distinct(Operator):
    def __init__(
        self,
        op_id: str,
        input_schema: pa.Schema,
        columns: Sequence[str] | None = None,
        input: str = "source",
    ) -> None:
        super().__init__(op_id, [input])
        cols = list(columns) if columns else list(input_schema.names)
        require_columns(op_id, input_schema, cols, "columns")
        self.columns = cols
        self._schema = pa.schema([input_schema.field(c) for c in cols])
        self._zs = ZSetSchema(tuple(self._schema), ())
        self._counts: Spine | None = None

    @property
    def output_schema(self) -> pa.Schema:
        return self._schema

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "distinct",
            "id": self.id,
            "input": self.inputs[0],
            "columns": [(f.name, str(f.type)) for f in self._schema],
        }

    def open(self, location: StorageLocation, state: Mapping[str, Any]) -> None:
        self._counts = location.spine(self.spine_name("counts"), self._zs)

    def step(self, deltas: Mapping[str, pa.Table]) -> pa.Table:
        assert self._counts is not None
        d = weighted(deltas[self.inputs[0]])
        change = Batch.from_arrow(self._zs, d.select([*self.columns, WEIGHT]))
        if len(change) == 0:
            return empty_delta(self._schema)
        keys = to_table(change).select(self.columns)
        old = self._counts.seek(keys)
        new = to_table(old.merge(change))
        old_t = to_table(old)
        # Rows of `change` are unique and sorted, and so are old and new: align by key via
        # one aggregation over their union (null-safe, unlike a join).
        parts = [
            old_t.append_column("__old", old_t.column(WEIGHT)).append_column(
                "__new", pa.array([0] * old_t.num_rows, pa.int64())
            ),
            new.append_column("__old", pa.array([0] * new.num_rows, pa.int64())).append_column(
                "__new", new.column(WEIGHT)
            ),
        ]
        union = pa.concat_tables([p.drop_columns([WEIGHT]) for p in parts])
        g = union.group_by(self.columns, use_threads=False).aggregate(
            [("__old", "sum"), ("__new", "sum")]
        )
        was = pc.greater(g.column("__old_sum"), 0)
        now = pc.greater(g.column("__new_sum"), 0)
        born = pc.and_(now, pc.invert(was))
        died = pc.and_(was, pc.invert(now))
        out_w = pc.if_else(born, 1, pc.if_else(died, -1, 0))
        out = g.select(self.columns).append_column(WEIGHT, pc.cast(out_w, pa.int64()))
        self._counts.insert(change)
        out = out.filter(pc.not_equal(out.column(WEIGHT), 0))
        return to_table(Batch.from_arrow(self._zs, out))

    def forget_below(self, input: str, bound: Any) -> None:
        assert self._counts is not None
        self._counts.truncate_below((bound,))

    def metrics(self) -> dict[str, Any]:
        assert self._counts is not None
        return {"rows": self._counts.stats().rows}
