"""The views of a script become logical plans (`plan.py`): names resolved, types checked,
every problem an `SqlError` at its line and column.

A query is planned clause by clause, as SQL defines its meaning: FROM (tables, views,
subqueries, WITH queries, joins), WHERE, GROUP BY with its aggregates (arguments and FILTER
conditions computed first, as columns), HAVING, the select list, DISTINCT, then UNION ALL.
Each FROM item is renamed to fresh internal names, so a view can read the same table or view
twice (a self-join) without two columns sharing a name.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

from . import functions as F
from .aggregates import Aggregates, aggregates
from .compile import Compiler, Field, Scope
from .errors import Problem, SqlError
from .expr import Cast, Column, Expr, Literal
from .joins import Joins, conjuncts, with_implied
from .parse import Script
from .plan import (
    Distinct,
    Filter,
    Node,
    Project,
    Scan,
    Sessions,
    UnionAll,
    Upsert,
    ViewRef,
    Windows,
)
from .ranking import is_row_number, over_rows, rank_bounds, top_n, window_items, windows_in
from .relation import Relation
from .subqueries import Correlated, Subqueries, correlations, has_subquery
from .udafs import marked
from .window_functions import is_function
from .windows import is_session, session_args, window_args, window_call


@dataclass(frozen=True)
class PlannedView:
    """A view's plan: its root node and the user's column names, in the root's order;
    the column its `emit_final` property names, and where the view is (line, column)."""

    name: str
    root: Node
    names: tuple[str, ...]
    emit_final: str | None = None
    at: tuple[int, int] = (0, 0)


class Planner:
    """Plans a script's views against the input tables' schemas (their columns' user names
    and Arrow types)."""

    def __init__(
        self,
        script: Script,
        tables: Mapping[str, pa.Schema],
        upserts: Mapping[str, tuple[tuple[str, ...], str]] | None = None,
    ) -> None:
        self.script = marked(script)  # its Python aggregates' calls are aggregates
        self.tables = {name.lower(): schema for name, schema in tables.items()}
        # Tables fed by upserts and deletes: their keys and op column, and the one node
        # every read of the table shares (its state is the table's, whoever reads it).
        self._upserts = {name.lower(): u for name, u in (upserts or {}).items()}
        self._upsert_nodes: dict[str, Node] = {}
        self.views: dict[str, PlannedView] = {}
        self._failed: set[str] = set()  # views with a problem: readers of them say nothing
        # Bounds on ranks (`rn <= N`) of the query whose FROM is being planned, for the
        # ROW_NUMBER of the subquery there (ranking.py).
        self._bounds: dict[str, int] = {}
        # Internal names are numbered per view (`<view>.c<n>`): a change to one view leaves
        # every other view's columns, and so its operators' state layouts, as they were.
        self._view = ""
        self._names = itertools.count()

    def plan(self) -> dict[str, PlannedView]:
        """Every view's plan, in text order. Raises SqlError with every view's first
        problem."""
        problems: list[Problem] = []
        for view in self.script.views:
            if view.name in self.tables:
                problems.append(
                    Problem(f"view {view.name!r} has the name of a table", view.line, view.column)
                )
                continue
            self._view, self._names = view.name, itertools.count()
            try:
                rel = self._query(view.query, {})
            except SqlError as e:
                problems += e.problems
                self._failed.add(view.name)
                continue
            names = tuple(f.name for f in rel.fields)
            if view.columns and len(view.columns) != len(names):
                problems.append(
                    Problem(
                        f"view {view.name!r} lists {len(view.columns)} column names for "
                        f"{len(names)} columns",
                        view.line,
                        view.column,
                    )
                )
                self._failed.add(view.name)
                continue
            names = view.columns or names
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                problems.append(
                    Problem(
                        f"view {view.name!r} has several columns named {', '.join(dupes)}: "
                        "give them different names with AS",
                        view.line,
                        view.column,
                    )
                )
                self._failed.add(view.name)
                continue
            final = view.property("emit_final")
            if final is not None and final not in names:
                problems.append(
                    Problem(
                        f"view {view.name!r}: emit_final names {final!r}, not one of its "
                        f"columns ({', '.join(names)})",
                        view.line,
                        view.column,
                    )
                )
                self._failed.add(view.name)
                continue
            at = (view.line, view.column)
            self.views[view.name] = PlannedView(view.name, rel.node, names, final, at)
        if problems:
            raise SqlError(problems)
        return self.views

    # -- helpers --

    def _fresh(self) -> str:
        return f"{self._view}.c{next(self._names)}"

    def _error(self, node: exp.Expr, message: str) -> SqlError:
        line, col = self.script.at(node)
        return SqlError([Problem(message, line, col)])

    def _renamed(self, node: Node, names: list[str], qualifier: str | None) -> Relation:
        """`node`'s columns under fresh internal names, visible as `qualifier.name`."""
        outputs = []
        fields = []
        for f, name in zip(node.schema, names, strict=True):
            internal = self._fresh()
            outputs.append((internal, Column(f.name, f.type)))
            fields.append(Field(qualifier, name, internal, f.type))
        return Relation(Project(node, tuple(outputs)), fields)

    # -- queries --

    def _query(self, q: exp.Expr, ctes: Mapping[str, Relation]) -> Relation:
        with_ = q.args.get("with_")
        if with_ is not None:
            ctes = dict(ctes)
            for cte in with_.expressions:
                name = cte.alias.lower()
                rel = self._query(cte.this, ctes)
                names = self._column_names(cte, [f.name for f in rel.fields])
                fields = zip(rel.fields, names, strict=True)
                ctes[name] = Relation(rel.node, [dataclasses.replace(f, name=n) for f, n in fields])
        if isinstance(q, exp.Union):
            return self._union(q, ctes)
        if isinstance(q, exp.Subquery):
            return self._query(q.this, ctes)
        if isinstance(q, exp.Select):
            return self._select(q, ctes)
        raise self._error(q, f"{type(q).__name__.upper()} queries are not supported in views")

    def _union(self, q: exp.Union, ctes: Mapping[str, Relation]) -> Relation:
        left, right = self._query(q.this, ctes), self._query(q.expression, ctes)
        if len(left.fields) != len(right.fields):
            raise self._error(
                q,
                f"UNION: the two sides have {len(left.fields)} and {len(right.fields)} columns",
            )
        types = []
        for a, b in zip(left.fields, right.fields, strict=True):
            try:
                types.append(F.common_type([a.type, b.type]))
            except F.FunctionTypeError as e:
                raise self._error(q, f"UNION: column {a.name}: {e}") from None
        sides = [self._cast_all(r, types) for r in (left, right)]
        out = pa.schema(
            [pa.field(f.name, t) for f, t in zip(sides[0].node.schema, types, strict=True)]
        )
        node: Node = UnionAll(tuple(s.node for s in sides), out)
        if q.args.get("distinct"):
            node = Distinct(node)
        return self._renamed(node, [f.name for f in left.fields], None)

    def _cast_all(self, rel: Relation, types: list[pa.DataType]) -> Relation:
        outputs = []
        for f, t in zip(rel.fields, types, strict=True):
            col: Expr = Column(f.internal, f.type)
            outputs.append((f.internal, col if f.type == t else Cast(col, t)))
        return Relation(Project(rel.node, tuple(outputs)), rel.fields)

    def _select(self, q: exp.Select, ctes: Mapping[str, Relation]) -> Relation:
        bounds = self._bounds  # the bounds on this query's ROW_NUMBER, from the outer WHERE
        rel, _ = self.from_where(q, ctes, None)
        return self.finish(q, rel, ctes, bounds)

    def from_where(
        self, q: exp.Select, ctes: Mapping[str, Relation], outer: Scope | None
    ) -> tuple[Relation, list[Correlated]]:
        """The query's FROM clause filtered by its WHERE clause; for a subquery (`outer`:
        the scope of the query it is in), the WHERE conditions that name the outer query's
        columns are not applied but given back, compiled over both."""
        for clause in ("order", "limit", "offset"):
            if q.args.get(clause) is not None:
                raise self._error(
                    q.args[clause],
                    f"{clause.upper()} is not supported in a view (a view is a set of rows; "
                    "for the top rows per group use ROW_NUMBER() OVER (...) <= N)",
                )
        joins = Joins(self.script, self._fresh, lambda item: self._item(item, ctes))
        self._bounds = rank_bounds(q.args.get("where"))  # for a ROW_NUMBER in FROM
        units = joins.units(q)
        self._bounds = {}
        where = q.args.get("where")
        nodes = conjuncts(where.this) if where is not None else []
        fields = [f for u in units for f in u.fields]
        correlated = correlations(self.script, nodes, fields, outer) if outer else []
        nodes = [n for n in nodes if all(n is not c.node for c in correlated)]
        plain = [n for n in nodes if not has_subquery(n)]
        if len(units) > 1:
            rel = joins.combine(units, with_implied(plain), q)
        elif where is not None and len(plain) == len(conjuncts(where.this)):
            rel = units[0]  # one filter above the joins, as written
            pred = Compiler(self.script, Scope(rel.fields))(where.this)
            self._boolean(where, pred, "WHERE")
            rel = Relation(Filter(rel.node, pred), rel.fields)
        else:
            rel = units[0]
            compiler = Compiler(self.script, Scope(rel.fields))
            for n in plain:
                pred = compiler(n)
                self._boolean(n, pred, "WHERE")
                rel = Relation(Filter(rel.node, pred), rel.fields)
        subqueries = Subqueries(self, ctes)
        for n in nodes:
            if has_subquery(n):
                rel = subqueries.filter(rel, Scope(rel.fields), n, "WHERE")
        return rel, correlated

    def finish(
        self,
        q: exp.Select,
        rel: Relation,
        ctes: Mapping[str, Relation],
        bounds: Mapping[str, int],
        extra: Sequence[Expr] = (),
    ) -> Relation:
        """The query's clauses after WHERE over `rel`: GROUP BY, HAVING, the select list,
        DISTINCT. With `extra` (a correlated scalar subquery's key expressions), the
        aggregates are per value of those too, and the output has a column per key and a
        last column that is always true (`#k<i>`, `#m`: no query can name them)."""
        items = self._expand_star(q, rel)
        having = q.args.get("having")
        group = q.args.get("group")
        aggs = [a for item in items for a in aggregates(item)]
        if having is not None:
            aggs += aggregates(having.this)
        windows = windows_in(items)
        if windows and (group is not None or aggs):
            what = "a window function" if is_function(windows[-1]) else "an aggregate OVER a window"
            raise self._error(
                windows[-1],
                f"{what} goes alone in its SELECT, without GROUP BY (aggregate in a "
                "subquery first)",
            )
        # A lone ROW_NUMBER bounded by the outer query is a top-N: only the top rows.
        tops = [w for w in window_items(items) if is_row_number(w)]
        top = tops[0] if len(windows) == 1 and tops and _bounded(tops[0], bounds) else None
        keys: list[Column] = []
        if group is not None or aggs or extra:
            rel, scope, keys = Aggregates(self.script, self._fresh).group(
                q, rel, items, aggs, extra
            )
        elif windows:
            if top is not None:
                windowed, found = top_n(
                    self.script, Scope(rel.fields), rel.node, top, dict(bounds), self._fresh
                )
            else:
                windowed, found = over_rows(
                    self.script,
                    Scope(rel.fields),
                    rel.node,
                    windows,
                    self._fresh,
                    Aggregates(self.script, self._fresh).call,
                )
            rel = Relation(windowed, rel.fields)
            scope = Scope(rel.fields, found)
        else:
            scope = Scope(rel.fields)
        subqueries = Subqueries(self, ctes)
        if having is not None:
            if has_subquery(having.this):
                for n in conjuncts(having.this):
                    rel = subqueries.filter(rel, scope, n, "HAVING")
            else:
                pred = Compiler(self.script, scope)(having.this)
                self._boolean(having, pred, "HAVING")
                rel = Relation(Filter(rel.node, pred), rel.fields)
        for item in items:
            if has_subquery(item):
                rel, columns = subqueries.columns(rel, scope, item)
                scope = Scope(scope.fields, {**scope.computed, **columns}, scope.hidden)
        compiler = Compiler(self.script, scope)
        outputs, fields = [], []
        for item in items:
            e = compiler(item.this if isinstance(item, exp.Alias) else item)
            internal = self._fresh()
            outputs.append((internal, e))
            fields.append(Field(None, _output_name(item), internal, e.type))
        if extra:
            for i, k in enumerate(keys):
                internal = self._fresh()
                outputs.append((internal, k))
                fields.append(Field(None, f"#k{i}", internal, k.type))
            internal = self._fresh()
            outputs.append((internal, Literal(True, pa.bool_())))
            fields.append(Field(None, "#m", internal, pa.bool_()))
        node: Node = Project(rel.node, tuple(outputs))
        if q.args.get("distinct") is not None:
            node = Distinct(node)
        return Relation(node, fields)

    def _boolean(self, clause: exp.Expr, pred: Expr, what: str) -> None:
        if pred.type not in (pa.bool_(), pa.null()):
            raise self._error(clause, f"{what} needs a boolean condition, not {pred.type}")

    def _expand_star(self, q: exp.Select, rel: Relation) -> list[exp.Expr]:
        items: list[exp.Expr] = []
        for item in q.expressions:
            star = isinstance(item, exp.Star) or (
                isinstance(item, exp.Column) and isinstance(item.this, exp.Star)
            )
            if not star:
                items.append(item)
                continue
            qualifier = item.table.lower() if isinstance(item, exp.Column) else ""
            chosen = [
                f
                for f in rel.fields
                if (f.qualifier == qualifier if qualifier else not f.qualified_only)
            ]
            if not chosen:
                raise self._error(item, f"{qualifier}.*: no such table in FROM")
            for f in chosen:
                col = exp.column(f.name, table=f.qualifier) if f.qualifier else exp.column(f.name)
                col.meta.update(item.meta)
                items.append(col)
        return items

    # -- FROM --

    def _item(self, item: exp.Expr, ctes: Mapping[str, Relation]) -> Relation:
        alias = item.alias.lower() if item.alias else None
        call = window_call(item)
        if call is not None:
            return self._windows(call, alias, ctes)
        if isinstance(item, exp.Table) and isinstance(item.this, exp.Identifier):
            if item.args.get("db"):
                raise self._error(item, f"{item.sql()}: tables have plain names")
            name = item.name.lower()
            qualifier = alias or name
            if name in ctes:
                rel = ctes[name]
                names = self._column_names(item, [f.name for f in rel.fields])
                return self._renamed(rel.node, names, qualifier)
            if name in self._failed:
                raise SqlError([])  # its own problem is reported
            if name in self.views:
                v = self.views[name]
                names = self._column_names(item, list(v.names))
                return self._renamed(ViewRef(name, v.root.schema), names, qualifier)
            if name in self.tables:
                node = self._table(name)
                names = self._column_names(item, [c.lower() for c in node.schema.names])
                return self._renamed(node, names, qualifier)
            known = sorted([*self.tables, *self.views])
            raise self._error(
                item, f"unknown table or view {name!r} (known: {', '.join(known) or 'none'})"
            )
        if isinstance(item, exp.Subquery):
            rel = self._query(item.this, ctes)
            names = self._column_names(item, [f.name for f in rel.fields])
            return self._renamed(rel.node, names, alias)
        raise self._error(item, f"{item.sql(dialect='spark')!r}: not supported in FROM")

    def _table(self, name: str) -> Node:
        """An input table's rows: its scan, or an upserted table's live rows."""
        scan = Scan(name, self.tables[name])
        if name not in self._upserts:
            return scan
        if name not in self._upsert_nodes:
            keys, op = self._upserts[name]
            self._upsert_nodes[name] = Upsert(scan, name, keys, op)
        return self._upsert_nodes[name]

    def _column_names(self, item: exp.Expr, names: list[str]) -> list[str]:
        """`names`, or the column names an alias gives (`AS x (a, b)`)."""
        alias = item.args.get("alias")
        given = alias.args.get("columns") if isinstance(alias, exp.TableAlias) else None
        if not given:
            return names
        if len(given) != len(names):
            raise self._error(item, f"{len(given)} column names given for {len(names)} columns")
        return [c.name.lower() for c in given]

    def _windows(
        self, call: exp.Anonymous, alias: str | None, ctes: Mapping[str, Relation]
    ) -> Relation:
        partition: list[exp.Column] = []
        if is_session(call):
            table, partition, time, gap = session_args(self.script, call)
        else:
            table, time, size, slide = window_args(self.script, call)
        if not isinstance(table, exp.Column) or table.table:
            raise self._error(table, "a window function reads a table or view by its name")
        rel = self._item(exp.Table(this=exp.to_identifier(table.name)), ctes)
        by_name = {f.name: f for f in rel.fields}
        found = by_name.get(time)
        if found is None:
            raise self._error(call, f"unknown column: {time}")
        if not pa.types.is_timestamp(found.type):
            raise self._error(call, f"{time} is {found.type}, not a timestamp")
        for col in partition:
            if col.name.lower() not in by_name:
                raise self._error(col, f"unknown column: {col.name}")
        start, end = self._fresh(), self._fresh()
        node: Node
        if is_session(call):
            keys = tuple(by_name[c.name.lower()].internal for c in partition)
            node = Sessions(rel.node, keys, found.internal, gap, start, end)
        else:
            node = Windows(rel.node, found.internal, size, slide, start, end)
        ts = pa.timestamp("us", tz="UTC")
        fields = [Field(alias, f.name, f.internal, f.type) for f in rel.fields]
        fields += [Field(alias, "window_start", start, ts), Field(alias, "window_end", end, ts)]
        return Relation(node, fields)

    # -- GROUP BY --


def _bounded(item: exp.Expr, bounds: Mapping[str, int]) -> bool:
    """Whether the outer query bounds the window item's alias (`rn <= N`)."""
    return isinstance(item, exp.Alias) and item.alias.lower() in bounds


def _output_name(item: exp.Expr) -> str:
    if isinstance(item, exp.Alias):
        return item.alias.lower()
    if isinstance(item, exp.Column):
        return item.name.lower()
    return item.sql(dialect="spark").lower()


def plan(
    script: Script,
    tables: Mapping[str, pa.Schema],
    upserts: Mapping[str, tuple[tuple[str, ...], str]] | None = None,
) -> dict[str, PlannedView]:
    """Every view of `script` planned over input tables of these schemas; `upserts`: the
    tables fed by upserts and deletes, their key columns and op column."""
    return Planner(script, tables, upserts).plan()


__all__ = ["PlannedView", "Planner", "plan"]
