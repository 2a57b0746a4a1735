"""EmitFinal: a view's rows emitted once, when a watermark makes them final.

State `<id>.pending`: the integrated changes of rows not final yet, keyed by every column
with the bounded column first. `step` adds a delta and emits nothing; `release(bound)` emits
the rows whose bounded column is below `bound` (no later delta can reach them), each once
with its integrated weight, and forgets them. So the output only ever inserts, and
integrating it gives the view's rows below the bound. Rows whose weight integrates to zero
or less, or whose bounded column is NULL, are forgotten without output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..batch import Batch
from ..location import StorageLocation
from ..schema import WEIGHT, ZSetSchema
from ..spine import Spine
from .operator import Operator, empty_delta, require_columns, to_table, weighted


class EmitFinal(Operator):
    def __init__(self, op_id: str, input_schema: pa.Schema, column: str, input: str = "in"):
        super().__init__(op_id, [input])
        require_columns(op_id, input_schema, [column], "column")
        self.column = column
        self._schema = input_schema
        order = [column, *(n for n in input_schema.names if n != column)]
        self._zs = ZSetSchema(tuple(input_schema.field(n) for n in order), ())
        self._pending: Spine | None = None

    @property
    def output_schema(self) -> pa.Schema:
        return self._schema

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "emit_final",
            "id": self.id,
            "input": self.inputs[0],
            "column": self.column,
            "columns": [(f.name, str(f.type)) for f in self._schema],
        }

    def open(self, location: StorageLocation, state: Mapping[str, Any]) -> None:
        self._pending = location.spine(self.spine_name("pending"), self._zs)

    def step(self, deltas: Mapping[str, pa.Table]) -> pa.Table:
        assert self._pending is not None
        d = weighted(deltas[self.inputs[0]])
        self._pending.insert(Batch.from_arrow(self._zs, d.select([*self._zs.key_names, WEIGHT])))
        return empty_delta(self._schema)

    def release(self, bound: Any) -> pa.Table:
        """The rows below `bound` (a value of the column's type), emitted once; counted as
        the operator's output."""
        assert self._pending is not None
        rows = to_table(self._pending.range(hi=(bound,)))
        self._pending.truncate_below((bound,))
        keep = pc.and_(pc.greater(rows.column(WEIGHT), 0), pc.is_valid(rows.column(self.column)))
        out = rows.filter(keep).select([*self._schema.names, WEIGHT])
        self.counters.rows_out += out.num_rows
        return out

    def metrics(self) -> dict[str, Any]:
        assert self._pending is not None
        return {"rows": self._pending.stats().rows}
