"""Subqueries in WHERE, HAVING and the select list, decorrelated into joins, distincts and
aggregates, so that they stay incremental like every other operator:

- `EXISTS (q)`, `x IN (q)` as a condition of WHERE or HAVING: a semi-join, the rows joined
  with the distinct values of `q`'s correlation keys (and of its one column, for IN);
  `NOT EXISTS (q)`: the rows minus that semi-join.
- Anywhere else (`NOT IN`, under OR, in CASE or the select list): a column per subquery,
  from a LEFT JOIN: EXISTS is true where a row matched; `x IN (q)` follows SQL's
  three-valued logic, for which the rows also meet the count of `q`'s rows and of its NULLs
  (per correlation key): FALSE over no rows, NULL where x is NULL or `q` has a NULL and
  nothing matched.
- A scalar subquery `(SELECT agg ... FROM ... WHERE ...)` is an aggregate without GROUP BY:
  uncorrelated, one row that every row meets (on a constant key); correlated, grouped by
  its correlation keys and LEFT JOINed, a key without rows giving the aggregate of no rows
  (count 0, the others NULL).

A subquery's WHERE conditions that name the outer query's columns are its correlation.
Equalities between an expression of the subquery's columns and one of the outer query's
are join keys. Other correlated conditions (`l2.suppkey <> l1.suppkey`) are supported in
EXISTS and NOT EXISTS: the distinct outer values they name (the domain) are joined with the
subquery's rows on the equalities with those conditions as the residual, and the rows meet
the domain values that matched, NULL matching NULL. A correlated subquery is a plain
`SELECT ... FROM ... WHERE ...` (a scalar one with aggregates and no GROUP BY); an
uncorrelated one may be any query.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
from sqlglot import exp

from .compile import Compiler, Field, Scope, key
from .errors import SqlError
from .expr import Call, Case, Cast, Column, Expr, Literal, columns
from .grouping import grouped, null_safe_keys
from .joins import Joins, key_pair
from .outer_join import outer_join
from .parse import Script
from .plan import AggCall, Distinct, Filter, Join, JoinKind, Negate, Node, Project, UnionAll
from .relation import Relation

BOOL = pa.bool_()


@dataclass(frozen=True)
class Correlated:
    """A subquery's WHERE condition naming the outer query's columns: as written, compiled
    over both queries' columns, and for an equality (subquery side, outer side)."""

    node: exp.Expr
    expr: Expr
    pair: tuple[Expr, Expr] | None


class _Planner(Protocol):
    script: Script

    def _fresh(self) -> str: ...

    def _error(self, node: exp.Expr, message: str) -> SqlError: ...

    def _query(self, q: exp.Expr, ctes: Mapping[str, Relation]) -> Relation: ...

    def from_where(
        self, q: exp.Select, ctes: Mapping[str, Relation], outer: Scope | None
    ) -> tuple[Relation, list[Correlated]]: ...

    def finish(
        self,
        q: exp.Select,
        rel: Relation,
        ctes: Mapping[str, Relation],
        bounds: Mapping[str, int],
        extra: Sequence[Expr] = (),
    ) -> Relation: ...


def has_subquery(node: exp.Expr) -> bool:
    return any(isinstance(n, exp.Query) for n in node.walk())


def correlations(
    script: Script, nodes: list[exp.Expr], fields: list[Field], outer: Scope
) -> list[Correlated]:
    """The conditions of `nodes` (a subquery's WHERE, over `fields`) that name columns of
    the `outer` query (names resolve in the subquery first, as SQL says)."""
    inner = Scope(fields)
    names = {f.internal for f in fields}
    out = []
    for node in nodes:
        if has_subquery(node):
            continue
        refs = [c for c in node.find_all(exp.Column) if not isinstance(c.this, exp.Star)]
        if all(inner.resolve(c.name.lower(), c.table.lower() or None) for c in refs):
            continue
        e = Compiler(script, Scope(fields, outer=outer))(node)
        theirs = columns(e) - names
        out.append(Correlated(node, e, key_pair(e, names, theirs) if theirs else None))
    return out


@dataclass(frozen=True)
class _Sub:
    """A planned subquery: uncorrelated, the whole query; correlated, its FROM and the
    WHERE conditions that are its own, with the correlated ones beside."""

    query: exp.Expr
    rel: Relation
    correlated: list[Correlated]

    @property
    def pairs(self) -> list[tuple[Expr, Expr]]:
        return [c.pair for c in self.correlated if c.pair is not None]

    @property
    def residual(self) -> list[Correlated]:
        return [c for c in self.correlated if c.pair is None]


class Subqueries:
    """Plans the subqueries of one query's clauses (`ctes`: the WITH queries in scope)."""

    def __init__(self, planner: _Planner, ctes: Mapping[str, Relation]) -> None:
        self.planner = planner
        self.ctes = ctes
        self.script = planner.script
        self.fresh: Callable[[], str] = planner._fresh
        self.joins = Joins(planner.script, planner._fresh, self._no_item)

    def _no_item(self, item: exp.Expr) -> Relation:
        raise AssertionError("no FROM items are planned here")

    def _error(self, node: exp.Expr, message: str) -> SqlError:
        return self.planner._error(node, message)

    # -- conditions --

    def filter(self, rel: Relation, scope: Scope, node: exp.Expr, clause: str) -> Relation:
        """`rel`'s rows for which `node`, a condition of WHERE or HAVING holding subqueries,
        is true."""
        bare, negated = _unwrap(node)
        query = bare.args.get("query") if isinstance(bare, exp.In) else None
        if isinstance(bare, exp.Exists):
            return self._semi(rel, scope, bare, bare.this, None, anti=negated)
        if query is not None and not negated:
            return self._semi(rel, scope, bare, query, bare.this, anti=False)
        kept = rel.node.schema
        rel, found = self.columns(rel, scope, node)
        pred = Compiler(self.script, _with(scope, found))(node)
        if pred.type not in (BOOL, pa.null()):
            raise self._error(node, f"{clause} needs a boolean condition, not {pred.type}")
        return Relation(_only(Filter(rel.node, pred), kept), rel.fields)

    def columns(
        self, rel: Relation, scope: Scope, node: exp.Expr
    ) -> tuple[Relation, dict[str, Expr]]:
        """`rel` with a column per subquery of `node` (the outermost ones), and each
        column by the subquery's text (for `Scope.computed`)."""
        found: dict[str, Expr] = {}
        for sub in _outermost(node):
            if key(sub) in found:
                continue
            if isinstance(sub, exp.Exists):
                rel, col = self._exists(rel, scope, sub)
            elif isinstance(sub, exp.In):
                rel, col = self._in(rel, scope, sub)
            else:
                rel, col = self._scalar(rel, scope, sub)
            found[key(sub)] = col
        return rel, found

    # -- planning a subquery --

    def _plan(self, node: exp.Expr, scope: Scope) -> _Sub:
        q = node.this if isinstance(node, exp.Subquery) else node
        if not isinstance(q, exp.Select):
            return _Sub(q, self.planner._query(q, self.ctes), [])
        rel, correlated = self.planner.from_where(q, self.ctes, scope)
        if not correlated:
            return _Sub(q, self.planner.finish(q, rel, self.ctes, {}), [])
        if q.args.get("group") is not None or q.args.get("having") is not None:
            raise self._error(q, "a correlated subquery with GROUP BY or HAVING is not supported")
        return _Sub(q, rel, correlated)

    def _matches(
        self, at: exp.Expr, rel: Relation, scope: Scope, sub: _Sub, extra: list[tuple[Expr, Expr]]
    ) -> tuple[Node, list[str], Node, list[str]]:
        """What the rows of `rel` meet: (the rows with their key columns, those keys, the
        subquery's distinct key values with theirs)."""
        if sub.residual:
            return self._domain(at, rel, scope, sub)
        pairs = [*sub.pairs, *extra]
        inner = [(self.fresh(), e) for e, _ in pairs] or [(self.fresh(), Literal(0, pa.int32()))]
        values: Node = Distinct(Project(sub.rel.node, tuple(inner)))
        keys = [(o, Column(n, e.type)) for (n, e), (_, o) in zip(inner, pairs, strict=False)]
        return self._keys(at, rel.node, values, keys)

    def _keys(
        self, at: exp.Expr, node: Node, values: Node, pairs: Sequence[tuple[Expr, Expr]]
    ) -> tuple[Node, list[str], Node, list[str]]:
        """Key columns on both sides for each (expression over `node`, expression over
        `values`), cast to their common type; none: one constant key."""
        outer_keys: list[Expr] = []
        inner_keys: list[Expr] = []
        for a, b in pairs:
            t = _common(self, at, a.type, b.type)
            outer_keys.append(_cast_to(a, t))
            inner_keys.append(_cast_to(b, t))
        if not pairs:
            outer_keys, inner_keys = [Literal(0, pa.int32())], [Literal(0, pa.int32())]
        lnode, lk = self.joins.key_columns(node, outer_keys)
        rnode, rk = self.joins.key_columns(values, inner_keys)
        return lnode, lk, rnode, rk

    def _domain(
        self, at: exp.Expr, rel: Relation, scope: Scope, sub: _Sub
    ) -> tuple[Node, list[str], Node, list[str]]:
        """For correlated conditions other than equalities: the outer values that match a
        row of the subquery, to be met NULL-safely."""
        named, joined, domain = self._domain_join(at, rel, scope, sub)
        matched = [(self.fresh(), Column(d.internal, d.type)) for d in domain]
        found: Node = Distinct(Project(joined.node, tuple(matched)))
        lnode, lk = null_safe_keys(rel.node, named, self.fresh)
        rnode, rk = null_safe_keys(found, [n for n, _ in matched], self.fresh)
        return lnode, lk, rnode, rk

    def _domain_join(
        self, at: exp.Expr, rel: Relation, scope: Scope, sub: _Sub
    ) -> tuple[list[str], Relation, list[Field]]:
        """The distinct values of the outer columns the correlated conditions name (the
        domain), joined with the subquery's rows by every correlated condition: the outer
        columns, the join, and the domain's columns in it."""
        inner = {f.internal for f in sub.rel.fields}
        named = sorted(set().union(*(columns(c.expr) for c in sub.correlated)) - inner)
        outer_fields = {f.internal: f for f in _all_fields(scope)}
        types = {f.name: f.type for f in rel.node.schema}
        if any(n not in outer_fields or n not in types for n in named):
            raise self._error(at, "a correlated condition names a column of no enclosing query")
        domain = [
            Field(outer_fields[n].qualifier, outer_fields[n].name, self.fresh(), types[n], True)
            for n in named
        ]
        picked = zip(domain, named, strict=True)
        values = Distinct(
            Project(rel.node, tuple((d.internal, Column(n, d.type)) for d, n in picked))
        )
        both = Compiler(self.script, Scope(sub.rel.fields, outer=Scope(domain)))
        conditions = [both(c.node) for c in sub.correlated]
        fields = [*sub.rel.fields, *domain]
        joined = self.joins._joined(
            at, "inner", Relation(values, domain), sub.rel, conditions, fields
        )
        return named, joined, domain

    # -- EXISTS and IN --

    def _semi(
        self,
        rel: Relation,
        scope: Scope,
        at: exp.Expr,
        query: exp.Expr,
        x: exp.Expr | None,
        anti: bool,
    ) -> Relation:
        sub = self._plan(query, scope)
        extra = [] if x is None else [self._in_pair(at, sub, scope, x)]
        lnode, lk, rnode, rk = self._matches(at, rel, scope, sub, extra)
        semi = _only(Join(lnode, rnode, "inner", tuple(lk), tuple(rk)), rel.node.schema)
        if not anti:
            return Relation(semi, rel.fields)
        return Relation(UnionAll((rel.node, Negate(semi)), rel.node.schema), rel.fields)

    def _in_pair(self, at: exp.Expr, sub: _Sub, scope: Scope, x: exp.Expr) -> tuple[Expr, Expr]:
        """(the subquery's column, the outer value) of `x IN (subquery)`."""
        if sub.residual:
            raise self._error(
                at, "IN (subquery) correlated by a condition other than an equality: use EXISTS"
            )
        outer = Compiler(self.script, scope)(x)
        if sub.correlated:
            items = sub.query.expressions if isinstance(sub.query, exp.Select) else []
            if len(items) != 1 or isinstance(items[0], exp.Star):
                raise self._error(at, "IN (subquery): the subquery selects one column")
            item = items[0].this if isinstance(items[0], exp.Alias) else items[0]
            return Compiler(self.script, Scope(sub.rel.fields))(item), outer
        if len(sub.rel.fields) != 1:
            raise self._error(at, "IN (subquery): the subquery selects one column")
        f = sub.rel.fields[0]
        return Column(f.internal, f.type), outer

    def _marked(
        self, rel: Relation, lnode: Node, lk: list[str], rnode: Node, rk: list[str]
    ) -> tuple[Relation, Column]:
        """`rel` LEFT JOIN the distinct values `rnode` on the keys: a column true where a
        row matched, NULL elsewhere."""
        mark = self.fresh()
        keep = tuple((f.name, Column(f.name, f.type)) for f in rnode.schema)
        values = Project(rnode, (*keep, (mark, Literal(True, BOOL))))
        joined = outer_join(lnode, values, "left", tuple(lk), tuple(rk), None, self.fresh)
        kept = [*rel.node.schema, pa.field(mark, BOOL)]
        return Relation(_only(joined, pa.schema(kept)), rel.fields), Column(mark, BOOL)

    def _exists(self, rel: Relation, scope: Scope, node: exp.Exists) -> tuple[Relation, Expr]:
        sub = self._plan(node.this, scope)
        lnode, lk, rnode, rk = self._matches(node, rel, scope, sub, [])
        rel, mark = self._marked(rel, lnode, lk, rnode, rk)
        return rel, Call("is_not_null", (mark,), BOOL)

    def _in(self, rel: Relation, scope: Scope, node: exp.In) -> tuple[Relation, Expr]:
        """SQL's `x IN (q)`: TRUE where x matches a value; else FALSE over no values, NULL
        where x is NULL or a value is NULL."""
        sub = self._plan(node.args["query"], scope)
        y, x = self._in_pair(node, sub, scope, node.this)
        lnode, lk, rnode, rk = self._matches(node, rel, scope, sub, [(y, x)])
        rel, matched = self._marked(rel, lnode, lk, rnode, rk)
        rel, n, nn = self._counts(node, rel, sub, y)
        zero = Literal(0, pa.int64())
        empty = Call("=", (Call("coalesce", (n, zero), pa.int64()), zero), BOOL)
        has_null = Call("<", (nn, n), BOOL)
        unknown = Call("or", (Call("is_null", (x,), BOOL), has_null), BOOL)
        value = Case(
            (
                (Call("is_not_null", (matched,), BOOL), Literal(True, BOOL)),
                (empty, Literal(False, BOOL)),
                (unknown, Literal(None, BOOL)),
            ),
            Literal(False, BOOL),
            BOOL,
        )
        return rel, value

    def _counts(
        self, at: exp.Expr, rel: Relation, sub: _Sub, y: Expr
    ) -> tuple[Relation, Column, Column]:
        """`rel` with the number of the subquery's values and of its non-NULL ones per
        correlation key (NULL where a key has none)."""
        pairs = sub.pairs
        cols = [(self.fresh(), inner) for inner, _ in pairs] + [(self.fresh(), y)]
        source = Project(sub.rel.node, tuple(cols))
        n, nn = self.fresh(), self.fresh()
        keys = tuple(name for name, _ in cols[:-1])
        calls = (
            AggCall(n, "count", None, pa.int64()),
            AggCall(nn, "count", cols[-1][0], pa.int64()),
        )
        counts = grouped(source, keys, calls, self.fresh)
        on = [(o, Column(name, e.type)) for (name, e), (_, o) in zip(cols, pairs, strict=False)]
        lnode, lk, rnode, rk = self._keys(at, rel.node, counts, on)
        how: JoinKind = "left" if pairs else "inner"  # no key: one row of counts, always
        joined = outer_join(lnode, rnode, how, tuple(lk), tuple(rk), None, self.fresh)
        kept = pa.schema([*rel.node.schema, pa.field(n, pa.int64()), pa.field(nn, pa.int64())])
        return (
            Relation(_only(joined, kept), rel.fields),
            Column(n, pa.int64()),
            Column(nn, pa.int64()),
        )

    # -- scalar subqueries --

    def _scalar(self, rel: Relation, scope: Scope, node: exp.Expr) -> tuple[Relation, Expr]:
        q = node.this if isinstance(node, exp.Subquery) else node
        if not isinstance(q, exp.Select) or not _aggregated(q):
            raise self._error(
                node,
                "a scalar subquery must give one row: SELECT an aggregate, without GROUP BY "
                "(e.g. (SELECT max(x) FROM t WHERE ...))",
            )
        if len(q.expressions) != 1:
            raise self._error(node, "a scalar subquery selects one value")
        sub = self._plan(q, scope)
        if not sub.correlated:  # one row (NULL-less over no rows, but for HAVING)
            value = sub.rel.fields[0]
            one = Column(value.internal, value.type)
            lnode, lk, rnode, rk = self._keys(node, rel.node, sub.rel.node, [])
            how: JoinKind = "left" if q.args.get("having") is not None else "inner"
            joined = outer_join(lnode, rnode, how, tuple(lk), tuple(rk), None, self.fresh)
            kept = pa.schema([*rel.node.schema, pa.field(one.name, one.type)])
            return Relation(_only(joined, kept), rel.fields), one
        if sub.residual:  # per value of the domain, met NULL-safely
            named, joined_rel, domain = self._domain_join(node, rel, scope, sub)
            per = [Column(d.internal, d.type) for d in domain]
            grouped_rel = self.planner.finish(q, joined_rel, self.ctes, {}, per)
            value, *keys, marker = grouped_rel.fields
            lnode, lk = null_safe_keys(rel.node, named, self.fresh)
            rnode, rk = null_safe_keys(grouped_rel.node, [k.internal for k in keys], self.fresh)
        else:
            inner = [p[0] for p in sub.pairs]
            grouped_rel = self.planner.finish(q, sub.rel, self.ctes, {}, inner)
            value, *keys, marker = grouped_rel.fields
            on = [
                (o, Column(k.internal, k.type)) for k, (_, o) in zip(keys, sub.pairs, strict=True)
            ]
            lnode, lk, rnode, rk = self._keys(node, rel.node, grouped_rel.node, on)
        joined = outer_join(lnode, rnode, "left", tuple(lk), tuple(rk), None, self.fresh)
        added = [pa.field(value.internal, value.type), pa.field(marker.internal, BOOL)]
        kept = pa.schema([*rel.node.schema, *added])
        rel = Relation(_only(joined, kept), rel.fields)
        col: Expr = Column(value.internal, value.type)
        empty = self._over_no_rows(q)
        if empty is not None:  # count(*) of a key without rows is 0, not NULL
            missing = Call("is_null", (Column(marker.internal, BOOL),), BOOL)
            col = Case(((missing, _cast_to(empty, value.type)),), col, value.type)
        return rel, col

    def _over_no_rows(self, q: exp.Select) -> Expr | None:
        """The scalar subquery's value over no rows (its aggregates: count 0, the others
        NULL), or None where that is NULL."""
        item = q.expressions[0]
        item = item.this if isinstance(item, exp.Alias) else item
        counts = [a for a in item.find_all(exp.Count)]
        if not counts:
            return None
        empty: dict[str, Expr] = {}
        for agg in item.find_all(exp.AggFunc):
            parent = agg.parent if isinstance(agg.parent, exp.Filter) else agg
            count = isinstance(agg, exp.Count)
            empty[key(parent)] = Literal(0 if count else None, pa.int64() if count else pa.null())
        return Compiler(self.script, Scope([], empty))(item)


def _unwrap(node: exp.Expr) -> tuple[exp.Expr, bool]:
    """`node` without parentheses and one NOT, and whether it had the NOT."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Not):
        inner = node.this
        while isinstance(inner, exp.Paren):
            inner = inner.this
        return inner, True
    return node, False


def _outermost(node: exp.Expr) -> list[exp.Expr]:
    """The subquery expressions of `node` not inside another, left to right: EXISTS,
    IN (subquery) and scalar subqueries."""
    out: list[exp.Expr] = []
    todo = [node]
    while todo:
        n = todo.pop()
        if isinstance(n, exp.Exists | exp.Subquery) or (
            isinstance(n, exp.In) and n.args.get("query")
        ):
            out.append(n)
        elif not isinstance(n, exp.Query):
            todo += reversed(list(n.iter_expressions()))
    return out


def _aggregated(q: exp.Select) -> bool:
    """A SELECT of aggregates without GROUP BY (one row)."""
    if q.args.get("group") is not None:
        return False
    return any(
        any(isinstance(n, exp.AggFunc) for n in item.walk() if not isinstance(n, exp.Query))
        for item in q.expressions
    )


def _all_fields(scope: Scope) -> list[Field]:
    out: list[Field] = []
    s: Scope | None = scope
    while s is not None:
        out += s.fields
        s = s.outer
    return out


def _with(scope: Scope, found: Mapping[str, Expr]) -> Scope:
    return Scope(scope.fields, {**scope.computed, **found}, scope.hidden, scope.outer)


def _only(node: Node, schema: pa.Schema) -> Node:
    """`node`'s columns of `schema` (by name), as a projection."""
    return Project(node, tuple((f.name, Column(f.name, f.type)) for f in schema))


def _cast_to(e: Expr, t: pa.DataType) -> Expr:
    return e if e.type == t else Cast(e, t)


def _common(subqueries: Subqueries, at: exp.Expr, a: pa.DataType, b: pa.DataType) -> pa.DataType:
    from . import functions as F

    try:
        return F.common_type([a, b])
    except F.FunctionTypeError as e:
        raise subqueries._error(at, f"subquery: {e}") from None


__all__ = ["Correlated", "Subqueries", "correlations", "has_subquery"]
