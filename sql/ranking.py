"""Top-N per group, written as Spark and Flink users write it:

    SELECT ... FROM (
      SELECT ..., ROW_NUMBER() OVER (PARTITION BY p ORDER BY o DESC) AS rn FROM t
    ) WHERE rn <= 3                      -- or rn < 4, or rn = 1

The outer query's bound on the rank (`bounds`) is handed to the inner SELECT, whose
ROW_NUMBER becomes a `plan.TopN` with that limit. A ROW_NUMBER without such a bound would
rank every row of a group, and a change at the top would renumber all of them: refused.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from sqlglot import exp

from .compile import Compiler, Scope, key
from .errors import Problem, SqlError
from .expr import Column, Expr
from .parse import Script
from .plan import Node, Project, TopN


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
    compiler = Compiler(script, scope)
    computed: list[tuple[str, Expr]] = []

    def column(e: exp.Expr) -> str:
        compiled = compiler(e)
        if isinstance(compiled, Column):
            return compiled.name
        internal = fresh()
        computed.append((internal, compiled))
        return internal

    partition = tuple(column(p) for p in window.args.get("partition_by") or [])
    ordering = tuple((column(o.this), bool(o.args.get("desc"))) for o in order.expressions)
    if computed:
        keep = tuple((f.name, Column(f.name, f.type)) for f in node.schema)
        node = Project(node, keep + tuple(computed))
    rank = fresh()
    ranked = TopN(node, partition, ordering, limit, rank)
    return ranked, {key(window): Column(rank, pa.int32())}


__all__ = ["rank_bounds", "top_n", "window_items"]
