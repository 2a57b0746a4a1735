"""GROUP BY with DISTINCT aggregates (`count(DISTINCT x)`, `sum(DISTINCT x)`, ...) or Python
aggregates, out of the engine's operators as DBSP composes them:

- the plain aggregates in one `Aggregate` (with a count(*) if there is none, so that every
  group of the input has a row);
- the Python aggregates in one `Aggregate` of their own (the engine's `UdfGroupAggregate`):
  a group has a row there whenever it has input rows;
- per distinct aggregate, a `Distinct` of (keys, x) then an `Aggregate` over it: a group
  has a row there too whenever it has input rows (a NULL x is a distinct value that the
  aggregate then ignores, as SQL's DISTINCT aggregates do);
- the branches joined on the group keys, NULL keys matching (each key compared as
  `(key IS NULL, coalesce(key, zero))`); one row per group on every side, so the join is
  one to one. Without GROUP BY, on a constant.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa

from . import functions as F
from .expr import Call, Column, Expr, Literal
from .plan import AggCall, Aggregate, Distinct, Join, Node, Project


def grouped(
    node: Node, keys: tuple[str, ...], calls: tuple[AggCall, ...], fresh: Callable[[], str]
) -> Node:
    """`node` grouped by `keys` with `calls`: the plan's columns include `keys` and every
    call's `name`."""
    if not calls:  # GROUP BY without aggregates: the distinct keys
        return Distinct(
            Project(node, tuple((k, Column(k, node.schema.field(k).type)) for k in keys))
        )
    plain = [c for c in calls if not c.distinct and c.func != "udf"]
    python = [c for c in calls if c.func == "udf"]
    distinct = [c for c in calls if c.distinct]
    if not distinct and not python:
        return Aggregate(node, keys, calls)
    if not distinct and not plain:
        return Aggregate(node, keys, tuple(python))
    anchor = [] if plain else [AggCall(fresh(), "count", None, pa.int64())]
    result: Node = Aggregate(node, keys, tuple(plain + anchor))
    types = {k: node.schema.field(k).type for k in keys}
    if python:  # one operator of their own (the engine's UdfGroupAggregate)
        renamed = {k: fresh() for k in keys}
        agg = Aggregate(node, keys, tuple(python))
        branch = Project(
            agg,
            (
                *((renamed[k], Column(k, types[k])) for k in keys),
                *((c.name, Column(c.name, c.type)) for c in python),
            ),
        )
        result = join_null_safe(result, list(keys), branch, [renamed[k] for k in keys], fresh)
    for c in distinct:
        assert c.column is not None
        cols = list(dict.fromkeys([*keys, c.column]))
        values = Distinct(
            Project(node, tuple((n, Column(n, node.schema.field(n).type)) for n in cols))
        )
        agg = Aggregate(values, keys, (AggCall(c.name, c.func, c.column, c.type),))
        renamed = {k: fresh() for k in keys}
        branch = Project(
            agg,
            (
                *((renamed[k], Column(k, types[k])) for k in keys),
                (c.name, Column(c.name, c.type)),
            ),
        )
        result = join_null_safe(result, list(keys), branch, [renamed[k] for k in keys], fresh)
    return result


def join_null_safe(
    left: Node, lkeys: list[str], right: Node, rkeys: list[str], fresh: Callable[[], str]
) -> Node:
    """`left` ⋈ `right` on `lkeys` = `rkeys`, NULL matching NULL (no keys: every pair)."""
    lnode, lk = null_safe_keys(left, lkeys, fresh)
    rnode, rk = null_safe_keys(right, rkeys, fresh)
    return Join(lnode, rnode, "inner", tuple(lk), tuple(rk))


def null_safe_keys(
    node: Node, names: list[str], fresh: Callable[[], str]
) -> tuple[Node, list[str]]:
    """`node` with key columns on which NULL matches NULL (each column as `(c IS NULL,
    coalesce(c, zero))`; none: one constant), and their names."""
    exprs: list[Expr] = []
    for n in names:
        col = Column(n, node.schema.field(n).type)
        exprs.append(Call("is_null", (col,), pa.bool_()))
        exprs.append(Call("coalesce", (col, Literal(_zero(col.type), col.type)), col.type))
    if not names:
        exprs.append(Literal(True, pa.bool_()))
    keep = tuple((f.name, Column(f.name, f.type)) for f in node.schema)
    extra = tuple((fresh(), e) for e in exprs)
    return Project(node, keep + extra), [n for n, _ in extra]


def _zero(t: pa.DataType) -> Any:
    """A value of type `t` standing for NULL in a null-safe key (beside an is-null flag)."""
    F.FUNCTIONS["coalesce"].result_type([t, t])  # a type coalesce takes
    if pa.types.is_boolean(t):
        return False
    if pa.types.is_integer(t):
        return 0
    if pa.types.is_floating(t):
        return 0.0
    if pa.types.is_decimal(t):
        return Decimal(0)
    if pa.types.is_string(t):
        return ""
    if pa.types.is_date(t):
        return date(1970, 1, 1)
    if pa.types.is_timestamp(t):
        return datetime(1970, 1, 1, tzinfo=UTC)
    raise TypeError(f"no null-safe key for {t}")


__all__ = ["grouped", "join_null_safe", "null_safe_keys"]
