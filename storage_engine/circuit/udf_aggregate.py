"""Group aggregate of user-defined aggregate functions (issue 52: Python aggregates in SQL),
correct under retractions. The functions are given (`AggregateFunction`); the engine never
imports them.

A function has an accumulator, a JSON value it creates empty, accumulates rows into and
finishes into the group's result; it may also retract rows from it and merge two.

- **Incremental** (every function retracts): state `<id>.acc`, per live group its row
  count and each function's accumulator (as JSON text). A step accumulates each touched
  group's inserted rows into a fresh accumulator and merges it into the group's (or
  accumulates into the group's, without `merge`), then retracts its deleted rows.
- **Recomputed** (a function cannot retract): state `<id>.rows`, the multiset of every
  group's input rows (the group columns and the functions' arguments). A step recomputes
  each touched group from all its live rows: created, accumulated, finished.

Either way, a step emits each touched group's old result row -1 and new one +1 (equal ones
cancel). A function sees a group's rows as one Arrow array per argument, in no particular
order, a row repeated as many times as it is in the group.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from ..batch import Batch
from ..location import StorageLocation
from ..schema import WEIGHT, ZSetSchema
from ..spine import Spine
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

Group = tuple[Any, ...]


class AggregateFunction(Protocol):
    """A user-defined aggregate as the operator calls it; each call names the group (for
    errors); accumulators are JSON values."""

    @property
    def retracts(self) -> bool: ...

    @property
    def merges(self) -> bool: ...

    def create(self, group: Group) -> Any: ...

    def accumulate(self, acc: Any, args: list[pa.Array], group: Group) -> Any: ...

    def retract(self, acc: Any, args: list[pa.Array], group: Group) -> Any: ...

    def merge(self, acc: Any, other: Any, group: Group) -> Any:
        """`acc` and `other` as one (only if `merges`)."""
        ...

    def finish(self, acc: Any, group: Group) -> Any:
        """The group's result, a Python value of the output column's type."""
        ...


@dataclass(frozen=True)
class UdfCall:
    """Output column `name`: `function` over input columns `columns`, of type `type`."""

    name: str
    function: AggregateFunction
    columns: tuple[str, ...]
    type: pa.DataType


class UdfGroupAggregate(Operator):
    def __init__(
        self,
        op_id: str,
        input_schema: pa.Schema,
        group_by: Sequence[str],
        calls: Sequence[UdfCall],
        input: str = "source",
    ) -> None:
        super().__init__(op_id, [input])
        if not calls:
            raise CircuitError(f"operator {op_id!r}: at least one aggregate is needed")
        require_columns(op_id, input_schema, list(group_by), "group_by columns")
        args = list(dict.fromkeys(c for call in calls for c in call.columns))
        require_columns(op_id, input_schema, args, "aggregated columns")
        self.group_by, self.calls = list(group_by), list(calls)
        groups = [input_schema.field(g) for g in group_by] or [pa.field("__all", pa.bool_())]
        self._keys = [f.name for f in groups]
        self._args = args
        # An argument that is also a group column is carried under another name.
        self._arg_names = {a: f"__v_{a}" if a in self._keys else a for a in args}
        self.incremental = all(c.function.retracts for c in calls)
        accs = [pa.field(f"__acc{i}", pa.string()) for i in range(len(calls))]
        self._acc_schema = ZSetSchema(tuple(groups), (pa.field(COUNT, pa.int64()), *accs))
        self._rows_schema = ZSetSchema(
            tuple(groups),
            tuple(input_schema.field(a).with_name(self._arg_names[a]) for a in args),
        )
        self._out_schema = pa.schema(
            [*(input_schema.field(g) for g in group_by), *(pa.field(c.name, c.type) for c in calls)]
        )
        self._state: Spine | None = None

    @property
    def output_schema(self) -> pa.Schema:
        return self._out_schema

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "udf_aggregate",
            "id": self.id,
            "input": self.inputs[0],
            "group_by": self._keys,
            "aggregates": [(c.name, repr(c.function), list(c.columns)) for c in self.calls],
            "incremental": self.incremental,
        }

    def open(self, location: StorageLocation, state: Mapping[str, Any]) -> None:
        if self.incremental:
            self._state = location.spine(self.spine_name("acc"), self._acc_schema)
        else:
            self._state = location.spine(self.spine_name("rows"), self._rows_schema)

    def spines(self) -> list[Spine]:
        assert self._state is not None
        return [self._state]

    def forget_below(self, input: str, bound: Any) -> None:
        """Groups below `bound` in the first group column get no more rows."""
        for sp in self.spines():
            sp.truncate_below((bound,))

    def metrics(self) -> dict[str, Any]:
        assert self._state is not None
        return {"rows": self._state.stats().rows}

    def step(self, deltas: Mapping[str, pa.Table]) -> pa.Table:
        delta = weighted(deltas[self.inputs[0]])
        if not self.group_by:
            delta = delta.append_column("__all", pa.array([True] * delta.num_rows, pa.bool_()))
        cols = {k: delta.column(k) for k in self._keys}
        cols.update({self._arg_names[a]: delta.column(a) for a in self._args})
        delta = pa.table({**cols, WEIGHT: delta.column(WEIGHT)})
        delta = consolidate(delta, delta.schema.remove(delta.num_columns - 1))
        if delta.num_rows == 0:
            return empty_delta(self._out_schema)
        touched = delta.select(self._keys).group_by(self._keys, use_threads=False).aggregate([])
        if self.incremental:
            return self._step_incremental(delta, touched)
        return self._step_recomputed(delta, touched)

    # -- recomputed ----------------------------------------------------------------------

    def _step_recomputed(self, delta: pa.Table, touched: pa.Table) -> pa.Table:
        assert self._state is not None
        change = Batch.from_arrow(self._rows_schema, delta)
        old = self._state.seek(touched)
        new = old.merge(change)
        self._state.insert(change)
        old_out = self._recomputed(to_table(old))
        new_out = self._recomputed(to_table(new))
        return self._change(old_out, new_out)

    def _recomputed(self, rows: pa.Table) -> pa.Table:
        """The result row of every group with rows in `rows` (a multiset with weights)."""
        w = np.asarray(rows.column(WEIGHT).to_numpy())
        if (w < 0).any():
            raise CircuitError(f"operator {self.id!r}: a group's rows went below zero")
        expanded = rows.take(pa.array(np.repeat(np.arange(len(w)), w)))
        lists = self._lists(expanded)
        values: list[list[Any]] = [[] for _ in self.calls]
        for i, group in enumerate(_groups(lists, self._keys)):
            for j, call in enumerate(self.calls):
                f = call.function
                args = [lists.column(f"{self._arg_names[a]}_list")[i].values for a in call.columns]
                values[j].append(f.finish(f.accumulate(f.create(group), args, group), group))
        return self._rows(lists, values)

    # -- incremental ---------------------------------------------------------------------

    def _step_incremental(self, delta: pa.Table, touched: pa.Table) -> pa.Table:
        assert self._state is not None
        old = to_table(self._state.seek(touched)).drop_columns([WEIGHT])
        w = np.asarray(delta.column(WEIGHT).to_numpy())
        pos = self._lists(delta.take(pa.array(np.repeat(np.arange(len(w)), np.maximum(w, 0)))))
        neg = self._lists(delta.take(pa.array(np.repeat(np.arange(len(w)), np.maximum(-w, 0)))))
        added = dict(zip(_groups(pos, self._keys), range(pos.num_rows), strict=True))
        removed = dict(zip(_groups(neg, self._keys), range(neg.num_rows), strict=True))
        counts = delta.group_by(self._keys, use_threads=False).aggregate([(WEIGHT, "sum")])
        count_of = dict(
            zip(
                _groups(counts, self._keys), counts.column(f"{WEIGHT}_sum").to_pylist(), strict=True
            )
        )
        # Accumulators as JSON text: a function may change one in place, so each use
        # (the old result, the new accumulator) parses its own.
        before: dict[Group, tuple[int, list[str]]] = {
            g: (n, list(accs))
            for g, n, *accs in zip(
                _groups(old, self._keys),
                old.column(COUNT).to_pylist(),
                *(old.column(f"__acc{j}").to_pylist() for j in range(len(self.calls))),
                strict=True,
            )
        }
        old_out = self._finished(before)
        after: dict[Group, tuple[int, list[str]]] = {}
        for g in _groups(touched, self._keys):
            n, texts = before.get(g, (0, None))
            n += int(count_of[g])
            if n < 0:
                raise CircuitError(f"operator {self.id!r}: group {g} has fewer than no rows")
            if n == 0:
                continue
            accs = []
            for j, call in enumerate(self.calls):
                acc = json.loads(texts[j]) if texts is not None else call.function.create(g)
                acc = self._apply(call, acc, g, pos, added.get(g), neg, removed.get(g))
                accs.append(_json(acc, call))
            after[g] = (n, accs)
        state = [_with_weight(old, -1), _with_weight(self._acc_table(after), 1)]
        self._state.insert(Batch.from_arrow(self._acc_schema, pa.concat_tables(state)))
        return self._change(old_out, self._finished(after))

    def _apply(
        self,
        call: UdfCall,
        acc: Any,
        g: Group,
        pos: pa.Table,
        i: int | None,
        neg: pa.Table,
        k: int | None,
    ) -> Any:
        f = call.function
        if i is not None:
            args = [pos.column(f"{self._arg_names[a]}_list")[i].values for a in call.columns]
            if f.merges:
                acc = f.merge(acc, f.accumulate(f.create(g), args, g), g)
            else:
                acc = f.accumulate(acc, args, g)
        if k is not None:
            args = [neg.column(f"{self._arg_names[a]}_list")[k].values for a in call.columns]
            acc = f.retract(acc, args, g)
        return acc

    def _acc_table(self, groups: Mapping[Group, tuple[int, list[str]]]) -> pa.Table:
        cols: dict[str, Any] = {}
        for j, f in enumerate(self._acc_schema.keys):
            cols[f.name] = pa.array([g[j] for g in groups], f.type)
        cols[COUNT] = pa.array([n for n, _ in groups.values()], pa.int64())
        for j in range(len(self.calls)):
            cols[f"__acc{j}"] = pa.array([a[j] for _, a in groups.values()], pa.string())
        return pa.table(cols, schema=self._acc_schema.arrow.remove(len(self._acc_schema.arrow) - 1))

    def _finished(self, groups: Mapping[Group, tuple[int, list[str]]]) -> pa.Table:
        keys = pa.table(
            {
                f.name: pa.array([g[j] for g in groups], f.type)
                for j, f in enumerate(self._acc_schema.keys)
            }
        )
        values = [
            [c.function.finish(json.loads(accs[j]), g) for g, (_, accs) in groups.items()]
            for j, c in enumerate(self.calls)
        ]
        return self._rows(keys, values)

    # -- shared --------------------------------------------------------------------------

    def _lists(self, rows: pa.Table) -> pa.Table:
        """Per group of `rows`: its keys, and each argument's values as a list."""
        args = [self._arg_names[a] for a in self._args]
        return rows.group_by(self._keys, use_threads=False).aggregate([(a, "list") for a in args])

    def _rows(self, keys: pa.Table, values: list[list[Any]]) -> pa.Table:
        cols = [keys.column(k) for k in self.group_by]
        cols += [pa.array(v, c.type) for v, c in zip(values, self.calls, strict=True)]
        return pa.Table.from_arrays(cols, schema=self._out_schema)

    def _change(self, old: pa.Table, new: pa.Table) -> pa.Table:
        both = pa.concat_tables([_with_weight(old, -1), _with_weight(new, 1)])
        return consolidate(both, self._out_schema)


def _groups(t: pa.Table, keys: Sequence[str]) -> list[Group]:
    return list(zip(*(t.column(k).to_pylist() for k in keys), strict=True))


def _with_weight(t: pa.Table, w: int) -> pa.Table:
    return t.append_column(WEIGHT, pa.array(np.full(t.num_rows, w, np.int64)))


def _json(acc: Any, call: UdfCall) -> str:
    try:
        return json.dumps(acc, allow_nan=True)
    except (TypeError, ValueError) as e:
        raise CircuitError(
            f"aggregate {call.name}: an accumulator must be a JSON value (numbers, strings, "
            f"lists, dicts): {e}"
        ) from None


__all__ = ["AggregateFunction", "UdfCall", "UdfGroupAggregate"]
