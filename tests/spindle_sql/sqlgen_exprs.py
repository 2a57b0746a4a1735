"""Scalar expressions of the differential test's grammar (tests/spindle_sql/sqlgen.py): each one
written twice, in Spark SQL for Spindle and in DuckDB's SQL with the same meaning, and
typed as Spark types it, so that a caller can ask for an expression of a given type.

Where DuckDB's function differs from Spark's (its `CAST` of a double to an integer rounds,
Spark's truncates; its `concat` skips NULLs; a date plus an interval is a timestamp to it;
its day of the week counts from 0), the DuckDB side says what Spark means. Arguments stay
where Spark's ANSI mode does not fail (divisors are `nullif(x, 0)`, `ln` and `sqrt` see
`abs(x) + 1`), because the test compares answers, not errors. Each construct family is one
method of `Exprs`."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from .sqlgen_types import (
    BIGINT,
    BOOL,
    DATE,
    DATE_FIELDS,
    DATE_FORMATS,
    DATES,
    DIVISION_TYPES,
    DIVISIONS,
    DOUBLE,
    EXTRACT_FIELDS,
    INT,
    INTERVAL_UNITS,
    LIKE_PATTERNS,
    NUMERIC,
    STRING,
    STRINGS,
    TIME_FIELDS,
    TS,
    TS_UNITS,
    Dec,
    E,
    Type,
    add_type,
    both,
    dec_sql,
    decimal_of,
    div_type,
    mul_type,
)


@dataclass
class Exprs:
    """Expressions over `columns` (those in scope), `depth` levels of nesting at most.
    `subquery`, when set, makes subquery predicates and scalars (sqlgen's) one more family."""

    rng: random.Random
    columns: list[E]
    depth: int = 2
    subquery: Callable[[Exprs, Type | None], E | None] | None = None
    _families: dict[str, list[Callable[[int], E | None]]] = field(default_factory=dict)

    # --- the entry points -------------------------------------------------------------

    def expr(self, t: Type, depth: int | None = None) -> E:
        depth = self.depth if depth is None else depth
        if t == BOOL:
            return self.pred(depth)
        for _ in range(4):
            if depth <= 0 or self.rng.random() < 0.3:
                return self.leaf(t)
            e = self.rng.choice(self._choices(t))(depth - 1)
            if e is not None and e.type == t:
                return e
        return self.leaf(t)

    def any_type(self, boolean: bool = False) -> Type:
        """The type of a column in scope, or a common type (or, if `boolean`, a condition's:
        a select list's EXISTS or IN as a column)."""
        if boolean and self.rng.random() < 0.1:
            return BOOL
        if self.columns and self.rng.random() < 0.8:
            return self.rng.choice(self.columns).type
        if self.rng.random() < 0.3:
            return self.rng.choice(DIVISION_TYPES)
        return self.rng.choice([INT, BIGINT, DOUBLE, STRING, DATE, Dec(9, 2)])

    def leaf(self, t: Type) -> E:
        cols = [c for c in self.columns if c.type == t]
        if cols and self.rng.random() < 0.8:
            return self.rng.choice(cols)
        return self.literal(t)

    def _choices(self, t: Type) -> list[Callable[[int], E | None]]:
        c: list[Callable[[int], E | None]] = [self.conditional]
        if t in NUMERIC or isinstance(t, Dec):
            c += [lambda d: self.arith(t, d), lambda d: self.math(t, d), lambda d: self.cast(t, d)]
        if t in (INT, BIGINT):
            c += [self.extract, self.extract, self.string_number]
        if t == STRING:
            c += [self.string, lambda d: self.cast(t, d)]
        if t in (DATE, TS):
            c += [lambda d: self.datetime(t, d), lambda d: self.cast(t, d)]
        if self.subquery is not None and t != STRING:
            c.append(lambda d: self.subquery(self, t) if self.subquery else None)
        return c

    # --- literals ---------------------------------------------------------------------

    def literal(self, t: Type) -> E:
        r = self.rng
        if r.random() < 0.05:
            null = "NULL" if t in (INT,) else f"CAST(NULL AS {self._type_sql(t)})"
            return E(null, null.replace("STRING", "VARCHAR"), t)
        if t == INT:
            return both(str(r.randint(-3, 8)), INT)
        if t == BIGINT:
            return both(f"CAST({r.randint(-20, 40)} AS BIGINT)", BIGINT)
        if t == DOUBLE:
            v = r.choice(["0.0", "-0.0", "1.5", "-2.25", "10.0", "0.25"])
            return both(f"{v}E0", DOUBLE)
        if isinstance(t, Dec):
            digits = r.randint(0, 10 ** min(t.p, 6) - 1)
            text = str(digits) if t.s == 0 else f"{digits / 10**t.s:.{t.s}f}"
            return both(f"CAST({text} AS {dec_sql(t)})", t)
        if t == STRING:
            v = r.choice(STRINGS)
            return both(f"'{v}'", STRING)
        if t == DATE:
            return both(f"DATE '{r.choice(DATES)}'", DATE)
        if t == TS:
            v = f"TIMESTAMP '2024-02-{r.randint(27, 29)} {r.randint(0, 23):02}:30:00'"
            return E(v, f"CAST({v} AS TIMESTAMPTZ)", TS)
        return both(r.choice(["TRUE", "FALSE"]), BOOL)

    @staticmethod
    def _type_sql(t: Type) -> str:
        return dec_sql(t) if isinstance(t, Dec) else t.upper()

    # --- numbers ----------------------------------------------------------------------

    def arith(self, t: Type, depth: int) -> E | None:
        a = self.expr(t, depth)
        other = self.rng.choice([t, t, INT] if t != DOUBLE else [DOUBLE, INT, BIGINT])
        b = self.expr(other, depth)
        op = self.rng.choice(["+", "-", "*", "/", "%"] if t != INT else ["+", "-", "*", "%"])
        if op == "/":
            return self._divide(a, b, t) if t == DOUBLE else self.division(t, depth)
        if op == "%":
            if isinstance(t, Dec):
                return None
            n = self.rng.choice([2, 3, 5])
            if self.rng.random() < 0.3:
                return E(f"mod({a.spark}, {n})", f"({a.duck} % {n})", t)
            return E(f"({a.spark} % {n})", f"({a.duck} % {n})", t)
        rt = add_type(a.type, b.type) if op != "*" else mul_type(a.type, b.type)
        if rt is None:
            return None
        duck_a = a.duck
        if op == "*" and isinstance(rt, Dec):  # DuckDB multiplies in the factors' width
            duck_a = f"CAST({a.duck} AS DECIMAL(38, {decimal_of(a.type).s}))"
        return E(f"({a.spark} {op} {b.spark})", f"({duck_a} {op} {b.duck})", rt)

    @staticmethod
    def _divide(a: E, b: E, t: Type) -> E | None:
        """`a / b`: a double, or (a decimal operand, no double) a decimal rounded HALF_UP to
        Spark's scale, which DuckDB computes with `spark_div` (test_differential.py)."""
        if t == DOUBLE:
            return E(
                f"({a.spark} / nullif({b.spark}, 0))", f"({a.duck} / nullif({b.duck}, 0))", DOUBLE
            )
        rt = div_type(a.type, b.type)
        if rt is None or t != rt:
            return None
        return E(
            f"({a.spark} / nullif({b.spark}, 0))",
            f"CAST(spark_div(CAST({a.duck} AS VARCHAR), CAST(nullif({b.duck}, 0) AS VARCHAR),"
            f" {rt.s}) AS {dec_sql(rt)})",
            rt,
        )

    def division(self, t: Type, depth: int) -> E | None:
        """A decimal quotient of type `t`, of operands whose quotient has that type."""
        pairs = [(x, y) for x, y in DIVISIONS if div_type(x, y) == t]
        if not pairs:
            return None
        x, y = self.rng.choice(pairs)
        return self._divide(self.expr(x, depth), self.expr(y, depth), t)

    def math(self, t: Type, depth: int) -> E | None:
        a = self.expr(t, depth)
        r = self.rng
        if t == DOUBLE:
            f = r.choice(["sqrt", "ln", "exp", "power", "round", "abs", "greatest"])
            if f in ("sqrt", "ln"):
                return E(f"{f}(abs({a.spark}) + 1)", f"{f}(abs({a.duck}) + 1)", DOUBLE)
            if f == "exp":
                return E(f"exp({a.spark} / 100)", f"exp({a.duck} / 100)", DOUBLE)
            if f == "power":
                return E(f"power({a.spark}, 2)", f"power({a.duck}, 2)", DOUBLE)
            if f == "round":
                n = r.randint(0, 2)
                return E(f"round({a.spark}, {n})", f"round({a.duck}, {n})", DOUBLE)
        if t == BIGINT and r.random() < 0.3:
            x = self.expr(DOUBLE, depth)
            f = r.choice(["floor", "ceil"])
            return E(f"{f}({x.spark})", f"CAST({f}({x.duck}) AS BIGINT)", BIGINT)
        if isinstance(t, Dec) and t.s == 0 and r.random() < 0.3:
            x = self.expr(Dec(t.p - 1, 2), depth)
            f = r.choice(["floor", "ceil"])
            return E(f"{f}({x.spark})", f"{f}({x.duck})", t)
        if t in (INT, BIGINT) and r.random() < 0.4:
            n = r.choice([2, 3, 7])
            return E(f"pmod({a.spark}, {n})", f"((({a.duck} % {n}) + {n}) % {n})", t)
        if isinstance(t, Dec) and r.random() < 0.3:
            n = r.randint(0, t.s)
            rt = Dec(t.p - t.s + n + 1, n)
            return E(f"round({a.spark}, {n})", f"round({a.duck}, {n})", rt) if n < t.s else None
        if r.random() < 0.5:
            b = self.expr(t, depth)
            f = r.choice(["greatest", "least"])
            return E(f"{f}({a.spark}, {b.spark})", f"{f}({a.duck}, {b.duck})", t)
        return E(f"abs({a.spark})", f"abs({a.duck})", t)

    def string_number(self, depth: int) -> E:
        s = self.expr(STRING, depth)
        return E(f"length({s.spark})", f"length({s.duck})", INT)

    def extract(self, depth: int) -> E:
        r = self.rng
        if r.random() < 0.2:
            a, b = self.expr(DATE, depth), self.expr(DATE, depth)
            return E(f"datediff({a.spark}, {b.spark})", f"({a.duck} - {b.duck})", INT)
        if r.random() < 0.3:
            ts = self.expr(TS, depth)
            f = r.choice([*TIME_FIELDS, "unix_timestamp"])
            if f == "unix_timestamp":
                return E(
                    f"unix_timestamp({ts.spark})",
                    f"CAST(floor(epoch({ts.duck})) AS BIGINT)",
                    BIGINT,
                )
            return E(f"{f}({ts.spark})", TIME_FIELDS[f].format(ts.duck), INT)
        d = self.expr(r.choice([DATE, DATE, TS]), depth)
        if r.random() < 0.5:
            field_ = r.choice(list(EXTRACT_FIELDS) + (["HOUR", "MINUTE"] if d.type == TS else []))
            if field_ in ("HOUR", "MINUTE"):
                return E(f"EXTRACT({field_} FROM {d.spark})", f"{field_.lower()}({d.duck})", INT)
            return E(
                f"EXTRACT({field_} FROM {d.spark})", EXTRACT_FIELDS[field_].format(d.duck), INT
            )
        f = r.choice(list(DATE_FIELDS))
        return E(f"{f}({d.spark})", DATE_FIELDS[f].format(d.duck), INT)

    # --- strings ----------------------------------------------------------------------

    def string(self, depth: int) -> E:
        r = self.rng
        a = self.expr(STRING, depth)
        f = r.choice(
            [
                *("upper", "lower", "trim", "ltrim", "rtrim", "concat", "concat_ws"),
                *("substring", "replace", "regexp_extract", "split_part", "date_format"),
            ]
        )
        if f in ("upper", "lower", "trim", "ltrim", "rtrim"):
            return E(f"{f}({a.spark})", f"{f}({a.duck})", STRING)
        if f in ("concat", "concat_ws"):
            b = self.expr(STRING, depth)
            if f == "concat":
                return E(f"concat({a.spark}, {b.spark})", f"({a.duck} || {b.duck})", STRING)
            return E(
                f"concat_ws('-', {a.spark}, {b.spark})",
                f"concat_ws('-', {a.duck}, {b.duck})",
                STRING,
            )
        if f == "substring":
            p, n = r.randint(1, 3), r.randint(0, 4)
            return E(f"substring({a.spark}, {p}, {n})", f"substring({a.duck}, {p}, {n})", STRING)
        if f == "replace":
            return E(f"replace({a.spark}, 'b', 'xy')", f"replace({a.duck}, 'b', 'xy')", STRING)
        if f == "regexp_extract":
            pat, g = r.choice([("([a-z]+)", 1), ("(b)(o)", 2), ("o.", 0)])
            return E(
                f"regexp_extract({a.spark}, '{pat}', {g})",
                f"regexp_extract({a.duck}, '{pat}', {g})",
                STRING,
            )
        if f == "split_part":
            n = r.randint(1, 3)
            return E(f"split_part({a.spark}, ' ', {n})", f"split_part({a.duck}, ' ', {n})", STRING)
        d = self.expr(r.choice([DATE, DATE, TS]), depth)
        spark_fmt = r.choice(list(DATE_FORMATS) + (["yyyy-MM-dd HH:mm:ss"] if d.type == TS else []))
        return E(
            f"date_format({d.spark}, '{spark_fmt}')",
            f"strftime({d.duck}, '{DATE_FORMATS[spark_fmt]}')",
            STRING,
        )

    # --- dates and times --------------------------------------------------------------

    def datetime(self, t: Type, depth: int) -> E | None:
        r = self.rng
        a = self.expr(t, depth)
        sign = r.choice(["+", "-"])
        n = r.randint(0, 40)
        if t == TS:
            if r.random() < 0.3:
                unit = r.choice(["HOUR", "DAY", "MONTH"])
                return E(
                    f"date_trunc('{unit}', {a.spark})",
                    f"date_trunc('{unit.lower()}', {a.duck})",
                    TS,
                )
            if r.random() < 0.2:  # a date plus hours to seconds is a timestamp
                d = self.expr(DATE, depth)
                iv = f"INTERVAL '{n}' {r.choice(['HOUR', 'MINUTE', 'SECOND'])}"
                return E(
                    f"({d.spark} {sign} {iv})", f"CAST({d.duck} {sign} {iv} AS TIMESTAMPTZ)", TS
                )
            unit = r.choice(TS_UNITS)
            iv = f"INTERVAL '{n}' {unit}"
            return E(f"({a.spark} {sign} {iv})", f"({a.duck} {sign} {iv})", TS)
        f = r.choice(["interval", "interval", "date_add", "date_sub", "add_months", "to_date"])
        if f == "interval":
            unit = r.choice(INTERVAL_UNITS)
            iv = f"INTERVAL '{n}' {unit}"
            spark_iv = r.choice([iv, f"INTERVAL {n} {unit}S", f"INTERVAL '{n} {unit.lower()}'"])
            return E(f"({a.spark} {sign} {spark_iv})", f"CAST({a.duck} {sign} {iv} AS DATE)", DATE)
        if f == "to_date":
            x = self.expr(r.choice([TS, DATE]), depth)
            if x.type == TS:
                return E(f"to_date({x.spark})", f"CAST({x.duck} AS DATE)", DATE)
            return E(
                f"to_date(CAST({x.spark} AS STRING))",
                f"CAST(CAST({x.duck} AS VARCHAR) AS DATE)",
                DATE,
            )
        days = self.expr(INT, depth - 1)
        if f == "add_months":
            return E(
                f"add_months({a.spark}, {days.spark})",
                f"CAST({a.duck} + to_months({days.duck}) AS DATE)",
                DATE,
            )
        op = "+" if f == "date_add" else "-"
        return E(f"{f}({a.spark}, {days.spark})", f"({a.duck} {op} {days.duck})", DATE)

    # --- conditionals and casts -------------------------------------------------------

    def conditional(self, depth: int) -> E | None:
        r = self.rng
        t = self.any_type()
        f = r.choice(["case", "simple_case", "if", "coalesce", "nullif", "ifnull"])
        a, b = self.expr(t, depth), self.expr(t, depth)
        if f == "case":
            c = self.pred(depth)
            default = self.expr(t, depth)
            return E(
                f"CASE WHEN {c.spark} THEN {a.spark} ELSE {default.spark} END",
                f"CASE WHEN {c.duck} THEN {a.duck} ELSE {default.duck} END",
                t,
            )
        if f == "simple_case":
            x = self.leaf(t)
            return E(
                f"CASE {x.spark} WHEN {a.spark} THEN {b.spark} END",
                f"CASE {x.duck} WHEN {a.duck} THEN {b.duck} END",
                t,
            )
        if f == "if":
            c = self.pred(depth)
            return E(
                f"if({c.spark}, {a.spark}, {b.spark})",
                f"CASE WHEN {c.duck} THEN {a.duck} ELSE {b.duck} END",
                t,
            )
        if f == "ifnull":
            name = r.choice(["ifnull", "nvl"])
            return E(f"{name}({a.spark}, {b.spark})", f"coalesce({a.duck}, {b.duck})", t)
        return E(f"{f}({a.spark}, {b.spark})", f"{f}({a.duck}, {b.duck})", t)

    def cast(self, t: Type, depth: int) -> E | None:
        r = self.rng
        if t == STRING:
            a = self.expr(r.choice([INT, BIGINT, DATE, Dec(9, 2), BOOL]), depth)
            return E(f"CAST({a.spark} AS STRING)", f"CAST({a.duck} AS VARCHAR)", STRING)
        if t == INT and r.random() < 0.3:  # the narrow integers, back to int for their range
            a = self.leaf(INT)
            n = r.choice(["SMALLINT", "TINYINT"])
            return E(f"CAST(CAST({a.spark} AS {n}) AS INT)", f"CAST({a.duck} AS INT)", INT)
        if t in (INT, BIGINT):
            a = self.expr(r.choice([DOUBLE, Dec(9, 2), INT, BIGINT]), depth)
            sql = t.upper()
            if a.type == BIGINT and t == INT:
                return None  # may overflow: Spark fails the step
            return E(f"CAST({a.spark} AS {sql})", f"CAST(trunc({a.duck}) AS {sql})", t)
        if t == DOUBLE:
            a = self.expr(r.choice([INT, BIGINT, Dec(9, 2), DOUBLE]), depth)
            if a.type == DOUBLE:  # through float
                return E(
                    f"CAST(CAST({a.spark} AS FLOAT) AS DOUBLE)",
                    f"CAST(CAST({a.duck} AS FLOAT) AS DOUBLE)",
                    DOUBLE,
                )
            return E(f"CAST({a.spark} AS DOUBLE)", f"CAST({a.duck} AS DOUBLE)", DOUBLE)
        if isinstance(t, Dec):
            a = self.expr(r.choice([INT, t]), depth)
            if a.type == INT and t.p - t.s < 10:
                return None
            return E(f"CAST({a.spark} AS {dec_sql(t)})", f"CAST({a.duck} AS {dec_sql(t)})", t)
        if t == DATE:
            a = self.expr(TS, depth)
            return E(f"CAST({a.spark} AS DATE)", f"CAST({a.duck} AS DATE)", DATE)
        if t == TS:
            a = self.expr(DATE, depth)
            return E(f"CAST({a.spark} AS TIMESTAMP)", f"CAST({a.duck} AS TIMESTAMPTZ)", TS)
        return None

    # --- predicates -------------------------------------------------------------------

    def pred(self, depth: int | None = None) -> E:
        depth = self.depth if depth is None else depth
        r = self.rng
        if depth > 0 and r.random() < 0.35:
            a, b = self.pred(depth - 1), self.pred(depth - 1)
            op = r.choice(["AND", "OR"])
            if r.random() < 0.2:
                return E(f"(NOT {a.spark})", f"(NOT {a.duck})", BOOL)
            return E(f"({a.spark} {op} {b.spark})", f"({a.duck} {op} {b.duck})", BOOL)
        if self.subquery is not None and r.random() < 0.15:
            e = self.subquery(self, BOOL)
            if e is not None:
                return e
        t = self.any_type()
        a = self.expr(t, depth - 1)
        kind = r.choice(["cmp", "cmp", "null", "in", "between", "like"])
        if kind == "null":
            neg = r.choice(["", " NOT"])
            return E(f"({a.spark} IS{neg} NULL)", f"({a.duck} IS{neg} NULL)", BOOL)
        if kind == "in":
            items = [self.literal(t) for _ in range(r.randint(1, 3))]
            neg = r.choice(["", " NOT"])
            return E(
                f"({a.spark}{neg} IN ({', '.join(i.spark for i in items)}))",
                f"({a.duck}{neg} IN ({', '.join(i.duck for i in items)}))",
                BOOL,
            )
        if kind == "between":
            lo, hi = self.expr(t, depth - 1), self.expr(t, depth - 1)
            return E(
                f"({a.spark} BETWEEN {lo.spark} AND {hi.spark})",
                f"({a.duck} BETWEEN {lo.duck} AND {hi.duck})",
                BOOL,
            )
        if kind == "like":
            return self._string_match(depth)
        b = self.expr(t, depth - 1)
        op = r.choice(["=", "<>", "<", "<=", ">", ">=", "<=>"])
        duck_op = "IS NOT DISTINCT FROM" if op == "<=>" else op
        return E(f"({a.spark} {op} {b.spark})", f"({a.duck} {duck_op} {b.duck})", BOOL)

    def _string_match(self, depth: int) -> E:
        r = self.rng
        s = self.expr(STRING, depth - 1)
        f = r.choice(["like", "like", "not like", "rlike", "startswith", "endswith", "contains"])
        if f in ("like", "not like"):
            p = r.choice(LIKE_PATTERNS)
            op = f.upper()
            if r.random() < 0.2:
                return E(f"(NOT {s.spark} {op} '{p}')", f"(NOT {s.duck} {op} '{p}')", BOOL)
            return E(f"({s.spark} {op} '{p}')", f"({s.duck} {op} '{p}')", BOOL)
        if f == "rlike":
            p = r.choice(["^b", "o+", "[0-9]", "a.b", "^$"])
            return E(f"({s.spark} RLIKE '{p}')", f"regexp_matches({s.duck}, '{p}')", BOOL)
        lit = r.choice(["b", "ob", "", "a"])
        duck = {"startswith": "starts_with", "endswith": "ends_with"}.get(f, f)
        return E(f"{f}({s.spark}, '{lit}')", f"{duck}({s.duck}, '{lit}')", BOOL)
