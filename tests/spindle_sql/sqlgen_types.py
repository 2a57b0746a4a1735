"""The differential test's types and constants (tests/spindle_sql/sqlgen.py): an expression in both
dialects (`E`) typed as Spark types it, Spark's decimal result types, and the values and
names the grammar draws from."""

from __future__ import annotations

from dataclasses import dataclass

INT, BIGINT, DOUBLE, STRING, DATE, TS, BOOL = (
    "int",
    "bigint",
    "double",
    "string",
    "date",
    "timestamp",
    "boolean",
)


@dataclass(frozen=True)
class Dec:
    p: int
    s: int


Type = str | Dec
NUMERIC = (INT, BIGINT, DOUBLE)


@dataclass(frozen=True)
class E:
    """An expression in both dialects, and its type as Spark types it."""

    spark: str
    duck: str
    type: Type
    # An aggregate's value (usable in HAVING and over GROUP BY keys only).
    agg: bool = False


def both(text: str, t: Type, agg: bool = False) -> E:
    return E(text, text, t, agg)


def decimal_of(t: Type) -> Dec:
    return t if isinstance(t, Dec) else Dec(10, 0) if t == INT else Dec(20, 0)


def dec_sql(t: Dec) -> str:
    return f"DECIMAL({t.p}, {t.s})"


def add_type(a: Type, b: Type) -> Type | None:
    """Spark's type of `a + b` (and `-`), None where the grammar does not go (over 38
    digits, where Spark would round)."""
    if DOUBLE in (a, b):
        return DOUBLE
    if not isinstance(a, Dec) and not isinstance(b, Dec):
        return BIGINT if BIGINT in (a, b) else INT
    x, y = decimal_of(a), decimal_of(b)
    s = max(x.s, y.s)
    p = max(x.p - x.s, y.p - y.s) + s + 1
    return Dec(p, s) if p <= 38 else None


def mul_type(a: Type, b: Type) -> Type | None:
    if DOUBLE in (a, b) or not (isinstance(a, Dec) or isinstance(b, Dec)):
        return add_type(a, b)
    x, y = decimal_of(a), decimal_of(b)
    return Dec(x.p + y.p + 1, x.s + y.s) if x.p + y.p + 1 <= 38 else None


def div_type(a: Type, b: Type) -> Dec | None:
    """Spark's type of the decimal `a / b` (None where the grammar does not go: a scale
    beyond `spark_div`'s 18)."""
    if DOUBLE in (a, b) or not (isinstance(a, Dec) or isinstance(b, Dec)):
        return None
    x, y = decimal_of(a), decimal_of(b)
    s = max(6, x.s + y.p + 1)
    p = x.p - x.s + y.s + s
    if p > 38:  # allowPrecisionLoss: the integral digits stay, the scale gives way
        s = max(38 - (p - s), min(s, 6))
        p = 38
    return Dec(p, s) if s <= 18 else None


# Operand types of the decimal quotients the grammar draws, and those quotients' types.
DIVISIONS = [(Dec(9, 2), Dec(7, 3)), (Dec(7, 3), Dec(9, 2)), (Dec(9, 2), INT), (INT, Dec(7, 3))]
DIVISION_TYPES: list[Type] = [t for x, y in DIVISIONS if (t := div_type(x, y)) is not None]

STRINGS = ["ann", "bob", "Bob", "a b", " pad ", "", "x%y", "ca_t", "zoë", "bobby"]
LIKE_PATTERNS = ["b%", "%o%", "_o_", "%b", "a%", "%", "x%", "__", "%y"]
DATES = ["2024-02-29", "2024-01-31", "2023-12-31", "2024-03-01"]
INTERVAL_UNITS = ["DAY", "MONTH", "YEAR", "WEEK"]
TS_UNITS = ["HOUR", "MINUTE", "SECOND", "DAY", "MONTH"]
# EXTRACT's fields: (Spark's name, DuckDB's expression of x)
EXTRACT_FIELDS: dict[str, str] = {
    "YEAR": "year({})",
    "QUARTER": "quarter({})",
    "MONTH": "month({})",
    "WEEK": "weekofyear({})",
    "DAY": "day({})",
    "DAYOFWEEK": "(dayofweek({}) + 1)",
    "DOW": "(dayofweek({}) + 1)",
    "DOY": "dayofyear({})",
}
DATE_FIELDS: dict[str, str] = {  # Spark's function -> DuckDB's expression
    "year": "year({})",
    "quarter": "quarter({})",
    "month": "month({})",
    "day": "day({})",
    "dayofweek": "(dayofweek({}) + 1)",
    "dayofyear": "dayofyear({})",
    "weekofyear": "weekofyear({})",
}
TIME_FIELDS = {"hour": "hour({})", "minute": "minute({})", "second": "second({})"}
DATE_FORMATS = {
    "yyyy-MM-dd": "%Y-%m-%d",
    "dd/MM/yy": "%d/%m/%y",
    "yyyyMM": "%Y%m",
    "yyyy-MM-dd HH:mm:ss": "%Y-%m-%d %H:%M:%S",
}


@dataclass
class From:
    """A FROM clause in both dialects, its columns, and conditions its WHERE must hold."""

    spark: str
    duck: str
    columns: list[E]
    where: list[E]
