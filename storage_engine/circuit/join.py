"""Incremental inner equi-join of two streams.

State: `<id>.left` and `<id>.right`, each side's rows keyed by its join columns. With L, R
the sides before the step and dL, dR their deltas:

    d(L join R) = dL join (R + dR)  +  L join dR

so a step inserts dR, joins dL with the right rows of dL's keys (one seek), joins the left
rows of dR's keys (one seek, before dL is inserted) with dR, then inserts dL. Output weights
are the products of the inputs' weights. Null join keys never match (SQL semantics).
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
from .operator import CircuitError, Operator, consolidate, require_columns, to_table, weighted


class Join(Operator):
    def __init__(
        self,
        op_id: str,
        left_schema: pa.Schema,
        right_schema: pa.Schema,
        left_on: Sequence[str],
        right_on: Sequence[str],
        left: str = "left",
        right: str = "right",
    ) -> None:
        super().__init__(op_id, [left, right])
        if not left_on or len(left_on) != len(right_on):
            raise CircuitError(f"operator {op_id!r}: left_on and right_on must pair up columns")
        require_columns(op_id, left_schema, left_on, "left join columns")
        require_columns(op_id, right_schema, right_on, "right join columns")
        self.left_on, self.right_on = list(left_on), list(right_on)
        # Output: every left column, then the right's non-key columns; a right column whose
        # name the left already uses is prefixed with "right_".
        self._right_out: dict[str, str] = {}
        taken = set(left_schema.names)
        for f in right_schema:
            if f.name in self.right_on:
                continue
            name = f.name if f.name not in taken else f"right_{f.name}"
            if name in taken:
                raise CircuitError(f"operator {op_id!r}: output column {name!r} is ambiguous")
            taken.add(name)
            self._right_out[f.name] = name
        self._left_zs = _side_schema(left_schema, self.left_on)
        self._right_zs = _side_schema(right_schema, self.right_on)
        self._out = pa.schema(
            [
                *left_schema,
                *(right_schema.field(c).with_name(n) for c, n in self._right_out.items()),
            ]
        )
        self._out_w = self._out.append(pa.field(WEIGHT, pa.int64(), False))
        self._left_schema, self._right_schema = left_schema, right_schema
        self._l: Spine | None = None
        self._r: Spine | None = None

    @property
    def output_schema(self) -> pa.Schema:
        return self._out

    @property
    def right_names(self) -> dict[str, str]:
        """Each right non-key column's name in the output (prefixed where the left's
        names take it)."""
        return dict(self._right_out)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "join",
            "id": self.id,
            "inputs": list(self.inputs),
            "left": [(f.name, str(f.type)) for f in self._left_schema],
            "right": [(f.name, str(f.type)) for f in self._right_schema],
            "on": list(zip(self.left_on, self.right_on, strict=True)),
        }

    def open(self, location: StorageLocation, state: Mapping[str, Any]) -> None:
        self._l = location.spine(self.spine_name("left"), self._left_zs)
        self._r = location.spine(self.spine_name("right"), self._right_zs)

    def step(self, deltas: Mapping[str, pa.Table]) -> pa.Table:
        assert self._l is not None and self._r is not None
        dl = Batch.from_arrow(self._left_zs, weighted(deltas[self.inputs[0]]))
        dr = Batch.from_arrow(self._right_zs, weighted(deltas[self.inputs[1]]))
        parts = []
        if len(dr):
            self._r.insert(dr)
        if len(dl):
            right_now = self._r.seek(_keys(dl, self.left_on, self.right_on))
            parts.append(self._join(to_table(dl), to_table(right_now)))
        if len(dr):
            left_before = self._l.seek(_keys(dr, self.right_on, self.left_on))
            parts.append(self._join(to_table(left_before), to_table(dr)))
        if len(dl):
            self._l.insert(dl)
        if not parts:
            return self._out_w.empty_table()
        return consolidate(pa.concat_tables(parts), self._out)

    def forget_below(self, input: str, bound: Any) -> None:
        """Later rows of one side have their first join column at or above `bound`: the
        other side's rows below it can match nothing more."""
        assert self._l is not None and self._r is not None
        other = self._r if input == self.inputs[0] else self._l
        other.truncate_below((bound,))

    def _join(self, left: pa.Table, right: pa.Table) -> pa.Table:
        if left.num_rows == 0 or right.num_rows == 0:
            return self._out_w.empty_table()
        left = left.rename_columns([*left.column_names[:-1], "__wl"])
        right = right.rename_columns(
            [self._right_out.get(n, n) for n in right.column_names[:-1]] + ["__wr"]
        )
        j = left.join(right, self.left_on, self.right_on, join_type="inner", use_threads=False)
        w = pc.multiply(j.column("__wl"), j.column("__wr"))
        return j.select(self._out.names).append_column(WEIGHT, w).cast(self._out_w)

    def spine_input(self, spine: str) -> int:
        return 1 if spine == self.spine_name("right") else 0

    def metrics(self) -> dict[str, Any]:
        assert self._l is not None and self._r is not None
        return {"left_rows": self._l.stats().rows, "right_rows": self._r.stats().rows}


def _side_schema(schema: pa.Schema, on: Sequence[str]) -> ZSetSchema:
    keys = tuple(schema.field(c) for c in on)
    values = tuple(f for f in schema if f.name not in on)
    return ZSetSchema(keys, values)


def _keys(batch: Batch, names: Sequence[str], as_names: Sequence[str]) -> pa.Table:
    """The distinct join keys of `batch`'s `names` columns, renamed to the other side's."""
    t = to_table(batch).select(list(names)).rename_columns(list(as_names))
    mask = None
    for c in as_names:  # null keys never match: do not probe them
        v = pc.is_valid(t.column(c))
        mask = v if mask is None else pc.and_(mask, v)
    return t.filter(mask) if mask is not None else t
