"""GROUP BY and aggregates: the group keys (columns, expressions, select list aliases and
positions), each aggregate call with its argument and FILTER computed first as columns, and
the grouped plan (`grouping.grouped`, DISTINCT aggregates as branches). Result types are the
engine's (`storage_engine.circuit.decimals` for decimals), as Spark types them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa
from sqlglot import exp

from storage_engine.circuit.decimals import avg_type, sum_type

from .compile import Compiler, Field, Scope, key
from .errors import Problem, SqlError
from .expr import Case, Column, Expr, Literal
from .grouping import grouped
from .parse import Script
from .plan import AggCall, AggFunc, Project
from .relation import Relation
from .udafs import UdafCall

_AGGS: dict[type[exp.Expr], AggFunc] = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.Min: "min",
    exp.Max: "max",
}


class Aggregates:
    """Plans one query's grouping; `fresh` names new internal columns."""

    def __init__(self, script: Script, fresh: Callable[[], str]) -> None:
        self.script = script
        self.fresh = fresh

    def _error(self, node: exp.Expr, message: str) -> SqlError:
        line, col = self.script.at(node)
        return SqlError([Problem(message, line, col)])

    def _boolean(self, clause: exp.Expr, pred: Expr, what: str) -> None:
        if pred.type not in (pa.bool_(), pa.null()):
            raise self._error(clause, f"{what} needs a boolean condition, not {pred.type}")

    def group(
        self,
        q: exp.Select,
        rel: Relation,
        items: list[exp.Expr],
        aggs: list[exp.Expr],
        extra: Sequence[Expr] = (),
    ) -> tuple[Relation, Scope, list[Column]]:
        """GROUP BY, and the aggregates: the grouped relation, the scope its clauses see,
        and the columns of the `extra` keys (grouped by first)."""
        below = Compiler(self.script, Scope(rel.fields))
        aliases = {item.alias.lower(): item.this for item in items if isinstance(item, exp.Alias)}
        group = q.args.get("group")
        keys: list[tuple[exp.Expr | None, Expr]] = [(None, e) for e in extra]
        for g in group.expressions if group is not None else []:
            # An integer is a select item's position (Spark's group-by ordinal); another
            # number, such as 10.0E0, a constant key
            if isinstance(g, exp.Literal) and not g.is_string and str(g.this).isdigit():
                g = self._ordinal(g, items)
            try:
                keys.append((g, below(g)))
            except SqlError:
                alias = g.name.lower() if isinstance(g, exp.Column) and not g.table else None
                if alias is None or alias not in aliases:
                    raise
                keys.append((aliases[alias], below(aliases[alias])))
        computed: list[tuple[str, Expr]] = []
        key_cols: list[str] = []
        visible: list[Field] = []
        substitutes: dict[str, Column] = {}
        extra_cols: list[Column] = []
        for group_item, e in keys:
            if isinstance(e, Column):
                name = e.name
            else:
                name = self.fresh()
                computed.append((name, e))
            if name not in key_cols:
                key_cols.append(name)
            if group_item is None:
                extra_cols.append(Column(name, e.type))
                continue
            substitutes[key(group_item)] = Column(name, e.type)
            visible += [f for f in rel.fields if f.internal == name]
        calls: list[AggCall] = []
        seen: dict[str, Column] = {}
        for a in aggs:
            k = key(a)
            if k in seen:
                continue
            if isinstance(a, UdafCall):
                call, args = self.udaf(a, below)
                columns = []
                for e in args:
                    if isinstance(e, Column):
                        columns.append(e.name)
                    else:
                        columns.append(self.fresh())
                        computed.append((columns[-1], e))
                call = AggCall(
                    call.name, "udf", None, call.type, udf=call.udf, columns=tuple(columns)
                )
                calls.append(call)
                seen[k] = Column(call.name, call.type)
                continue
            call, arg = self.call(a, below)
            if arg is not None:
                if isinstance(arg, Column):
                    call = AggCall(call.name, call.func, arg.name, call.type, call.distinct)
                else:
                    col = self.fresh()
                    computed.append((col, arg))
                    call = AggCall(call.name, call.func, col, call.type, call.distinct)
            calls.append(call)
            seen[k] = Column(call.name, call.type)
        node = rel.node
        if computed:
            keep = tuple((f.name, Column(f.name, f.type)) for f in node.schema)
            node = Project(node, keep + tuple(computed))
        agg = grouped(node, tuple(key_cols), tuple(calls), self.fresh)
        hidden = "not in GROUP BY and not aggregated"
        scope = Scope(visible, {**substitutes, **seen}, hidden)
        return Relation(agg, visible), scope, extra_cols

    def _ordinal(self, g: exp.Literal, items: list[exp.Expr]) -> exp.Expr:
        """The select item that `GROUP BY n` names (Spark's group-by ordinal)."""
        text = str(g.this)
        if not 1 <= int(text) <= len(items):
            raise self._error(
                g, f"GROUP BY {text}: a position in the select list is 1 to {len(items)}"
            )
        item = items[int(text) - 1]
        chosen = item.this if isinstance(item, exp.Alias) else item
        if aggregates(chosen):
            raise self._error(g, f"GROUP BY {text} names an aggregate")
        return chosen

    def udaf(self, a: UdafCall, below: Compiler) -> tuple[AggCall, list[Expr]]:
        """A Python aggregate's call and its arguments, cast to the declared types where
        Spark would cast implicitly (`Compiler.udf_args`)."""
        udaf = self.script.udfs[str(a.this)]
        args = below.udf_args(a, udaf, [below(e) for e in a.expressions])
        return AggCall(self.fresh(), "udf", None, udaf.result, udf=udaf), args

    def call(self, a: exp.Expr, below: Compiler) -> tuple[AggCall, Expr | None]:
        cond: Expr | None = None
        node = a
        if isinstance(a, exp.Filter):
            node = a.this
            cond = below(a.expression.this)
            self._boolean(a, cond, "FILTER")
        func = _AGGS.get(type(node))
        if isinstance(node, UdafCall):
            raise self._error(a, f"{node.this}: a Python aggregate takes no FILTER (yet)")
        if func is None:
            raise self._error(a, f"aggregate {key(a)} is not supported (docs/sql.md)")
        inner = node.this
        distinct = isinstance(inner, exp.Distinct)
        if distinct:
            if len(inner.expressions) != 1:
                raise self._error(a, "count(DISTINCT ...) takes one expression")
            inner = inner.expressions[0]
        arg: Expr | None
        if isinstance(inner, exp.Star) or (func == "count" and inner is None):
            arg = None
        else:
            arg = below(inner)
        if cond is not None:  # FILTER (WHERE c): the rows where c is not true give NULL
            value = arg if arg is not None else Literal(1, pa.int32())
            arg = Case(((cond, value),), None, value.type)
        name = self.fresh()
        if func == "count":
            t: pa.DataType = pa.int64()
        elif arg is None:
            raise self._error(a, f"{func} needs an argument")
        else:
            t = _agg_type(func, arg.type, a, self)
        return AggCall(name, func, None, t, distinct), arg


def _agg_type(func: AggFunc, t: pa.DataType, node: exp.Expr, planner: Aggregates) -> pa.DataType:
    """The result type of `func` over `t` as Spark's: the engine's (`decimals`), whose
    aggregates compute exactly these."""
    numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
    if func in ("sum", "avg") and not numeric:
        raise planner._error(node, f"{func} needs a number, not {t}")
    if func == "avg":
        return avg_type(t)
    if func == "sum":
        return sum_type(t)
    return t


def aggregates(node: exp.Expr) -> list[exp.Expr]:
    """The aggregate calls in `node` (a FILTER clause with its aggregate), outermost only."""
    found: list[exp.Expr] = []
    todo = [node]
    while todo:
        n = todo.pop()
        if (isinstance(n, exp.Filter) and isinstance(n.this, exp.AggFunc)) or isinstance(
            n, exp.AggFunc
        ):
            found.append(n)
        elif isinstance(n, exp.Window | exp.Query):  # a subquery's are its own
            continue
        else:
            todo += [c for c in n.iter_expressions()]
    return found


__all__ = ["Aggregates", "aggregates"]
