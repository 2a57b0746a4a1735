"""How a dataflow's stateful plan nodes become the engine's operators: each operator's id,
its columns' and inputs' names. These make up the state's layout (spine names, the
fingerprint), so they are what a checkpoint must find again.

Two layouts, one per pipeline language:

- SQL views (`Layout()`): operator ids `<view>.<kind><n>`, numbered in the order the view's
  plan is walked; columns named by position (`c0`, `c1`, ...; a join's sides `l<i>`,
  `r<i>`), aggregates `a<j>`, inputs `in` (a join's `left`, `right`), so that the layout
  does not depend on the planner's numbering of internal names.
- Operator specs (`Layout(names)`, `operators.py`): one operator per view, its id the
  view's (the spec's operator name); columns, aggregates and inputs under the user's names
  (`names`: internal name -> user's; inputs are the tables read, `source` or a join's
  `<op>.left` and `<op>.right`). That is the layout these pipelines' checkpoints have had
  since before they were planned as views, so they restore as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, get_args

import pyarrow as pa

from storage_engine.circuit import Aggregate as EngineAggregate
from storage_engine.circuit import (
    Distinct,
    GroupAggregate,
    Join,
    Operator,
    RowsOver,
    SessionWindows,
    TopN,
    UdfCall,
    UdfGroupAggregate,
    Upsert,
    WindowAggregate,
    WindowCall,
)
from storage_engine.schema import WEIGHT

from . import plan as P
from .engine_columns import engine_type, from_engine
from .watermarks import Bound


@dataclass
class Stateful:
    op: Operator
    inputs: tuple[str, ...]  # the operator's input names, one per child node
    columns: tuple[list[str], ...]  # per input, the operator's column names
    # The operator's output columns in the node's order, where the operator orders them
    # otherwise (a bounded key moved to the front).
    output: list[str] | None = None
    # Per operator input, the bound of its leading key (see `watermarks.py`).
    leads: dict[str, Bound] = dataclasses.field(default_factory=dict)


def positional(schema: pa.Schema, prefix: str) -> tuple[pa.Schema, dict[str, str]]:
    """`schema` with its columns named `<prefix><position>`, and the renaming."""
    names = {f.name: f"{prefix}{i}" for i, f in enumerate(schema)}
    fields = [f.with_name(names[f.name]).with_type(engine_type(f.type)) for f in schema]
    return pa.schema(fields), names


class Layout:
    def __init__(self, names: Mapping[str, str] | None = None) -> None:
        self.names = None if names is None else dict(names)

    @property
    def sql(self) -> bool:
        """Whether this is the SQL views' layout (SQL's semantics where they differ: an
        aggregate without GROUP BY has a row over no input; fingerprints cover the plan)."""
        return self.names is None

    def _columns(self, schema: pa.Schema, prefix: str) -> tuple[pa.Schema, dict[str, str]]:
        if self.names is None:
            return positional(schema, prefix)
        c = {f.name: self.names[f.name] for f in schema}
        fields = [f.with_name(c[f.name]).with_type(engine_type(f.type)) for f in schema]
        return pa.schema(fields), c

    def _id(self, view: str, kind: str, counter: Iterator[int]) -> str:
        return f"{view}.{kind}{next(counter)}" if self.names is None else view

    def _input(self, node: P.Node, default: str) -> str:
        """An operator's input name: the table its input reads, for operator specs."""
        if self.names is None:
            return default
        while not isinstance(node, P.Scan):
            (node,) = P.children(node)
        return node.table

    def _aggs(self, aggs: tuple[P.AggCall, ...], c: Mapping[str, str]) -> list[EngineAggregate]:
        out = []
        for j, a in enumerate(aggs):
            assert a.func != "udf", "planned apart (grouping.grouped)"
            name = f"a{j}" if self.names is None else self.names[a.name]
            func: Any = a.func  # a window function only where `_over_aggs` replaces it
            out.append(EngineAggregate(name, func, c[a.column] if a.column else None))
        return out

    def _over_aggs(
        self, aggs: tuple[P.AggCall, ...], c: Mapping[str, str]
    ) -> list[EngineAggregate | WindowCall]:
        """A `RowsOver`'s aggregates and window functions, as the engine's."""
        out: list[EngineAggregate | WindowCall] = list(self._aggs(aggs, c))
        for j, a in enumerate(aggs):
            if a.func in get_args(P.WindowFunc):
                column = c[a.column] if a.column else None
                default = c[a.default] if a.default else None
                out[j] = WindowCall(out[j].name, a.func, column, a.offset, default)  # type: ignore[arg-type]
        return out

    def _udf_calls(self, aggs: tuple[P.AggCall, ...], c: Mapping[str, str]) -> list[UdfCall]:
        """A Python aggregates' node's calls (`grouping.grouped` plans them apart)."""
        return [
            UdfCall(f"a{j}", a.udf, tuple(c[x] for x in a.columns), a.type)
            for j, a in enumerate(aggs)
        ]

    def operator(
        self,
        node: P.Node,
        view: str,
        counter: Iterator[int],
        bounds: Mapping[int, dict[str, Bound]],
    ) -> Stateful | None:
        """The engine operator of a stateful node (None for a linear one). A key column
        bounded by a watermark leads the operator's keys, so that the state below the bound
        can be forgotten."""
        if isinstance(node, P.Join):
            lb, rb = bounds[id(node.left)], bounds[id(node.right)]
            pairs = sorted(
                zip(node.left_keys, node.right_keys, strict=True),
                key=lambda p: -((p[0] in lb) + (p[1] in rb)),
            )  # stable: unchanged without bounds
            left, ln = self._columns(node.left.schema, "l")
            right, rn = self._columns(node.right.schema, "r")
            sides = (self._input(node.left, "left"), self._input(node.right, "right"))
            op: Operator = Join(
                self._id(view, "join", counter),
                left,
                right,
                [ln[k] for k, _ in pairs],
                [rn[k] for _, k in pairs],
                left=sides[0],
                right=sides[1],
            )
            lk, rk = pairs[0]
            leads = {
                **({sides[0]: lb[lk]} if lk in lb else {}),
                **({sides[1]: rb[rk]} if rk in rb else {}),
            }
            return Stateful(op, sides, (left.names, right.names), leads=leads)
        if isinstance(node, P.Upsert):
            return self._upsert(node)
        stateful = P.Aggregate | P.WindowAggregate | P.TopN | P.RowsOver | P.Sessions | P.Distinct
        if not isinstance(node, stateful):
            return None
        schema, c = self._columns(node.input.schema, "c")
        below = bounds[id(node.input)]
        inp = self._input(node.input, "in")
        output = None
        if isinstance(node, P.Sessions):
            op = SessionWindows(
                self._id(view, "session", counter),
                schema,
                [c[k] for k in node.partition],
                c[node.time],
                node.gap_us,
                "start",
                "end",
                input=inp,
            )
            leads = {inp: below[node.time]} if node.time in below else {}
            return Stateful(op, (inp,), (schema.names,), leads=leads)
        if isinstance(node, P.WindowAggregate):
            op = WindowAggregate(
                self._id(view, "window", counter),
                schema,
                c[node.time],
                node.size_us,
                self._aggs(node.aggs, c),
                [c[k] for k in node.keys],
                node.slide_us,
                node.lateness_us,
                input=inp,
            )
            return Stateful(op, (inp,), (schema.names,))
        keyed = (
            node.keys
            if isinstance(node, P.Aggregate)
            else node.partition
            if isinstance(node, P.TopN | P.RowsOver)
            else tuple(node.input.schema.names)
        )
        keys = _bounded_first(keyed, below)
        leads = {inp: below[keys[0]]} if keys and keys[0] in below else {}
        if isinstance(node, P.Aggregate) and node.aggs[0].func == "udf":
            calls = self._udf_calls(node.aggs, c)
            op_id = self._id(view, "agg", counter)
            op = UdfGroupAggregate(op_id, schema, [c[k] for k in keys], calls, input=inp)
            if keys != node.keys:
                output = [*(c[k] for k in node.keys), *(a.name for a in calls)]
        elif isinstance(node, P.Aggregate):
            aggs = self._aggs(node.aggs, c)
            op_id = self._id(view, "agg", counter)
            op = GroupAggregate(op_id, schema, [c[k] for k in keys], aggs, input=inp)
            if keys != node.keys:
                output = [*(c[k] for k in node.keys), *(a.name for a in aggs)]
        elif isinstance(node, P.TopN):
            order = [(c[col], desc) for col, desc in node.order]
            op_id = self._id(view, "top", counter)
            partition = [c[k] for k in keys]
            op = TopN(op_id, schema, partition, order, node.limit, "rank", input=inp)
        elif isinstance(node, P.RowsOver):
            order = [(c[col], desc) for col, desc in node.order]
            op_id = self._id(view, "over", counter)
            partition = [c[k] for k in keys]
            over = self._over_aggs(node.aggs, c)
            op = RowsOver(op_id, schema, partition, order, node.preceding, over, inp, node.ranges)
        else:
            columns = [c[k] for k in keys] if keys != keyed else None
            op = Distinct(self._id(view, "distinct", counter), schema, columns, input=inp)
            output = schema.names if columns else None
        return Stateful(op, (inp,), (schema.names,), output, leads)

    def _upsert(self, node: P.Upsert) -> Stateful:
        """A table's upsert operator: named for the table, not a view (every view reading
        the table shares it), its output in the table's column order."""
        schema, c = self._columns(node.input.schema, "c")
        inp = self._input(node.input, "in")
        op = Upsert(f"{node.table}.upsert", schema, [c[k] for k in node.keys], c[node.op], inp)
        output = [c[f.name] for f in node.schema]
        return Stateful(op, (inp,), (schema.names,), output)

    def join_value(self, node: P.Join, op: Join, out: pa.Table) -> pa.Table:
        """The engine's join leaves out the right side's key columns (equal to the left's)
        and may rename the right's others (`Join.right_names`): the node has every column
        of both sides, under its own names."""
        _, ln = self._columns(node.left.schema, "l")
        _, rn = self._columns(node.right.schema, "r")
        same = {rn[r]: ln[lk] for r, lk in zip(node.right_keys, node.left_keys, strict=True)}
        renamed = op.right_names
        names = [*ln.values(), *(same.get(n) or renamed[n] for n in rn.values())]
        cols = [
            out.column(n).cast(engine_type(f.type)) for n, f in zip(names, node.schema, strict=True)
        ]
        joined = pa.table([*cols, out.column(WEIGHT)], names=[*node.schema.names, WEIGHT])
        return from_engine(joined, node.schema)


def _bounded_first(keys: tuple[str, ...], bounds: Mapping[str, Bound]) -> tuple[str, ...]:
    """`keys` with the first bounded one moved to the front (unchanged without one)."""
    lead = next((k for k in keys if k in bounds), None)
    return keys if lead is None else (lead, *(k for k in keys if k != lead))


__all__ = ["Layout", "Stateful", "positional"]
