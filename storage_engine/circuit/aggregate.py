"""Group aggregate: count, sum, avg, min, max per group, correct under retractions.

State (spines of the location):
- `<id>.acc`: one row per live group: the group columns, then `__count` (sum of weights) and,
  per aggregated column, `__n_<col>` (weighted count of non-null values) and, for sum/avg,
  `__s_<col>` (weighted sum). Linear aggregates update in O(1) per group and step.
- `<id>.vals.<col>` for min/max: the multiset of (group, value) with multiplicities, since
  a retraction of the current minimum must find the next one.

A step partially aggregates the delta (Arrow hash aggregation), reads the old accumulators
and value multisets of the touched groups (one vectorised seek each), and emits
(old output row, -1) and (new output row, +1) for every touched group; rows that did not
change cancel out. A group exists while its `__count` is positive.

Checkpoints of operator specs written before issue 49 may hold, in a min/max multiset, only
each step's smallest and largest value per group (Spark pre-aggregated their insert-only
input then): that is enough as long as the input stays insert-only, as an operator spec's
does (no value between a group's extremes can become its minimum or maximum).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .. import encoding
from ..batch import Batch
from ..location import StorageLocation
from ..lookup.seek import seek_positions
from ..schema import WEIGHT, ZSetSchema
from ..spine import Spine
from .decimals import (
    avg_type,
    decimal_average,
    narrowed,
    sum_type,
    times,
    widened,
)
from .operator import (
    COUNT,
    CircuitError,
    Operator,
    consolidate,
    empty_delta,
    require_columns,
    to_table,
    weighted,
)

AggFunc = Literal["count", "sum", "avg", "min", "max"]
ACC = "acc"  # `GroupAggregate.partial`'s accumulators


@dataclass(frozen=True)
class Aggregate:
    """One output column: `func` over `column` (count without a column counts rows)."""

    name: str
    func: AggFunc
    column: str | None = None


class GroupAggregate(Operator):
    def __init__(
        self,
        op_id: str,
        input_schema: pa.Schema,
        group_by: Sequence[str],
        aggregates: Sequence[Aggregate],
        input: str = "source",
    ) -> None:
        super().__init__(op_id, [input])
        if not aggregates:
            raise CircuitError(f"operator {op_id!r}: at least one aggregate is needed")
        require_columns(op_id, input_schema, list(group_by), "group_by columns")
        cols = [a.column for a in aggregates if a.column is not None]
        require_columns(op_id, input_schema, cols, "aggregated columns")
        for a in aggregates:
            if a.column is None and a.func != "count":
                raise CircuitError(f"operator {op_id!r}: aggregate {a.name!r} needs a column")
        names = [*group_by, *(a.name for a in aggregates)]
        if len(set(names)) != len(names):
            raise CircuitError(f"operator {op_id!r}: duplicate output column names {names}")
        self.group_by = list(group_by)
        self.aggregates = list(aggregates)
        self.input_schema = input_schema
        self._groups = [input_schema.field(g) for g in group_by]
        if not self._groups:  # a global aggregate: one group with a constant key
            self._groups = [pa.field("__all", pa.bool_())]
        self._keys = [f.name for f in self._groups]
        self._counted = sorted({a.column for a in aggregates if a.column is not None})
        self._summed = sorted(
            {a.column for a in aggregates if a.func in ("sum", "avg") and a.column is not None}
        )
        self._ordered = sorted(
            {a.column for a in aggregates if a.func in ("min", "max") and a.column is not None}
        )
        acc_values = [pa.field(COUNT, pa.int64())]
        acc_values += [pa.field(f"__n_{c}", pa.int64()) for c in self._counted]
        acc_values += [
            pa.field(f"__s_{c}", sum_type(input_schema.field(c).type)) for c in self._summed
        ]
        self._acc_schema = ZSetSchema(tuple(self._groups), tuple(acc_values))
        # Without min/max and with NumPy-typed accumulators a step can add by position.
        self._linear = not self._ordered and all(
            f.type in (pa.int64(), pa.float64()) for f in acc_values
        )
        self._vals_schemas = {
            c: ZSetSchema(
                tuple(self._groups), (input_schema.field(c).with_name(self._val_name(c)),)
            )
            for c in self._ordered
        }
        out = [input_schema.field(g) for g in group_by]
        for a in aggregates:
            if a.func == "count":
                out.append(pa.field(a.name, pa.int64()))
            elif a.func == "avg":
                assert a.column is not None
                out.append(pa.field(a.name, avg_type(input_schema.field(a.column).type)))
            elif a.func == "sum":
                assert a.column is not None
                out.append(pa.field(a.name, sum_type(input_schema.field(a.column).type)))
            else:
                assert a.column is not None
                out.append(pa.field(a.name, input_schema.field(a.column).type))
        self._out_schema = pa.schema(out)
        self._acc: Spine | None = None
        self._vals: dict[str, Spine] = {}

    @property
    def output_schema(self) -> pa.Schema:
        return self._out_schema

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "group_aggregate",
            "id": self.id,
            "input": self.inputs[0],
            "group_by": [(f.name, str(f.type)) for f in self._groups],
            "aggregates": [(a.name, a.func, a.column) for a in self.aggregates],
            "columns": {c: str(self.input_schema.field(c).type) for c in self._counted},
        }

    def open(self, location: StorageLocation, state: Mapping[str, Any]) -> None:
        self._acc = location.spine(self.spine_name("acc"), self._acc_schema)
        self._vals = {
            c: location.spine(self.spine_name(f"vals.{c}"), s)
            for c, s in self._vals_schemas.items()
        }

    # -- the step ------------------------------------------------------------------------

    def step(self, deltas: Mapping[str, pa.Table]) -> pa.Table:
        delta = self._with_group_key(weighted(deltas[self.inputs[0]]))
        if delta.num_rows == 0:
            return empty_delta(self._out_schema)
        return self._merge(self._partial(delta), self._changes(delta))

    def partial(self, delta: pa.Table) -> dict[str, pa.Table]:
        """Part of a step's delta reduced where it is (a shard's, before the exchange):
        under `ACC` the change of every accumulator per group, under each min/max column's
        name the change of its value multiset, consolidated. `apply_partials` of the
        shards' parts, concatenated, equals `step` of their whole delta."""
        rows = self._with_group_key(weighted(delta))
        out = {ACC: self._partial(rows)}
        for c, change in self._changes(rows).items():
            out[c] = consolidate(change, change.schema.remove(change.num_columns - 1))
        return out

    def apply_partials(self, parts: Mapping[str, pa.Table]) -> pa.Table:
        """A step from the partials of its delta's parts (`partial`), counted as `apply`
        counts a step (in rows of partials)."""
        acc = parts.get(ACC)
        if acc is None or acc.num_rows == 0:
            return empty_delta(self._out_schema)
        started = time.perf_counter()
        changes = {
            c: parts.get(c, self._vals_schemas[c].arrow.empty_table()) for c in self._ordered
        }
        out = self._merge(self._group_sum(acc), changes)
        self._count(sum(t.num_rows for t in parts.values()), out.num_rows, started)
        return out

    def _changes(self, delta: pa.Table) -> dict[str, pa.Table]:
        """Per min/max column, the change of its value multiset (rows of keys, value,
        weight): the delta's non-null values."""
        return {
            c: pa.table(
                [*(delta.column(k) for k in self._keys), delta.column(c), delta.column(WEIGHT)],
                names=[*self._keys, self._val_name(c), WEIGHT],
            ).filter(pc.is_valid(delta.column(c)))
            for c in self._ordered
        }

    def _val_name(self, c: str) -> str:
        """The value column of `c`'s multiset: `c`, unless `c` is also a group key (a spine
        row cannot hold two columns of one name; such a min/max is the key itself, but the
        multiset keeps the operator uniform). Existing state never had such a column."""
        return f"__v_{c}" if c in self._keys else c

    def _merge(self, partial: pa.Table, changes: Mapping[str, pa.Table]) -> pa.Table:
        """Apply a step: `partial` holds the change of every accumulator per group (one row
        per group), `changes` the change of each min/max multiset (rows of keys, value,
        weight)."""
        if self._linear:
            return self._merge_linear(partial)
        return self._merge_general(partial, changes)

    def _merge_general(self, partial: pa.Table, changes: Mapping[str, pa.Table]) -> pa.Table:
        assert self._acc is not None
        keys = partial.select(self._keys)
        old_acc = to_table(self._acc.seek(keys)).drop_columns([WEIGHT])
        new_acc = self._sum_accs(old_acc, partial)
        old_vals = {c: self._vals[c].seek(keys) for c in self._ordered}
        new_vals: dict[str, pa.Table] = {}
        for c in self._ordered:
            change = Batch.from_arrow(self._vals_schemas[c], changes[c])
            new_vals[c] = to_table(old_vals[c].merge(change))
            self._vals[c].insert(change)
        old_out = self._outputs(old_acc, {c: to_table(v) for c, v in old_vals.items()})
        new_out = self._outputs(new_acc, new_vals)
        # State: retract the old accumulators, insert the new (dropping emptied groups).
        live = new_acc.filter(pc.not_equal(new_acc.column(COUNT), 0))
        self._acc.insert(
            Batch.from_arrow(
                self._acc_schema,
                pa.concat_tables([_with_weight(old_acc, -1), _with_weight(live, 1)]),
            )
        )
        change = pa.concat_tables([_with_weight(old_out, -1), _with_weight(new_out, 1)])
        return consolidate(change, self._out_schema)

    def _merge_linear(self, partial: pa.Table) -> pa.Table:
        """`_merge` without min/max and with NumPy accumulators: the step's groups are
        sorted once, and the old accumulators, found by one seek, are added to their rows by
        position, so no hash aggregation or sort of old and new rows is needed. The output
        delta comes in group order, a group's retraction before its insertion."""
        assert self._acc is not None
        fresh = Batch.from_arrow(self._acc_schema, partial)  # one row per group: key order
        enc = fresh.known_key_encoding
        keys = fresh.data.select(self._keys)
        old = self._acc.seek(keys)
        at = seek_positions(fresh.data, old.data.select(self._keys), self._acc_schema, enc)
        if len(at) != len(old):  # not one state row per group: leave it to the general path
            return self._merge_general(partial, {})
        values = [f.name for f in self._acc_schema.values]
        new = {v: _numpy(fresh.data.column(v)).copy() for v in values}
        for v in values:
            new[v][at] += _numpy(old.data.column(v))
        count = new[COUNT]
        live = np.flatnonzero(count != 0)
        new_rb = pa.RecordBatch.from_arrays(
            [
                *keys.take(pa.array(live)).columns,
                *(pa.array(new[v][live]) for v in values),
                pa.array(np.ones(len(live), np.int64)),
            ],
            schema=self._acc_schema.arrow,
        )
        live_enc = (
            None if enc is None else encoding.Encoding([c[live] for c in enc.cols], enc.layouts)
        )
        self._acc.insert(old.negate().merge(Batch(self._acc_schema, new_rb, live_enc)))

        # Output rows: a group's old row where it had one, its new row where it has one,
        # except where the two are equal (the group's result did not change).
        old_out = self._linear_outputs(old.data.select(self._keys), old.data)
        new_out = self._linear_outputs(
            keys, pa.RecordBatch.from_pydict({v: new[v] for v in values})
        )
        old_live = _numpy(old.data.column(COUNT)) > 0
        new_live = count > 0
        same = np.zeros(len(count), dtype=bool)
        aggregates = [a.name for a in self.aggregates]  # the keys are equal by construction
        same[at] = old_live & new_live[at] & _rows_equal(old_out, new_out, at, aggregates)
        keep_old = old_live & ~same[at]
        keep_new = new_live & ~same
        rank = np.concatenate([2 * at[keep_old], 2 * np.flatnonzero(keep_new) + 1])
        rows = pa.concat_tables(
            [
                _with_weight(old_out.filter(keep_old), -1),
                _with_weight(new_out.filter(keep_new), 1),
            ]
        )
        return rows.take(pa.array(np.argsort(rank, kind="stable")))

    def _linear_outputs(self, keys: pa.RecordBatch, acc: pa.RecordBatch) -> pa.Table:
        """Output rows, one per row of `acc` (accumulators without min/max; the caller
        drops the rows of groups whose count is not positive)."""
        cols: list[Any] = [keys.column(k) for k in self.group_by]
        for a in self.aggregates:
            if a.func == "count":
                cols.append(acc.column(COUNT if a.column is None else f"__n_{a.column}"))
                continue
            cols.append(
                self._sum_or_avg(a, acc.column(f"__n_{a.column}"), acc.column(f"__s_{a.column}"))
            )
        return pa.Table.from_arrays(
            [pc.cast(c, f.type) for c, f in zip(cols, self._out_schema, strict=True)],
            schema=self._out_schema,
        )

    def _with_group_key(self, t: pa.Table) -> pa.Table:
        if self.group_by:
            return t
        return t.append_column("__all", pa.array([True] * t.num_rows, pa.bool_()))

    def _partial(self, delta: pa.Table) -> pa.Table:
        """Per group of the delta: the change of every accumulator."""
        w = delta.column(WEIGHT)
        cols: dict[str, pa.Array | pa.ChunkedArray] = {k: delta.column(k) for k in self._keys}
        cols[COUNT] = w
        for c in self._counted:
            valid = pc.cast(pc.is_valid(delta.column(c)), pa.int64())
            cols[f"__n_{c}"] = pc.multiply(valid, w)
        for c in self._summed:
            t = sum_type(self.input_schema.field(c).type)
            x = pc.cast(delta.column(c), t)
            cols[f"__s_{c}"] = pc.fill_null(times(x, w, t, self._what(c)), pa.scalar(0, t))
        table = pa.table(cols)
        return self._group_sum(table)

    def _group_sum(self, table: pa.Table) -> pa.Table:
        """Per group, the sum of each accumulator. Decimal sums are taken on 76 digits (Arrow's
        own decimal128 sum wraps past 2^127) and must fit their accumulator's type."""
        values = [f.name for f in self._acc_schema.values]
        decimals = [v for v in values if pa.types.is_decimal(table.schema.field(v).type)]
        for v in decimals:
            i = table.schema.get_field_index(v)
            table = table.set_column(i, v, widened(table.column(v)))
        agg = table.group_by(self._keys, use_threads=False).aggregate([(v, "sum") for v in values])
        agg = agg.select([*self._keys, *(f"{v}_sum" for v in values)])
        agg = agg.rename_columns([*self._keys, *values])
        for v in decimals:
            i = agg.schema.get_field_index(v)
            t = self._acc_schema.arrow.field(v).type
            agg = agg.set_column(i, v, narrowed(agg.column(v), t, self._what(v[len("__s_") :])))
        return agg.cast(self._acc_schema.arrow.remove(len(self._acc_schema.arrow) - 1))

    def _what(self, c: str) -> str:
        """How an overflow error names the sum of column `c`."""
        return f"operator {self.id!r}: the sum of column {c!r}"

    def _sum_accs(self, old: pa.Table, partial: pa.Table) -> pa.Table:
        both = pa.concat_tables([old.cast(partial.schema), partial])
        return self._group_sum(both)

    def _outputs(self, acc: pa.Table, vals: Mapping[str, pa.Table]) -> pa.Table:
        """Output rows of the groups in `acc` whose count is positive.

        Accumulators and value multisets are aligned by one hash aggregation over their
        union (not a join: a join never matches null group keys, SQL's GROUP BY does).
        """
        helpers = [f.name for f in self._acc_schema.values]
        parts = [acc.select([*self._keys, *helpers])]
        for c in self._ordered:
            v = vals[c]
            v = v.filter(pc.greater(v.column(WEIGHT), 0))
            side = {k: v.column(k) for k in self._keys}
            for h in helpers:
                side[h] = pa.nulls(v.num_rows, acc.schema.field(h).type)
            parts.append(pa.table(side).append_column(f"__x_{c}", v.column(self._val_name(c))))
        for i, p in enumerate(parts):
            for c in self._ordered:
                if f"__x_{c}" not in p.column_names:
                    t = self.input_schema.field(c).type
                    p = p.append_column(f"__x_{c}", pa.nulls(p.num_rows, t))
            parts[i] = p.select([*self._keys, *helpers, *(f"__x_{c}" for c in self._ordered)])
        union = pa.concat_tables(parts)
        specs = [(h, "sum") for h in helpers]
        for c in self._ordered:
            specs += [(f"__x_{c}", "min"), (f"__x_{c}", "max")]
        g = union.group_by(self._keys, use_threads=False).aggregate(specs)
        g = g.filter(pc.greater(pc.fill_null(g.column(f"{COUNT}_sum"), 0), 0))
        if g.num_rows == 0:
            return self._out_schema.empty_table()
        cols: list[pa.Array | pa.ChunkedArray] = [g.column(k) for k in self.group_by]
        for a in self.aggregates:
            if a.func == "count":
                name = COUNT if a.column is None else f"__n_{a.column}"
                cols.append(pc.fill_null(g.column(f"{name}_sum"), 0))
                continue
            assert a.column is not None
            n = pc.fill_null(g.column(f"__n_{a.column}_sum"), 0)
            if a.func in ("sum", "avg"):
                s = g.column(f"__s_{a.column}_sum")
                cols.append(self._sum_or_avg(a, n, s))
            else:
                cols.append(g.column(f"__x_{a.column}_{a.func}"))
        return pa.Table.from_arrays(
            [pc.cast(c, f.type) for c, f in zip(cols, self._out_schema, strict=True)],
            schema=self._out_schema,
        )

    def _sum_or_avg(self, a: Aggregate, n: Any, s: Any) -> Any:
        """A sum or avg output column from the non-null count `n` and sum `s` (null without
        values, as in SQL); a decimal average as Spark rounds it (`decimals`)."""
        none = pc.equal(n, 0)
        if a.func == "sum":
            return pc.if_else(none, pa.scalar(None, s.type), s)
        t = self._out_schema.field(a.name).type
        if pa.types.is_decimal(t):
            return decimal_average(s, n, t, f"operator {self.id!r}: avg of column {a.column!r}")
        avg = pc.divide(pc.cast(s, pa.float64()), pc.cast(n, pa.float64()))
        return pc.if_else(none, pa.scalar(None, pa.float64()), avg)

    def spines(self) -> list[Spine]:
        assert self._acc is not None
        return [self._acc, *self._vals.values()]

    def forget_below(self, input: str, bound: Any) -> None:
        """Groups below `bound` in the first group column get no more rows: their
        accumulators and multisets go (every spine is keyed by the groups first)."""
        for sp in self.spines():
            sp.truncate_below((bound,))

    def metrics(self) -> dict[str, Any]:
        assert self._acc is not None
        return {"groups": self._acc.stats().rows}


def _with_weight(t: pa.Table, w: int) -> pa.Table:
    return t.append_column(WEIGHT, pa.array(np.full(t.num_rows, w, np.int64)))


def _numpy(col: pa.Array | pa.ChunkedArray) -> np.ndarray[Any, Any]:
    """A column without nulls (an accumulator) as NumPy."""
    return np.asarray(col.to_numpy())


def _rows_equal(
    a: pa.Table, b: pa.Table, at: npt.NDArray[np.int64], names: Sequence[str]
) -> npt.NDArray[np.bool_]:
    """Whether row i of `a` equals row at[i] of `b` in the numeric columns `names` (nulls
    equal nulls; floats compare by bits, as the engine's encoding orders them)."""
    eq = np.ones(a.num_rows, dtype=bool)
    b = b.take(pa.array(at))
    for name in names:
        x, y = a.column(name), b.column(name)
        xn = np.asarray(x.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        yn = np.asarray(y.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        xv = np.asarray(x.fill_null(pa.scalar(0, x.type)).to_numpy())
        yv = np.asarray(y.fill_null(pa.scalar(0, y.type)).to_numpy())
        if xv.dtype.kind == "f":
            xv, yv = xv.view(np.int64), yv.view(np.int64)
        eq &= (xn == yn) & (xn | (xv == yv))
    return eq
