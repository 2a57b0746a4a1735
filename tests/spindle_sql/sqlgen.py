"""Random views for the differential test (tests/spindle_sql/test_differential.py), the technique of
SQLancer and sqlsmith: a grammar of the language docs/sql.md lists, drawn from by a seeded
`random.Random`, each view written in Spark SQL for Spindle and in DuckDB's SQL for the
oracle (scalar expressions: tests/spindle_sql/sqlgen_exprs.py).

A view is one of the query families below (`FAMILIES`): a projection with WHERE (and
DISTINCT), a grouped or global aggregate with HAVING, a set operation, a top-N, aggregates
over frames of rows. Its FROM is one of the FROM families: a table, explicit joins (inner,
left, right, full; ON or USING), items separated by commas joined by WHERE equalities, a
subquery or WITH query. Predicates and select lists may hold subqueries (EXISTS, IN, scalar;
correlated or not). The tables (`TABLES`) are small, with NULLs, duplicate rows, -0.0 and
0.0 (tests/spindle_sql/sqlgen_tables.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from .sqlgen_exprs import Exprs
from .sqlgen_tables import TABLES, column_type, rows
from .sqlgen_types import BIGINT, BOOL, DATE, DOUBLE, INT, STRING, TS, Dec, E, From, Type, both
from .sqlgen_windows import window_table


@dataclass
class Query:
    spark: str
    duck: str
    types: list[Type]


@dataclass
class Case:
    spark: str  # CREATE VIEW out AS ...
    duck: str  # the query DuckDB answers
    family: str
    columns: str = ""  # the view's column list


def _and(conds: list[E]) -> E | None:
    if not conds:
        return None
    return E(" AND ".join(c.spark for c in conds), " AND ".join(c.duck for c in conds), BOOL)


def _where(conds: list[E]) -> tuple[str, str]:
    c = _and(conds)
    return ("", "") if c is None else (f" WHERE {c.spark}", f" WHERE {c.duck}")


def _unambiguous(columns: list[E], other: list[E]) -> list[E]:
    """`columns` less a plain name (a USING column) that the `other` item joined has too:
    it would be ambiguous."""
    names = {c.spark.split(".")[-1] for c in other}
    return [c for c in columns if "." in c.spark or c.spark not in names]


def _items(items: list[E]) -> tuple[str, str]:
    return (
        ", ".join(f"{e.spark} AS c{i}" for i, e in enumerate(items)),
        ", ".join(f"{e.duck} AS c{i}" for i, e in enumerate(items)),
    )


class Generator:
    """Views drawn from the grammar by `rng`."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.aliases = 0
        # Views the view reads, defined before it: (Spark's CREATE VIEW, DuckDB's).
        self.views: list[tuple[str, str]] = []

    def alias(self) -> str:
        self.aliases += 1
        return f"q{self.aliases}"

    def exprs(self, columns: list[E], depth: int = 2, subqueries: bool = False) -> Exprs:
        return Exprs(self.rng, columns, depth, self.subquery if subqueries else None)

    # --- FROM families ----------------------------------------------------------------

    def table(self, name: str | None = None) -> From:
        name = name or self.rng.choice(list(TABLES))
        al = self.alias()
        cols = [both(f"{al}.{f.name}", column_type(f)) for f in TABLES[name]]
        return From(f"{name} {al}", f"{name} {al}", cols, [])

    def _equality(self, left: list[E], right: list[E]) -> E | None:
        pairs = [(a, b) for a in left for b in right if a.type == b.type and a.type != DOUBLE]
        if not pairs:
            return None
        a, b = self.rng.choice(pairs)
        return both(f"{a.spark} = {b.spark}", BOOL)

    def joins(self) -> From:
        left = self.table()
        for _ in range(self.rng.choice([1, 1, 2])):
            right = self.item()
            kind = self.rng.choice(["JOIN", "INNER JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"])
            names = {c.spark.split(".")[-1] for c in right.columns}
            shared = [
                c for c in left.columns[: len(TABLES["w"])] if c.spark.split(".")[-1] in names
            ]
            if (
                shared
                and not left.where
                and len(left.spark.split()) == 2
                and self.rng.random() < 0.3
            ):
                name = self.rng.choice(shared).spark.split(".")[-1]
                t = next(c.type for c in shared if c.spark.endswith(f".{name}"))
                on = f" USING ({name})"
                cols = [both(name, t), *left.columns, *right.columns]
                left = From(
                    f"{left.spark} {kind} {right.spark}{on}",
                    f"{left.duck} {kind} {right.duck}{on}",
                    cols,
                    [],
                )
                continue
            cols = [
                *_unambiguous(left.columns, right.columns),
                *_unambiguous(right.columns, left.columns),
            ]
            conds = [c for c in [self._equality(cols, right.columns)] if c]
            if not conds or self.rng.random() < 0.4:
                conds.append(self.exprs(cols, 1).pred())
            c = _and(conds)
            assert c is not None
            left = From(
                f"{left.spark} {kind} {right.spark} ON {c.spark}",
                f"{left.duck} {kind} {right.duck} ON {c.duck}",
                cols,
                [],
            )
        return left

    def commas(self) -> From:
        sep = " CROSS JOIN " if self.rng.random() < 0.15 else ", "
        # A comma binds less tightly than JOIN: `a, b LEFT JOIN c ON ...` (not after a
        # CROSS JOIN, which is refused before a RIGHT or FULL JOIN).
        items = [
            self.joins() if sep == ", " and self.rng.random() < 0.15 else self.item()
            for _ in range(self.rng.choice([2, 2, 3]))
        ]
        where: list[E] = []
        cols = list(items[0].columns)
        for it in items[1:]:
            cols = _unambiguous(cols, it.columns)
            new = _unambiguous(it.columns, cols)
            if self.rng.random() < 0.85:
                eq = self._equality(cols, new)
                if eq is not None:
                    where.append(eq)
            if self.rng.random() < 0.4:  # a condition mixing the items
                where.append(self.exprs(cols + new, 1).pred())
            cols += new
        return From(sep.join(i.spark for i in items), sep.join(i.duck for i in items), cols, where)

    def derived(self) -> From:
        q = self.aggregate_query(self.table(), subqueries=False)
        al = self.alias()
        # Not c<i>, the select list's aliases: GROUP BY c0 would name the column.
        names = ", ".join(f"k{i}" for i in range(len(q.types)))
        cols = [both(f"{al}.k{i}", t) for i, t in enumerate(q.types)]
        if self.rng.random() < 0.4:  # a view read by the view
            v = f"v{len(self.views)}"
            self.views.append(
                (
                    f"CREATE VIEW {v} ({names}) AS {q.spark};\n",
                    f"CREATE OR REPLACE TEMP VIEW {v} ({names}) AS {q.duck};\n",
                )
            )
            return From(f"{v} {al}", f"{v} {al}", cols, [])
        return From(f"({q.spark}) AS {al} ({names})", f"({q.duck}) AS {al} ({names})", cols, [])

    def windowed(self) -> From:
        return window_table(self.rng, self.alias())

    def item(self) -> From:
        return self.derived() if self.rng.random() < 0.15 else self.table()

    def source(self) -> From:
        r = self.rng.random()
        if r < 0.08:
            return self.windowed()
        if r < 0.35:
            return self.item()
        if r < 0.7:
            return self.joins()
        return self.commas()

    # --- aggregates -------------------------------------------------------------------

    def aggregate(self, ex: Exprs, over: tuple[str, str] | None = None) -> E:
        """An aggregate call over `ex`'s columns; with `over` (its window in both dialects) a
        window aggregate."""
        r = self.rng
        w = (f" {over[0]}", f" {over[1]}") if over else ("", "")
        f = r.choice(["count(*)", "count", "sum", "avg", "min", "max"])
        if f == "count(*)":
            filt = self._filter(ex)
            return E(f"count(*){filt[0]}{w[0]}", f"count(*){filt[1]}{w[1]}", BIGINT, True)
        if f in ("sum", "avg"):
            t: Type = r.choice([INT, BIGINT, DOUBLE, Dec(9, 2), Dec(7, 3)])
        elif f in ("min", "max") and over:
            t = r.choice([INT, BIGINT, DOUBLE, Dec(9, 2), DATE, TS])
        else:
            t = ex.any_type()
        arg = ex.expr(t, 1)
        if arg.spark == "NULL":  # typed: Spindle refuses avg(NULL) (docs/sql.md, Not yet)
            arg = E("CAST(NULL AS INT)", "CAST(NULL AS INT)", INT)
        distinct = "DISTINCT " if not over and r.random() < 0.2 else ""
        filt = self._filter(ex)
        call = f"{f}({distinct}{arg.spark}){filt[0]}{w[0]}"
        duck = f"{f}({distinct}{arg.duck}){filt[1]}{w[1]}"
        rt: Type = arg.type
        if f == "count":
            rt = BIGINT
        elif f == "sum":
            rt = (
                Dec(min(38, t.p + 10), t.s)
                if isinstance(t, Dec)
                else BIGINT
                if t != DOUBLE
                else DOUBLE
            )
        elif f == "avg" and isinstance(t, Dec):
            rt = Dec(min(38, t.p + 4), t.s + 4)
            total = f"CAST(sum({distinct}{arg.duck}){filt[1]}{w[1]} AS VARCHAR)"
            n = f"count({distinct}{arg.duck}){filt[1]}{w[1]}"
            duck = f"spark_avg({total}, {n}, {t.s + 4})"
        elif f == "avg":
            rt = DOUBLE
        return E(call, duck, rt, True)

    def _filter(self, ex: Exprs) -> tuple[str, str]:
        if self.rng.random() < 0.25:
            p = ex.pred(1)
            return f" FILTER (WHERE {p.spark})", f" FILTER (WHERE {p.duck})"
        return "", ""

    def aggregate_query(self, src: From, subqueries: bool = True) -> Query:
        r = self.rng
        ex = self.exprs(src.columns, 1)
        keys = [ex.expr(ex.any_type(), 1) for _ in range(r.choice([0, 1, 1, 2]))]
        aggs = [self.aggregate(ex) for _ in range(r.randint(1, 3))]
        over = self.exprs([*keys, *aggs], 1, subqueries=False)
        items = [*keys, *aggs]
        if r.random() < 0.3:  # an expression over aggregates
            items.append(over.expr(over.any_type(), 1))
        sel = _items(items)
        conds = list(src.where)
        if r.random() < 0.5:
            conds.append(self.exprs(src.columns, 2, subqueries).pred())
        where = _where(conds)
        spark = f"SELECT {sel[0]} FROM {src.spark}{where[0]}"
        duck = f"SELECT {sel[1]} FROM {src.duck}{where[1]}"
        if keys:
            by = [self._group_key(i, k) for i, k in enumerate(keys)]
            spark += " GROUP BY " + ", ".join(b[0] for b in by)
            duck += " GROUP BY " + ", ".join(b[1] for b in by)
        if r.random() < 0.35:
            having = Exprs(r, [*keys, *aggs], 1, self.uncorrelated if subqueries else None).pred()
            spark += f" HAVING {having.spark}"
            duck += f" HAVING {having.duck}"
        return Query(spark, duck, [e.type for e in items])

    def _group_key(self, i: int, key: E) -> tuple[str, str]:
        how = self.rng.choice(["expr", "expr", "position", "alias"])
        if how == "position" or key.spark.lstrip("-").isdigit():  # a number is a position
            return str(i + 1), str(i + 1)
        if how == "alias":
            return f"c{i}", f"c{i}"
        return key.spark, key.duck

    # --- subqueries -------------------------------------------------------------------

    def subquery(self, outer: Exprs, t: Type | None) -> E | None:
        return self._subquery(outer.columns, t, correlated=self.rng.random() < 0.7)

    def uncorrelated(self, outer: Exprs, t: Type | None) -> E | None:
        return self._subquery(outer.columns, t, correlated=False)

    def _subquery(self, outer: list[E], t: Type | None, correlated: bool) -> E | None:
        r = self.rng
        inner = self.table()
        ex = self.exprs(inner.columns, 1)
        conds = [ex.pred(1)] if r.random() < 0.6 else []
        plain = [c for c in outer if not c.agg]
        non_equality = False
        if correlated and plain:
            eq = self._equality(inner.columns, plain)
            non_eq = r.random() < 0.3
            if eq is None or non_eq:
                pairs = [(a, b) for a in inner.columns for b in plain if a.type == b.type]
                if pairs:
                    a, b = r.choice(pairs)
                    non_equality = True
                    conds.append(both(f"{a.spark} {r.choice(['<', '<>', '>='])} {b.spark}", BOOL))
            if eq is not None:
                conds.append(eq)
        where = _where(conds)
        if t == BOOL:
            kind = r.choice(["EXISTS", "NOT EXISTS", "IN", "NOT IN"])
            if kind.endswith("EXISTS"):
                return E(
                    f"({kind} (SELECT 1 FROM {inner.spark}{where[0]}))",
                    f"({kind} (SELECT 1 FROM {inner.duck}{where[1]}))",
                    BOOL,
                )
            if non_equality:
                return None  # IN correlated by other conditions: refused (write EXISTS)
            col = r.choice(inner.columns)
            cands = [c for c in plain if c.type == col.type] or [Exprs(r, []).literal(col.type)]
            x = r.choice(cands)
            q = (
                f"SELECT {col.spark} FROM {inner.spark}{where[0]}",
                f"SELECT {col.duck} FROM {inner.duck}{where[1]}",
            )
            if not correlated and r.random() < 0.2:  # any query: grouped
                key = r.choice(inner.columns)
                q = (
                    f"SELECT max({col.spark}) FROM {inner.spark}{where[0]} GROUP BY {key.spark}",
                    f"SELECT max({col.duck}) FROM {inner.duck}{where[1]} GROUP BY {key.duck}",
                )
            elif not correlated and r.random() < 0.3:
                other = self.table()
                oc = [c for c in other.columns if c.type == col.type]
                if oc:
                    q = (
                        f"{q[0]} UNION SELECT {oc[0].spark} FROM {other.spark}",
                        f"{q[1]} UNION SELECT {oc[0].duck} FROM {other.duck}",
                    )
            return E(f"({x.spark} {kind} ({q[0]}))", f"({x.duck} {kind} ({q[1]}))", BOOL)
        agg = self.aggregate(ex)
        if t is not None and agg.type != t:
            return None
        return E(
            f"(SELECT {agg.spark} FROM {inner.spark}{where[0]})",
            f"(SELECT {agg.duck} FROM {inner.duck}{where[1]})",
            agg.type,
        )

    # --- query families ---------------------------------------------------------------

    def projection(self) -> Case:
        r = self.rng
        src = self.source()
        ex = self.exprs(src.columns, 2, subqueries=True)
        items = [ex.expr(ex.any_type(boolean=True)) for _ in range(r.randint(1, 4))]
        sel = _items(items)
        conds = list(src.where)
        if r.random() < 0.5:
            conds.append(ex.pred())
        where = _where(conds)
        distinct = "DISTINCT " if r.random() < 0.2 else ""
        star = ("", "")
        if r.random() < 0.15:
            first = src.columns[-1].spark.split(".")[0]
            star = (f"{first}.*, ", f"{first}.*, ")
        return Case(
            f"SELECT {distinct}{star[0]}{sel[0]} FROM {src.spark}{where[0]}",
            f"SELECT {distinct}{star[1]}{sel[1]} FROM {src.duck}{where[1]}",
            "projection",
        )

    def grouped(self) -> Case:
        src = self.source()
        q = self.aggregate_query(src)
        if self.rng.random() < 0.15:  # as a WITH query
            names = ", ".join(f"c{i}" for i in range(len(q.types)))
            return Case(
                f"WITH g ({names}) AS ({q.spark}) SELECT * FROM g",
                f"WITH g ({names}) AS ({q.duck}) SELECT * FROM g",
                "grouped",
            )
        if self.rng.random() < 0.15:  # the view names its columns
            names = ", ".join(f"v{i}" for i in range(len(q.types)))
            return Case(q.spark, q.duck, "grouped", f" ({names})")
        return Case(q.spark, q.duck, "grouped")

    def set_operation(self) -> Case:
        r = self.rng
        types = [
            r.choice([INT, BIGINT, STRING, DATE, DOUBLE, Dec(9, 2)]) for _ in range(r.randint(1, 3))
        ]
        sides = []
        for _ in range(2):
            src = self.table()
            ex = self.exprs(src.columns, 1)
            sel = _items([ex.expr(t, 1) for t in types])
            where = _where([ex.pred(1)] if r.random() < 0.5 else [])
            sides.append(
                (
                    f"SELECT {sel[0]} FROM {src.spark}{where[0]}",
                    f"SELECT {sel[1]} FROM {src.duck}{where[1]}",
                )
            )
        op = r.choice(["UNION", "UNION ALL"])
        return Case(
            f"{sides[0][0]} {op} {sides[1][0]}",
            f"{sides[0][1]} {op} {sides[1][1]}",
            "set operation",
        )

    def _window(self, src: From) -> tuple[E, E, str, str]:
        """PARTITION BY, ORDER BY, direction and DuckDB's NULLS clause (Spark's order) for a
        window."""
        r = self.rng
        cols = [c for c in src.columns if c.type != DOUBLE]
        p, o = r.choice(cols), r.choice(src.columns)
        desc = r.random() < 0.4
        return p, o, " DESC" if desc else "", " NULLS LAST" if desc else " NULLS FIRST"

    def top_n(self) -> Case:
        r = self.rng
        src = self.table()
        p, o, desc, nulls = self._window(src)
        cols = list(dict.fromkeys([p, o, *r.sample(src.columns, r.randint(0, 2))]))
        ex = self.exprs(src.columns, 1)
        where = _where([ex.pred(1)] if r.random() < 0.5 else [])
        sel = _items(cols)
        # Spindle breaks ties by the input's columns (all of t's), ascending
        ties = ", ".join(f"{c.duck} ASC NULLS FIRST" for c in src.columns)
        n = r.randint(1, 3)
        bound = r.choice([f"rn <= {n}", f"rn < {n + 1}", "rn = 1"])
        outer = ", ".join(f"c{i}" for i in range(len(cols))) + (", rn" if r.random() < 0.5 else "")
        spark_in = (
            f"SELECT {sel[0]}, ROW_NUMBER() OVER (PARTITION BY {p.spark} ORDER BY {o.spark}{desc})"
            f" AS rn FROM {src.spark}{where[0]}"
        )
        duck_in = (
            f"SELECT {sel[1]}, ROW_NUMBER() OVER (PARTITION BY {p.duck} ORDER BY {o.duck}{desc}"
            f"{nulls}, {ties}) AS rn FROM {src.duck}{where[1]}"
        )
        return Case(
            f"SELECT {outer} FROM ({spark_in}) WHERE {bound}",
            f"SELECT {outer} FROM ({duck_in}) WHERE {bound}",
            "top-n",
        )

    def rows_over(self) -> Case:
        r = self.rng
        src = self.table()
        p, o, desc, nulls = self._window(src)
        ex = self.exprs(src.columns, 1)
        frames = [
            "ROWS BETWEEN 2 PRECEDING AND CURRENT ROW",
            "ROWS UNBOUNDED PRECEDING",
            "ROWS 1 PRECEDING",
            "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
            "ROWS BETWEEN CURRENT ROW AND CURRENT ROW",
        ]
        # Peers (RANGE frames, RANK) are rows equal in the ORDER BY (NULL to NULL, NaN to NaN).
        frames += ["RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW", ""]
        ties = ", ".join(f"{c.duck} ASC NULLS FIRST" for c in src.columns)

        def over(frame: str) -> tuple[str, str]:
            # A RANGE frame (or none: SQL's default) takes the row's peers: no tie-break.
            broken = "" if frame.startswith("RANGE") or not frame else f", {ties}"
            return (
                f"OVER (PARTITION BY {p.spark} ORDER BY {o.spark}{desc} {frame})",
                f"OVER (PARTITION BY {p.duck} ORDER BY {o.duck}{desc}{nulls}{broken} {frame})",
            )

        # Several aggregates share the window, each its own frame: one operator, whose
        # values pair among duplicate rows as over one ordering (docs/sql.md, Aggregates
        # over a frame of rows). Windows apart are not drawn: their pairing of duplicates
        # is undefined (docs/sql.md, the known difference not refused). Window functions
        # share it too.
        aggs = [self.aggregate(ex, over(r.choice(frames))) for _ in range(r.randint(1, 3))]
        for _ in range(r.randint(0, 2)):
            f = r.choice(["ROW_NUMBER", "LAG", "LEAD", "RANK", "DENSE_RANK"])
            if f in ("RANK", "DENSE_RANK"):
                call = f"{f}() {over('')[0]}", f"{f}() {over('')[1].replace(' )', ')')}"
                aggs.append(E(*call, INT))
                continue
            rows = over("ROWS UNBOUNDED PRECEDING")  # ties broken in DuckDB's; no frame
            spark, duck = (w.replace(" ROWS UNBOUNDED PRECEDING", "") for w in rows)
            if f == "ROW_NUMBER":
                aggs.append(E(f"ROW_NUMBER() {spark}", f"ROW_NUMBER() {duck}", INT))
                continue
            arg = ex.expr(ex.any_type(), 1)
            n = r.choice(["", ", 2", ", -1"])
            aggs.append(E(f"{f}({arg.spark}{n}) {spark}", f"{f}({arg.duck}{n}) {duck}", arg.type))
        sel = _items(aggs)
        where = _where([ex.pred(1)] if r.random() < 0.4 else [])
        return Case(
            f"SELECT *, {sel[0]} FROM {src.spark}{where[0]}",
            f"SELECT *, {sel[1]} FROM {src.duck}{where[1]}",
            "rows over",
        )

    def view(self) -> Case:
        family = self.rng.choices(
            [self.projection, self.grouped, self.set_operation, self.top_n, self.rows_over],
            weights=[40, 35, 8, 8, 9],
        )[0]
        c = family()
        before = ("".join(v[0] for v in self.views), "".join(v[1] for v in self.views))
        return Case(
            f"{before[0]}CREATE VIEW out{c.columns} AS {c.spark}", before[1] + c.duck, c.family
        )


def generate(seed: int, index: int) -> Case:
    """View `index` of the views of `seed` (the same view on every run)."""
    return Generator(random.Random(f"{seed}:{index}")).view()


__all__ = ["TABLES", "Case", "generate", "rows"]
