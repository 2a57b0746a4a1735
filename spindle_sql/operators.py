"""An operator spec's `state` as views of the SQL plan: each operator becomes one view, named
as the operator, whose plan reads the transformed stream (`source`) or, for a join, its two
sides (`<op>.left`, `<op>.right`; the runtime computes the transform and the sides' filters
and projections, as Spark expressions). The dataflow runs them as it runs SQL views, in the
operator-spec layout (`Layout(names)`), so their state keeps the ids, columns and
fingerprints it had before.

| operator | plan |
| --- | --- |
| `aggregate` | `Aggregate` over the stream |
| `window_aggregate` | `WindowAggregate` over the stream (the operator's own watermark) |
| `distinct` | `Distinct` over the stream, or over a `Project` of its `columns` |
| `join` | `Project` of an inner `Join` of the sides (see `_join`) |

Internal column names are `<table>/<column>` for the tables' columns (a `Project` renames
them after the `Scan`) and `<op>/<column>` for an operator's; `names` maps each to the
user's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from pipeline_spec import model as S
from storage_engine.circuit.decimals import avg_type, sum_type

from . import plan as P
from .expr import Column
from .planner import PlannedView

SOURCE = "source"


@dataclass
class OperatorPlan:
    views: dict[str, PlannedView]  # one per operator, by its name
    tables: dict[str, pa.Schema]  # the inputs the views read, under the user's names
    names: dict[str, str]  # internal column name -> the user's


class _Names:
    def __init__(self) -> None:
        self.user: dict[str, str] = {}

    def scan(self, table: str, schema: pa.Schema) -> P.Project:
        """The table's rows, its columns under internal names (two join sides may share a
        user's name)."""
        outputs = tuple(
            (self.add(f"{table}/{f.name}", f.name), Column(f.name, f.type)) for f in schema
        )
        return P.Project(P.Scan(table, schema), outputs)

    def add(self, internal: str, user: str) -> str:
        self.user[internal] = user
        return internal

    def column(self, node: P.Node, op: str, name: str, what: str) -> str:
        """The internal name of the user's column `name` of `node`'s output."""
        for f in node.schema:
            if self.user[f.name] == name:
                return str(f.name)
        users = [self.user[f.name] for f in node.schema]
        raise ValueError(f"operator {op!r}: {what} {name!r} not among the input columns {users}")


def _aggs(
    node: P.Node, op: str, specs: list[S.AggregateSpec], names: _Names
) -> tuple[P.AggCall, ...]:
    out = []
    for a in specs:
        column = None if a.column is None else names.column(node, op, a.column, "aggregated column")
        if column is None:
            t: pa.DataType = pa.int64()
        else:
            arg = node.schema.field(column).type
            if a.func == "count":
                t = pa.int64()
            elif a.func == "sum":
                t = sum_type(arg)
            elif a.func == "avg":
                t = avg_type(arg)
            else:
                t = arg
        out.append(P.AggCall(names.add(f"{op}/{a.name}", a.name), a.func, column, t))
    return tuple(out)


def _view(op: S.StateOp, stream: P.Node, sides: Mapping[str, pa.Schema], names: _Names) -> P.Node:
    if isinstance(op, S.GroupAggregateOp):
        keys = tuple(names.column(stream, op.name, k, "group_by column") for k in op.group_by)
        return P.Aggregate(stream, keys, _aggs(stream, op.name, op.aggregates, names))
    if isinstance(op, S.WindowAggregateOp):
        keys = tuple(names.column(stream, op.name, k, "group_by column") for k in op.group_by)
        time = names.column(stream, op.name, op.time_column, "time column")
        t = stream.schema.field(time).type
        if not pa.types.is_timestamp(t):
            raise ValueError(
                f"operator {op.name!r}: time column {op.time_column!r} is {t}, not a timestamp"
            )
        size = int(op.size * 1e6)
        return P.WindowAggregate(
            stream,
            time,
            size,
            int(op.slide * 1e6) if op.slide else size,
            int(op.lateness * 1e6),
            keys,
            _aggs(stream, op.name, op.aggregates, names),
            names.add(f"{op.name}/window_start", "window_start"),
            names.add(f"{op.name}/window_end", "window_end"),
        )
    if isinstance(op, S.DistinctOp):
        if op.columns is None:
            return P.Distinct(stream)
        cols = [names.column(stream, op.name, c, "column") for c in op.columns]
        outputs = tuple(
            (names.add(f"{op.name}/{c}", c), Column(i, stream.schema.field(i).type))
            for c, i in zip(op.columns, cols, strict=True)
        )
        return P.Distinct(P.Project(stream, outputs))
    return _join(op, sides, names)


def _join(op: S.JoinOp, sides: Mapping[str, pa.Schema], names: _Names) -> P.Node:
    """The sides' inner join, projected as the engine's join outputs it: the left's
    columns, then the right's but its keys, a name the left takes prefixed with `right_`."""
    left = names.scan(f"{op.name}.left", sides[f"{op.name}.left"])
    right = names.scan(f"{op.name}.right", sides[f"{op.name}.right"])
    lk = tuple(names.column(left, op.name, k, "left join column") for k in op.left_on)
    rk = tuple(names.column(right, op.name, k, "right join column") for k in op.right_on)
    join = P.Join(left, right, "inner", lk, rk)
    taken = [names.user[f.name] for f in left.schema]
    outputs: list[tuple[str, Column]] = [
        (names.add(f"{op.name}/{n}", n), Column(f.name, f.type))
        for f, n in zip(left.schema, taken, strict=True)
    ]
    for f in right.schema:
        if f.name in rk:
            continue
        user = names.user[f.name]
        out = user if user not in taken else f"right_{user}"
        if out in taken:
            raise ValueError(f"operator {op.name!r}: output column {out!r} is ambiguous")
        taken.append(out)
        outputs.append((names.add(f"{op.name}/{out}", out), Column(f.name, f.type)))
    return P.Project(join, tuple(outputs))


def plan_operators(
    spec: S.PipelineSpec, stream: pa.Schema, sides: Mapping[str, pa.Schema]
) -> OperatorPlan:
    """The spec's operators as views over the transformed stream (`stream`) and the join
    sides (`sides`, by input name); SpecError naming the operator (`state.<i>`)."""
    names = _Names()
    source = names.scan(SOURCE, stream)
    views: dict[str, PlannedView] = {}
    for i, op in enumerate(spec.state):
        try:
            root = _view(op, source, sides, names)
        except ValueError as e:  # a column or a type the operator cannot take
            raise S.SpecError([(f"state.{i}", str(e))]) from None
        user = tuple(names.user[f.name] for f in root.schema)
        views[op.name] = PlannedView(op.name, root, user)
    read = {n.table: n.schema for v in views.values() for n in _scans(v.root)}
    tables = {t: (stream if t == SOURCE else sides[t]) for t in read}
    return OperatorPlan(views, tables, names.user)


def _scans(node: P.Node) -> list[P.Scan]:
    if isinstance(node, P.Scan):
        return [node]
    return [s for c in P.children(node) for s in _scans(c)]


__all__ = ["SOURCE", "OperatorPlan", "plan_operators"]
