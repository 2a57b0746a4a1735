"""Window functions over a partition's rows, written as Spark and Flink users write them.

Top-N per group:

    SELECT ... FROM (
      SELECT ..., ROW_NUMBER() OVER (PARTITION BY p ORDER BY o DESC) AS rn FROM t
    ) WHERE rn <= 3                      -- or rn < 4, or rn = 1

The outer query's bound on the rank (`bounds`) is handed to the inner SELECT, whose
ROW_NUMBER becomes a `plan.TopN` with that limit, which keeps only the top rows' changes.

Every other window (`over_rows`), anywhere in the select list, is a column of a
`plan.RowsOver` per PARTITION BY and ORDER BY: aggregates over ROWS or RANGE frames ending
at the current row, each with its own frame, and ROW_NUMBER, RANK, DENSE_RANK, LAG, LEAD
(`window_functions`):

    SELECT ..., avg(x) OVER (PARTITION BY p ORDER BY o ROWS BETWEEN 10 PRECEDING AND
    CURRENT ROW) AS a, RANK() OVER (PARTITION BY p ORDER BY o) AS r FROM t

A ROW_NUMBER (or RANK) without a bound ranks every row of its partition: a change near the
top re-emits every later row of the partition (its rank moved), so each change costs up
to the partition's size. A frame ending after the current row is refused: a row's value
would depend on rows that have not arrived.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pyarrow as pa
from sqlglot import exp

from . import window_functions as W
from .compile import Compiler, Scope, key
from .errors import Problem, SqlError
from .expr import Column, Expr
from .parse import Script
from .plan import AggCall, Node, Project, RowsOver, TopN


def rank_bounds(where: exp.Expr | None) -> dict[str, int]:
    """Column name -> N for each `col <= N`, `col < N + 1` or `col = 1` of a WHERE clause
    (its AND-ed conditions)."""
    out: dict[str, int] = {}
    todo = [where.this] if where is not None else []
    while todo:
        n = todo.pop()
        if isinstance(n, exp.And):
            todo += [n.this, n.expression]
            continue
        if isinstance(n, exp.Paren):
            todo.append(n.this)
            continue
        col, lit = n.args.get("this"), n.args.get("expression")
        if not (isinstance(col, exp.Column) and isinstance(lit, exp.Literal) and not lit.is_string):
            continue
        try:
            value = int(str(lit.this))
        except ValueError:
            continue
        bound = {exp.LTE: value, exp.LT: value - 1}.get(type(n))
        if isinstance(n, exp.EQ) and value == 1:
            bound = 1
        if bound is not None and bound >= 1:
            out[col.name.lower()] = bound
    return out


def window_items(items: list[exp.Expr]) -> list[exp.Expr]:
    return [i for i in items if isinstance(i.this if isinstance(i, exp.Alias) else i, exp.Window)]


def windows_in(items: list[exp.Expr]) -> list[exp.Window]:
    """The window expressions anywhere in `items` (not those of a subquery), each once."""
    found: dict[str, exp.Window] = {}
    todo = list(reversed(items))
    while todo:
        n = todo.pop()
        if isinstance(n, exp.Window):
            found.setdefault(key(n), n)
        elif not isinstance(n, exp.Query):
            todo += reversed(list(n.iter_expressions()))
    return list(found.values())


def is_row_number(item: exp.Expr) -> bool:
    window = item.this if isinstance(item, exp.Alias) else item
    return isinstance(window.this, exp.RowNumber)


def top_n(
    script: Script,
    scope: Scope,
    node: Node,
    item: exp.Expr,
    bounds: dict[str, int],
    fresh: Callable[[], str],
) -> tuple[Node, dict[str, Column]]:
    """`node` ranked as the window item says: the TopN node, and the rank column by the
    window expression's text (for the select list)."""

    def error(at: exp.Expr, message: str) -> SqlError:
        line, col = script.at(at)
        return SqlError([Problem(message, line, col)])

    window = item.this if isinstance(item, exp.Alias) else item
    assert isinstance(window, exp.Window)
    if not isinstance(window.this, exp.RowNumber):
        raise error(window, "of the window functions only ROW_NUMBER() is supported")
    name = item.alias.lower() if isinstance(item, exp.Alias) else ""
    limit = bounds.get(name)
    if limit is None:
        raise error(
            window,
            "ROW_NUMBER() needs an alias bounded by the outer query "
            "(SELECT ... FROM (SELECT ..., ROW_NUMBER() OVER (...) AS rn ...) WHERE rn <= N)",
        )
    order = window.args.get("order")
    if order is None or not order.expressions:
        raise error(window, "ROW_NUMBER() needs ORDER BY in its OVER clause")
    columns = _Columns(Compiler(script, scope), fresh)
    partition = _unique(columns(p) for p in window.args.get("partition_by") or [])
    ordering = _first((columns(o.this), bool(o.args.get("desc"))) for o in order.expressions)
    rank = fresh()
    ranked = TopN(columns.project(node), partition, ordering, limit, rank)
    return ranked, {key(window): Column(rank, pa.int32())}


class _Columns:
    """Expressions as input columns: a column as itself, anything else computed into a
    fresh column by a projection before the window (`project`)."""

    def __init__(self, compiler: Compiler, fresh: Callable[[], str]) -> None:
        self.compiler, self.fresh = compiler, fresh
        self.computed: list[tuple[str, Expr]] = []

    def __call__(self, e: exp.Expr | Expr) -> str:
        compiled = self.compiler(e) if isinstance(e, exp.Expr) else e
        if isinstance(compiled, Column):
            return compiled.name
        internal = self.fresh()
        self.computed.append((internal, compiled))
        return internal

    def project(self, node: Node) -> Node:
        if not self.computed:
            return node
        keep = tuple((f.name, Column(f.name, f.type)) for f in node.schema)
        node = Project(node, keep + tuple(self.computed))
        self.computed = []
        return node


def over_rows(
    script: Script,
    scope: Scope,
    node: Node,
    windows: list[exp.Window],
    fresh: Callable[[], str],
    agg_call: Callable[[exp.Expr, Compiler], tuple[AggCall, Expr | None]],
) -> tuple[Node, dict[str, Column]]:
    """`node` with a `RowsOver` per PARTITION BY and ORDER BY of the windows (aggregates
    over ROWS or RANGE frames, each its own; ROW_NUMBER, RANK, DENSE_RANK, LAG, LEAD:
    `window_functions`), and each window's column by its text (for the select list).
    Windows sharing PARTITION BY and ORDER BY are one operator, one ordering of each
    partition, as Spark computes them: rows equal in every column then pair their values as
    Spark's do. Windows that differ are operators in a chain."""

    def error(at: exp.Expr, message: str) -> SqlError:
        line, col = script.at(at)
        return SqlError([Problem(message, line, col)])

    groups: dict[tuple[object, ...], list[exp.Window]] = {}
    signature = Compiler(script, scope)
    for window in windows:
        order = window.args.get("order")
        ordering = order.expressions if order is not None else []
        same = (
            tuple(repr(signature(p)) for p in window.args.get("partition_by") or []),
            tuple((repr(signature(o.this)), bool(o.args.get("desc"))) for o in ordering),
        )
        groups.setdefault(same, []).append(window)
    found: dict[str, Column] = {}
    for group in groups.values():
        columns = _Columns(Compiler(script, scope), fresh)
        calls: list[AggCall] = []
        frames: list[tuple[int | None, bool]] = []
        first = group[0]
        order = first.args.get("order")
        ordering = order.expressions if order is not None else []
        compiled = [columns.compiler(o.this) for o in ordering]
        window_of: tuple[tuple[str, ...], tuple[tuple[str, bool], ...]] | None = None
        for window in group:
            if W.is_function(window):
                call, arg, default = W.call(window, columns.compiler, fresh(), error)
                column = None if arg is None else columns(arg)
                default_column = None if default is None else columns(default)
                call = AggCall(
                    call.name,
                    call.func,
                    column,
                    call.type,
                    offset=call.offset,
                    default=default_column,
                )
                frames.append((None, False))
            else:
                agg, arg = agg_call(window.this, columns.compiler)
                if agg.distinct:
                    raise error(window, "DISTINCT is not supported in an aggregate OVER a window")
                _check_type(agg, arg, window, error)
                frames.append(W.frame(window, compiled, error))
                column = None if arg is None else columns(arg)
                call = AggCall(agg.name, agg.func, column, agg.type)
            if window_of is None:  # after the first call's columns: the names they always had
                partition = _unique(columns(p) for p in first.args.get("partition_by") or [])
                window_of = (
                    partition,
                    _first(
                        (columns(e), bool(o.args.get("desc")))
                        for e, o in zip(compiled, ordering, strict=True)
                    ),
                )
            calls.append(call)
            found[key(window)] = Column(call.name, call.type)
        preceding = tuple(p for p, _ in frames)
        shared = preceding[0] if len(set(preceding)) == 1 else preceding  # one: as it always was
        ranges = tuple(r for _, r in frames)
        assert window_of is not None
        node = RowsOver(
            columns.project(node), *window_of, shared, tuple(calls), ranges if any(ranges) else ()
        )
    return node, found


def _unique(names: Iterable[str]) -> tuple[str, ...]:
    """`names` without repeats (a column partitions once however often it is named)."""
    return tuple(dict.fromkeys(names))


def _first(order: Iterable[tuple[str, bool]]) -> tuple[tuple[str, bool], ...]:
    """The ordering with each column at its first place (a later one changes nothing)."""
    out: dict[str, bool] = {}
    for column, desc in order:
        out.setdefault(column, desc)
    return tuple(out.items())


def _check_type(
    call: AggCall,
    arg: Expr | None,
    window: exp.Window,
    error: Callable[[exp.Expr, str], SqlError],
) -> None:
    if arg is None:
        return
    t = arg.type
    numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
    temporal = pa.types.is_timestamp(t) or pa.types.is_date(t)
    if call.func == "count" or numeric or (call.func in ("min", "max") and temporal):
        return
    raise error(window, f"{call.func} OVER a window of rows of {t} is not supported")


__all__ = ["is_row_number", "over_rows", "rank_bounds", "top_n", "window_items", "windows_in"]
