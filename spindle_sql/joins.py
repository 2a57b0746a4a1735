"""FROM clauses with their joins, as analysts write them.

Items separated by commas (or CROSS JOIN) are joined by the WHERE clause's conditions, as
every SQL planner does: each condition on one item filters that item before any join; the
items are then joined in their FROM order, each next one the first that an equality of the
WHERE clause connects to those already joined (its equalities the join's keys, and every
other condition whose items are then all present the join's residual). An item no
equality connects is joined with none: every row meets every row of the other side (a
nested loop on one constant key; docs/sql.md says what that costs).

Explicit `JOIN ... ON` and `JOIN ... USING` bind tighter than commas and are planned as
written, left to right: the equalities between the two sides of ON are the keys, the rest
of ON the residual (an ON without an equality: a nested loop). A FROM of explicit joins only
keeps its WHERE as one filter above them, as before this module (same plans, so the same
operator fingerprints for views written that way).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

from . import functions as F
from .compile import Compiler, Field, Scope
from .errors import Problem, SqlError
from .expr import Call, Cast, Column, Expr, Literal, columns
from .outer_join import outer_join
from .parse import COMMA, Script
from .plan import Filter, JoinKind, Node, Project
from .relation import Relation


@dataclass(frozen=True)
class _Condition:
    node: exp.Expr
    expr: Expr
    units: frozenset[int]  # the FROM items it reads


class Joins:
    """Plans a query's FROM clause; `item` plans one FROM item (a table, view, subquery or
    window function) and `fresh` names new internal columns."""

    def __init__(
        self,
        script: Script,
        fresh: Callable[[], str],
        item: Callable[[exp.Expr], Relation],
    ) -> None:
        self.script = script
        self.fresh = fresh
        self.item = item

    def _error(self, node: exp.Expr, message: str) -> SqlError:
        line, col = self.script.at(node)
        return SqlError([Problem(message, line, col)])

    def units(self, q: exp.Select) -> list[Relation]:
        """The FROM clause's items between commas and CROSS JOINs, each with the explicit
        joins that follow it planned."""
        from_ = q.args.get("from_")
        if from_ is None:
            raise self._error(q, "a view's query needs a FROM clause")
        groups: list[tuple[exp.Expr, list[exp.Join]]] = [(from_.this, [])]
        crossed = False
        for join in q.args.get("joins") or []:
            cross = join.args.get("on") is None and not join.args.get("using")
            if join.meta.get(COMMA) or (cross and not join.args.get("side")):
                groups.append((join.this, []))
                crossed = crossed or not join.meta.get(COMMA)
                continue
            side = str(join.args.get("side") or "").upper()
            if crossed and side in ("RIGHT", "FULL"):
                raise self._error(
                    join,
                    f"a {side} JOIN after a CROSS JOIN: write the items before it as a "
                    "subquery, or the CROSS JOIN as a comma",
                )
            groups[-1][1].append(join)
        out = []
        for first, joins in groups:
            rel = self.item(first)
            for join in joins:
                rel = self.join(join, rel, self.item(join.this))
            out.append(rel)
        return out

    # -- explicit joins --

    def join(self, join: exp.Join, left: Relation, right: Relation) -> Relation:
        """`left JOIN right ON ...` or `USING (...)`, of the join's kind."""
        side = str(join.args.get("side") or "").lower()
        kind = str(join.args.get("kind") or "").lower()
        how: JoinKind = "inner"
        if side in ("left", "right", "full"):
            how = side  # type: ignore[assignment]
        elif kind == "outer":
            how = "full"
        if join.args.get("using"):
            return self._using(join, how, left, right)
        fields = [*left.fields, *right.fields]
        both = Compiler(self.script, Scope(fields))
        on = join.args.get("on")
        conditions = [both(c) for c in conjuncts(on)] if on is not None else []
        return self._joined(join, how, left, right, conditions, fields)

    def _joined(
        self,
        at: exp.Expr,
        how: JoinKind,
        left: Relation,
        right: Relation,
        conditions: list[Expr],
        fields: list[Field],
    ) -> Relation:
        lnames, rnames = left.internal(), right.internal()
        left_keys: list[Expr] = []
        right_keys: list[Expr] = []
        rest: list[Expr] = []
        for e in conditions:
            pair = key_pair(e, lnames, rnames)
            if pair is None:
                rest.append(e)
                continue
            try:
                t = F.common_type([pair[0].type, pair[1].type])
            except F.FunctionTypeError as why:
                raise self._error(at, f"join condition: {why}") from None
            left_keys.append(_cast_to(pair[0], t))
            right_keys.append(_cast_to(pair[1], t))
        if not left_keys:  # a nested loop: every row meets every row, on one constant key
            left_keys, right_keys = [Literal(0, pa.int32())], [Literal(0, pa.int32())]
        lnode, lk = self.key_columns(left.node, left_keys)
        rnode, rk = self.key_columns(right.node, right_keys)
        residual = and_all(rest)
        if residual is not None and residual.type not in (pa.bool_(), pa.null()):
            raise self._error(at, f"a join condition must be boolean, not {residual.type}")
        node = outer_join(lnode, rnode, how, tuple(lk), tuple(rk), residual, self.fresh)
        return Relation(node, fields)

    def _using(self, join: exp.Join, how: JoinKind, left: Relation, right: Relation) -> Relation:
        """JOIN ... USING (c, ...): ON left.c = right.c, with one column `c` (the left's, the
        right's for a RIGHT JOIN, either for a FULL JOIN) named plainly, first."""
        names = [i.name.lower() for i in join.args["using"]]
        conditions: list[Expr] = []
        pairs: list[tuple[Field, Field]] = []
        for name in names:
            sides = []
            for what, rel in (("left", left), ("right", right)):
                found = [f for f in rel.fields if f.name == name and not f.qualified_only]
                if len(found) != 1:
                    why = "no column" if not found else "several columns"
                    raise self._error(join, f"USING ({name}): the {what} side has {why} {name}")
                sides.append(found[0])
            a, b = sides
            pairs.append((a, b))
            equal = (Column(a.internal, a.type), Column(b.internal, b.type))
            conditions.append(Call("=", equal, pa.bool_()))
        hidden = {f.internal for pair in pairs for f in pair}
        fields = [
            Field(f.qualifier, f.name, f.internal, f.type, f.internal in hidden or f.qualified_only)
            for f in [*left.fields, *right.fields]
        ]
        joined = self._joined(join, how, left, right, conditions, fields)
        outputs: list[tuple[str, Expr]] = [
            (f.name, Column(f.name, f.type)) for f in joined.node.schema
        ]
        shown = []
        for (a, b), name in zip(pairs, names, strict=True):
            t = F.common_type([a.type, b.type])
            ca = _cast_to(Column(a.internal, a.type), t)
            cb = _cast_to(Column(b.internal, b.type), t)
            value: Expr = ca if how in ("inner", "left") else cb
            if how == "full":
                value = Call("coalesce", (ca, cb), t)
            internal = self.fresh()
            outputs.append((internal, value))
            shown.append(Field(None, name, internal, t))
        return Relation(Project(joined.node, tuple(outputs)), [*shown, *fields])

    def key_columns(self, node: Node, keys: Sequence[Expr]) -> tuple[Node, list[str]]:
        """`node` with each key expression as a column (plain columns as they are, but for
        a second use), and the key columns' names, all different."""
        names: list[str] = []
        extra = []
        for k in keys:
            if isinstance(k, Column) and k.name not in names:  # a column twice: a copy
                names.append(k.name)
            else:
                internal = self.fresh()
                extra.append((internal, k))
                names.append(internal)
        if not extra:
            return node, names
        keep = tuple((f.name, Column(f.name, f.type)) for f in node.schema)
        return Project(node, keep + tuple(extra)), names

    # -- items joined by WHERE --

    def combine(self, units: list[Relation], where: list[exp.Expr], at: exp.Expr) -> Relation:
        """The items joined by the WHERE conditions `where` (all applied); `at` is where
        an error is reported when no condition is to blame."""
        fields = [f for u in units for f in u.fields]
        owner = {f.internal: i for i, u in enumerate(units) for f in u.fields}
        compiler = Compiler(self.script, Scope(fields))
        pending: list[_Condition] = []
        filtered = list(units)
        for node in where:
            e = compiler(node)
            if e.type not in (pa.bool_(), pa.null()):
                raise self._error(node, f"WHERE needs a boolean condition, not {e.type}")
            reads = frozenset(owner[c] for c in columns(e) if c in owner)
            if len(reads) == 1:  # a condition on one item filters it before any join
                (i,) = reads
                filtered[i] = Relation(Filter(filtered[i].node, e), filtered[i].fields)
            else:
                pending.append(_Condition(node, e, reads))
        joined, present = filtered[0], {0}
        todo = list(range(1, len(units)))
        while todo:
            nxt = next((j for j in todo if self._connects(pending, present, j, units)), todo[0])
            todo.remove(nxt)
            ready = [c for c in pending if c.units and c.units <= present | {nxt}]
            pending = [c for c in pending if c not in ready]
            joined = self._joined(
                ready[0].node if ready else at,
                "inner",
                joined,
                filtered[nxt],
                [c.expr for c in ready],
                [*joined.fields, *filtered[nxt].fields],
            )
            present.add(nxt)
        rest = and_all([c.expr for c in pending])  # conditions on no column
        out: Node = joined.node if rest is None else Filter(joined.node, rest)
        return Relation(out, fields)

    def _connects(
        self, pending: list[_Condition], present: set[int], j: int, units: list[Relation]
    ) -> bool:
        """Whether an equality of `pending` joins item `j` to the items `present`."""
        inside = {f.internal for i in present for f in units[i].fields}
        for c in pending:
            if c.units <= present | {j} and key_pair(c.expr, inside, units[j].internal()):
                return True
        return False


def conjuncts(node: exp.Expr) -> list[exp.Expr]:
    """The AND-ed conditions of a boolean expression."""
    if isinstance(node, exp.And):
        return [*conjuncts(node.this), *conjuncts(node.expression)]
    if isinstance(node, exp.Paren):
        return conjuncts(node.this)
    return [node]


def with_implied(nodes: list[exp.Expr]) -> list[exp.Expr]:
    """`nodes` (AND-ed conditions) and, for each OR among them, the conditions every one of
    its branches has (`(a AND b) OR (a AND c)` implies `a`), as Spark and DuckDB find them:
    an equality in every branch (TPC-H q19) is then a join key, not a nested loop."""
    out = list(nodes)
    seen = {n.sql(dialect="spark") for n in nodes}
    for node in nodes:
        bare = node
        while isinstance(bare, exp.Paren):
            bare = bare.this
        if not isinstance(bare, exp.Or):
            continue
        branches = [conjuncts(b) for b in _disjuncts(bare)]
        common = {c.sql(dialect="spark"): c for c in branches[0]}
        for branch in branches[1:]:
            texts = {c.sql(dialect="spark") for c in branch}
            common = {k: c for k, c in common.items() if k in texts}
        for text, c in common.items():
            if text not in seen:
                seen.add(text)
                out.append(c)
    return out


def _disjuncts(node: exp.Expr) -> list[exp.Expr]:
    if isinstance(node, exp.Or):
        return [*_disjuncts(node.this), *_disjuncts(node.expression)]
    if isinstance(node, exp.Paren):
        return _disjuncts(node.this)
    return [node]


def and_all(conditions: list[Expr]) -> Expr | None:
    out: Expr | None = None
    for c in conditions:
        out = c if out is None else Call("and", (out, c), pa.bool_())
    return out


def key_pair(e: Expr, left: set[str], right: set[str]) -> tuple[Expr, Expr] | None:
    """(left side, right side) if `e` is an equality between an expression of the left's
    columns only and one of the right's only."""
    if not isinstance(e, Call) or e.fn != "=":
        return None
    a, b = e.args
    ca, cb = columns(a), columns(b)
    if ca and cb and ca <= left and cb <= right:
        return a, b
    if ca and cb and ca <= right and cb <= left:
        return b, a
    return None


def _cast_to(e: Expr, t: pa.DataType) -> Expr:
    return e if e.type == t else Cast(e, t)


__all__ = ["Joins", "and_all", "conjuncts", "key_pair", "with_implied"]
