"""LEFT, RIGHT and FULL joins out of the engine's inner join, as DBSP composes them: the
inner join, plus each preserved side's rows that match nothing, padded with NULLs.

A side's unmatched rows are the side minus its matched rows (`UnionAll(side, Negate(semi))`,
linear). Its matched rows, with their multiplicity:
- without extra ON conditions: the side joined with the distinct join keys of the other
  side (rows with a NULL key never match, as in SQL, so they stay unmatched);
- with them (`a.k = b.k AND b.ts BETWEEN a.ts AND a.expires`): the distinct side rows of
  the inner join's output, joined back to the side on every column, NULL matching NULL.
Every part is incremental, so the padded rows come and go as matches do: a left row is
emitted with NULLs, retracted when its first match arrives, and emitted again when its
last match goes.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from .expr import Column, Expr, Literal
from .grouping import join_null_safe
from .plan import Distinct, Filter, Join, JoinKind, Negate, Node, Project, UnionAll


def outer_join(
    left: Node,
    right: Node,
    kind: JoinKind,
    left_keys: tuple[str, ...],
    right_keys: tuple[str, ...],
    residual: Expr | None,
    fresh: Callable[[], str],
) -> Node:
    """`left` `kind` JOIN `right`: the columns of both, in that order."""
    inner: Node = Join(left, right, "inner", left_keys, right_keys)
    if residual is not None:
        inner = Filter(inner, residual)
    if kind == "inner":
        return inner
    parts = [inner]
    if kind in ("left", "full"):
        lost = _unmatched(left, left_keys, right, right_keys, inner, residual, fresh)
        parts.append(_padded(lost, left, right, left_first=True))
    if kind in ("right", "full"):
        lost = _unmatched(right, right_keys, left, left_keys, inner, residual, fresh)
        parts.append(_padded(lost, right, left, left_first=False))
    out = pa.schema([f.with_nullable(True) for f in inner.schema])
    return UnionAll(tuple(parts), out)


def _columns(node: Node) -> tuple[tuple[str, Expr], ...]:
    return tuple((f.name, Column(f.name, f.type)) for f in node.schema)


def _unmatched(
    side: Node,
    side_keys: tuple[str, ...],
    other: Node,
    other_keys: tuple[str, ...],
    inner: Node,
    residual: Expr | None,
    fresh: Callable[[], str],
) -> Node:
    if residual is None:
        keys = Distinct(
            Project(other, tuple((k, Column(k, other.schema.field(k).type)) for k in other_keys))
        )
        semi: Node = Join(side, keys, "inner", side_keys, other_keys)
    else:
        renamed = [(fresh(), f) for f in side.schema]
        matched = Distinct(
            Project(inner, tuple((new, Column(f.name, f.type)) for new, f in renamed))
        )
        semi = join_null_safe(
            side, [f.name for f in side.schema], matched, [n for n, _ in renamed], fresh
        )
    matched_rows = Project(semi, _columns(side))
    return UnionAll((side, Negate(matched_rows)), side.schema)


def _padded(rows: Node, side: Node, other: Node, left_first: bool) -> Node:
    nulls = tuple((f.name, Literal(None, f.type)) for f in other.schema)
    own = _columns(side)
    return Project(rows, own + nulls if left_first else nulls + own)


__all__ = ["outer_join"]
