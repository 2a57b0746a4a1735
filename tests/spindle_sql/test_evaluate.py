"""Spindle's scalar functions and their evaluation on Arrow (`sql/functions/`,
`sql/evaluate.py`) agree with Spark itself, the engine whose SQL they implement: every
function and operator runs on seeded random tables (NULLs, zeros, extremes, NaN,
infinities, unicode) both ways, our evaluation and a Spark SQL query over the same table,
and the result types and values must be equal. Where Spark (ANSI mode) raises, we must
raise EvaluationError; where Spark's lazy evaluation spares a row (CASE, AND, COALESCE,
NULL operands), we must not raise either. The type rules are also tested without Spark.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from spindle_sql.evaluate import EvaluationError, evaluate, evaluate_predicate
from spindle_sql.expr import Call, Case, Cast, Column, Expr, Literal
from spindle_sql.functions import FUNCTIONS, FunctionTypeError, cast_type_ok, common_type

N = 240
TS = pa.timestamp("us", tz="UTC")
I8, I16, I32, I64 = pa.int8(), pa.int16(), pa.int32(), pa.int64()
F32, F64, STR, BOOL, DATE = pa.float32(), pa.float64(), pa.string(), pa.bool_(), pa.date32()
D10_2, D38_18, D5_0 = pa.decimal128(10, 2), pa.decimal128(38, 18), pa.decimal128(5, 0)


# --- expressions, written once for both engines -------------------------------------------


@dataclass(frozen=True)
class E:
    """An expression as our IR and as Spark SQL text."""

    expr: Expr
    sql: str

    @property
    def type(self) -> pa.DataType:
        return self.expr.type


def spark_type(t: pa.DataType) -> str:
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    names = {I8: "TINYINT", I16: "SMALLINT", I32: "INT", I64: "BIGINT", F32: "FLOAT"}
    names.update({F64: "DOUBLE", STR: "STRING", BOOL: "BOOLEAN", DATE: "DATE", TS: "TIMESTAMP"})
    return names[t]


def lit(value: Any, t: pa.DataType) -> E:
    if value is None:
        text = "NULL" if t == pa.null() else f"CAST(NULL AS {spark_type(t)})"
    elif t == STR:
        text = "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    elif t == BOOL:
        text = "TRUE" if value else "FALSE"
    elif t == DATE:
        text = f"DATE'{value.isoformat()}'"
    elif t == TS:
        text = f"TIMESTAMP'{value.strftime('%Y-%m-%d %H:%M:%S.%f')}'"
    else:
        text = f"CAST('{value}' AS {spark_type(t)})"
    return E(Literal(value, t), text)


def col(table: pa.Table, name: str) -> E:
    return E(Column(name, table.schema.field(name).type), f"`{name}`")


def call(fn: str, *args: E, sql: str | None = None) -> E:
    f = FUNCTIONS[fn]
    types = [a.type for a in args]
    if f.literal_type is not None:
        values = [a.expr.value if isinstance(a.expr, Literal) else None for a in args]
        t = f.literal_type(types, values)
    else:
        t = f.result_type(types)
    text = sql if sql is not None else f"{fn}({', '.join(a.sql for a in args)})"
    return E(Call(fn, tuple(a.expr for a in args), t), text)


def op(symbol: str, a: E, b: E) -> E:
    spark = {"and": "AND", "or": "OR", "like": "LIKE", "rlike": "RLIKE"}.get(symbol, symbol)
    return call(symbol, a, b, sql=f"({a.sql} {spark} {b.sql})")


def cast(a: E, t: pa.DataType) -> E:
    return E(Cast(a.expr, t), f"CAST({a.sql} AS {spark_type(t)})")


def case(whens: list[tuple[E, E]], otherwise: E | None = None) -> E:
    """As the compiler builds CASE: values cast to their common type."""
    values = [v for _, v in whens] + ([otherwise] if otherwise is not None else [])
    t = common_type([v.type for v in values])

    def to(v: E) -> Expr:
        return v.expr if v.type == t else Cast(v.expr, t)

    text = "CASE " + " ".join(f"WHEN {c.sql} THEN {v.sql}" for c, v in whens)
    text += (f" ELSE {otherwise.sql}" if otherwise is not None else "") + " END"
    out = Case(tuple((c.expr, to(v)) for c, v in whens), to(otherwise) if otherwise else None, t)
    return E(out, text)


@pytest.fixture(scope="module", autouse=True)
def compiled(spark: SparkSession) -> None:
    """Spark evaluates a projection over local rows (as these tables are) while optimizing
    the plan, interpreted; without that rule it runs the generated code it runs on real
    data, which is what Spindle must match."""
    rule = "org.apache.spark.sql.catalyst.optimizer.ConvertToLocalRelation"
    spark.conf.set("spark.sql.optimizer.excludedRules", rule)


# --- comparing with Spark -----------------------------------------------------------------


def spark_result(spark: SparkSession, table: pa.Table, exprs: dict[str, E]) -> pa.Table:
    spark.createDataFrame(table).createOrReplaceTempView("t")
    items = ", ".join(f"{e.sql} AS `{name}`" for name, e in exprs.items())
    return spark.sql(f"SELECT __row, {items} FROM t").toArrow().sort_by("__row")


def comparable(arr: pa.Array) -> list[Any]:
    """Values to compare (dates and timestamps as numbers: any year)."""
    if arr.type in (DATE, TS):
        arr = arr.cast(I32 if arr.type == DATE else I64)
    return list(arr.to_pylist())


def same(a: Any, b: Any, t: pa.DataType) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if pa.types.is_floating(t):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-6 if t == F32 else 1e-13)
    return bool(a == b)


def check(spark: SparkSession, table: pa.Table, exprs: dict[str, E], batch: bool = True) -> None:
    """Each expression's type and values, ours against Spark's (one query for all, or one
    per expression: Spark's common subexpression elimination evaluates an expression
    that occurs in several columns on every row, even where each column would not)."""
    try:
        if batch:
            theirs = spark_result(spark, table, exprs)
        else:
            parts = [spark_result(spark, table, {k: e}) for k, e in exprs.items()]
            theirs = pa.table({k: p.column(k) for k, p in zip(exprs, parts, strict=True)})
    except Exception:
        failing = []
        for name, e in exprs.items():
            try:
                spark_result(spark, table, {name: e})
            except Exception as err:
                failing.append(f"{name}: {e.sql}: {str(err).splitlines()[0][:200]}")
        pytest.fail("Spark raised on:\n" + "\n".join(failing))
    problems = []
    for name, e in exprs.items():
        expected = theirs.column(name).combine_chunks()
        if expected.type != e.type:
            problems.append(f"{name}: type {e.type}, Spark's {expected.type} ({e.sql})")
            continue
        try:
            ours = evaluate(e.expr, table)
        except Exception as err:
            problems.append(f"{name}: raised {err!r} ({e.sql})")
            continue
        assert ours.type == e.type and len(ours) == table.num_rows, name
        for row, (a, b) in enumerate(zip(comparable(ours), comparable(expected), strict=True)):
            if not same(a, b, e.type):
                inputs = {c: table.column(c)[row].as_py() for c in table.column_names}
                problems.append(f"{name} row {row}: ours {a!r}, Spark {b!r} ({e.sql}) {inputs}")
                break
    assert not problems, "\n".join(problems)


def check_raises(spark: SparkSession, table: pa.Table, cases: dict[str, E]) -> None:
    """Spark raises on each expression, and so do we (EvaluationError)."""
    problems = []
    for name, e in cases.items():
        try:
            spark_result(spark, table, {name: e})
            problems.append(f"{name}: Spark did not raise ({e.sql})")
            continue
        except Exception:  # Py4J, analysis and arithmetic errors
            pass
        try:
            evaluate(e.expr, table)
            problems.append(f"{name}: we did not raise ({e.sql})")
        except EvaluationError:
            pass
    assert not problems, "\n".join(problems)


# --- random tables ------------------------------------------------------------------------


def with_nulls(rng: np.random.Generator, values: list[Any], share: float = 0.1) -> list[Any]:
    return [None if rng.random() < share else v for v in values]


def pick(rng: np.random.Generator, choices: list[Any], n: int = N) -> list[Any]:
    return [choices[i] for i in rng.integers(0, len(choices), n)]


def ints(
    rng: np.random.Generator, lo: int, hi: int, edges: list[int], zero: bool = True
) -> list[int]:
    out = [int(v) for v in rng.integers(lo, hi + 1, N)]
    out[: len(edges)] = edges
    return [v if zero or v != 0 else 1 for v in out]


def numbers() -> pa.Table:
    rng = np.random.default_rng(7)
    specials = [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1e-300, -1e300, 2.5, -2.5]
    specials += [0.125, 1.005, 0.285, -1.005, 1e15 + 0.5, 123456.789, 2.0**53, 9.5, -0.5]
    doubles = specials + [float(x) for x in rng.normal(0, 1000, N - len(specials))]
    doubles[len(specials) :: 7] = [float(round(x, 3)) for x in doubles[len(specials) :: 7]]
    small = [float(x) for x in rng.uniform(-1e5, 1e5, N)]
    with np.errstate(over="ignore"):
        floats = [float(np.float32(x)) for x in doubles]
    dec = [Decimal(int(v)).scaleb(-2) for v in rng.integers(-(10**9), 10**9, N)]
    dec[:6] = [
        Decimal("0.00"),
        Decimal("0.05"),
        Decimal("-0.05"),
        Decimal("99999999.99"),
        Decimal("-1.25"),
        Decimal("2.50"),
    ]
    dec38 = [Decimal(int(v)).scaleb(-18) for v in rng.integers(-(10**18), 10**18, N)]
    dec38 = [d * int(m) for d, m in zip(dec38, rng.integers(1, 10**6, N), strict=True)]
    columns = {
        "__row": pa.array(range(N), I32),
        "i8": pa.array(with_nulls(rng, ints(rng, -60, 60, [0, 60, -60, 1, -1])), I8),
        "i16": pa.array(with_nulls(rng, ints(rng, -150, 150, [0, 150, -150])), I16),
        "i32": pa.array(with_nulls(rng, ints(rng, -40000, 40000, [0, 1, -1, 7, -7])), I32),
        "i64": pa.array(with_nulls(rng, ints(rng, -(10**9), 10**9, [0, 10**9, -(10**9)])), I64),
        "i8nz": pa.array(with_nulls(rng, ints(rng, -10, 10, [-1, 1, -10], zero=False)), I8),
        "i32nz": pa.array(with_nulls(rng, ints(rng, -50, 50, [-1, 1, 3, -3], zero=False)), I32),
        "f64": pa.array(with_nulls(rng, doubles), F64),
        "f64b": pa.array(with_nulls(rng, list(reversed(doubles))), F64),
        "f64nz": pa.array(with_nulls(rng, [x if x != 0 else 3.0 for x in doubles]), F64),
        "small": pa.array(with_nulls(rng, small), F64),
        "f32": pa.array(with_nulls(rng, floats), F32),
        "f32nz": pa.array(with_nulls(rng, [x if x != 0 else 2.0 for x in floats]), F32),
        "d1": pa.array(with_nulls(rng, dec), D10_2),
        "d1nz": pa.array(with_nulls(rng, [d if d != 0 else Decimal("0.01") for d in dec]), D10_2),
        "d2": pa.array(with_nulls(rng, dec38), D38_18),
        "d3": pa.array(
            with_nulls(rng, [Decimal(int(v)) for v in rng.integers(-99999, 99999, N)]), D5_0
        ),
        "b1": pa.array(with_nulls(rng, [bool(v) for v in rng.integers(0, 2, N)], 0.3), BOOL),
        "b2": pa.array(with_nulls(rng, [bool(v) for v in rng.integers(0, 2, N)], 0.3), BOOL),
    }
    return pa.table(columns)


NUM = numbers()


def c(name: str) -> E:
    return col(NUM, name)


# --- arithmetic ---------------------------------------------------------------------------


def test_arithmetic_matches_spark(spark: SparkSession) -> None:
    names = ["i8", "i16", "i32", "i64", "f32", "f64", "d1", "d2", "d3"]
    exprs: dict[str, E] = {}
    for a in names:
        for b in names:
            exprs[f"{a}+{b}"] = op("+", c(a), c(b))
            exprs[f"{a}-{b}"] = op("-", c(a), c(b))
            if (a, b) != ("i8", "i8"):  # 60 * 60 overflows a tinyint
                exprs[f"{a}*{b}"] = op("*", c(a), c(b))
        for b in ["i8nz", "i32nz", "f64nz", "f32nz", "d1nz"]:
            exprs[f"{a}/{b}"] = op("/", c(a), c(b))
            exprs[f"{a}%{b}"] = op("%", c(a), c(b))
            if not (b == "d1nz" and a in ("i8", "i16", "d3")):  # pmod overflows their type
                exprs[f"pmod({a},{b})"] = call("pmod", c(a), c(b))
    exprs["d2/d2"] = op("/", c("d2"), c("d2"))
    exprs["d2%d2"] = op("%", c("d2"), c("d2"))
    exprs["mod"] = call("mod", c("i64"), c("i32nz"))
    exprs["null+i32"] = op("+", lit(None, pa.null()), c("i32"))
    exprs["i32*literal"] = op("*", c("i32"), lit(3, I32))
    exprs["literal/literal"] = op("/", lit(1, I32), lit(2, I32))
    check(spark, NUM, exprs)


def test_math_functions_match_spark(spark: SparkSession) -> None:
    exprs: dict[str, E] = {}
    for a in ["i8", "i16", "i32", "i64", "f32", "f64", "d1", "d2", "d3"]:
        for fn in ["abs", "floor", "ceil", "ceiling", "sqrt", "exp", "ln"]:
            exprs[f"{fn}({a})"] = call(fn, c(a))
        exprs[f"neg({a})"] = call("neg", c(a), sql=f"(- `{a}`)")
        exprs[f"round({a})"] = call("round", c(a))
        exprs[f"power({a},2)"] = call("power", c(a), lit(2, I32))
        exprs[f"pow(f64,{a})"] = call("pow", c("f64"), c(a))
    for a in ["f64", "f32", "small", "d1", "d2", "d3", "i64", "i32", "i16"]:
        for d in [-3, -1, 0, 1, 2, 3, 5]:
            if d < 0 or a not in ("i64", "i32", "i16"):
                exprs[f"round({a},{d})"] = call("round", c(a), lit(d, I32))
    exprs["round(small,-12)"] = call("round", c("small"), lit(-12, I32))
    exprs["round(f64,45)"] = call("round", c("f64"), lit(45, I32))
    exprs["round(f64,null)"] = call("round", c("f64"), lit(None, I32))
    check(spark, NUM, exprs)


# --- comparisons, logic, conditionals -----------------------------------------------------


def test_comparisons_and_logic_match_spark(spark: SparkSession) -> None:
    pairs = [("i32", "i64"), ("i8", "f64"), ("f64", "f64b"), ("f32", "f64"), ("d1", "d2")]
    pairs += [("d1", "i32"), ("d3", "f32"), ("b1", "b2"), ("i16", "d1")]
    exprs: dict[str, E] = {}
    for a, b in pairs:
        for symbol in ["=", "<>", "<", "<=", ">", ">=", "<=>"]:
            exprs[f"{a}{symbol}{b}"] = op(symbol, c(a), c(b))
    for symbol in ["and", "or"]:
        exprs[symbol] = op(symbol, c("b1"), c("b2"))
        exprs[f"{symbol} null"] = op(symbol, c("b1"), lit(None, pa.null()))
    exprs["not"] = call("not", c("b1"), sql="(NOT `b1`)")
    for a in ["i32", "f64", "d1", "b1"]:
        exprs[f"{a} is null"] = call("is_null", c(a), sql=f"(`{a}` IS NULL)")
        exprs[f"{a} is not null"] = call("is_not_null", c(a), sql=f"(`{a}` IS NOT NULL)")

    def in_(value: E, *items: E) -> E:
        return call(
            "in", value, *items, sql=f"({value.sql} IN ({', '.join(i.sql for i in items)}))"
        )

    exprs["in ints"] = in_(c("i32"), lit(0, I32), lit(7, I32), lit(-7, I32))
    exprs["in with null"] = in_(c("i32"), lit(0, I32), lit(None, I32))
    exprs["in doubles"] = in_(c("f64"), lit(0.0, F64), lit(float("nan"), F64), lit(2.5, F64))
    exprs["in decimals"] = in_(c("d1"), lit(Decimal("0.05"), D10_2), lit(Decimal("-1.25"), D10_2))
    exprs["in widened"] = in_(c("i8"), lit(1, I64), lit(Decimal("60.0"), pa.decimal128(3, 1)))
    exprs["in columns"] = in_(c("i32"), c("i64"), c("i16"), lit(None, I32))
    exprs["in bools"] = in_(c("b1"), c("b2"))
    check(spark, NUM, exprs)


def test_conditionals_match_spark(spark: SparkSession) -> None:
    exprs = {
        "coalesce(i32,i64)": call("coalesce", c("i32"), c("i64")),
        "coalesce(d1,i32,d3)": call("coalesce", c("d1"), c("i32"), c("d3")),
        "coalesce(f64,d1)": call("coalesce", c("f64"), c("d1")),
        "coalesce(f32,i64)": call("coalesce", c("f32"), c("i64")),
        "coalesce(d2,d1)": call("coalesce", c("d2"), c("d1")),
        "coalesce(null,b1)": call("coalesce", lit(None, pa.null()), c("b1")),
        "ifnull": call("ifnull", c("i8"), c("i16")),
        "nvl": call("nvl", c("d1"), lit(Decimal("1.5"), pa.decimal128(2, 1))),
        "nullif(i32,i16)": call("nullif", c("i32"), c("i16")),
        "nullif(f64,f64b)": call("nullif", c("f64"), c("f64b")),
        "nullif(d1,i32)": call("nullif", c("d1"), lit(0, I32)),
        "if(b1,i32,i64)": call("if", c("b1"), c("i32"), c("i64")),
        "if(b1,d1,f64)": call("if", c("b1"), c("d1"), c("f64")),
        "greatest(i32,i64,d1)": call("greatest", c("i32"), c("i64"), c("d1")),
        "greatest(f64,f64b)": call("greatest", c("f64"), c("f64b")),
        "least(f64,f64b)": call("least", c("f64"), c("f64b")),
        "least(f32,i8)": call("least", c("f32"), c("i8")),
        "greatest(b1,b2)": call("greatest", c("b1"), c("b2")),
        "least(d1,d2,d3)": call("least", c("d1"), c("d2"), c("d3")),
        "case": case([(op(">", c("i32"), lit(0, I32)), c("i32")), (c("b1"), c("d1"))], c("f64")),
        "case without else": case([(c("b1"), c("i8")), (c("b2"), c("i64"))]),
        "case of nulls": case([(c("b1"), lit(None, pa.null()))], lit(None, pa.null())),
    }
    check(spark, NUM, exprs)


def test_numeric_casts_match_spark(spark: SparkSession) -> None:
    casts = {
        "i8": [I16, I32, I64, F32, F64, D5_0, D10_2, STR, BOOL],
        "i32": [I64, F32, F64, pa.decimal128(12, 1), STR, BOOL, TS],
        "i64": [F32, F64, pa.decimal128(20, 0), STR, BOOL, TS],
        "small": [I32, I64, F32, pa.decimal128(12, 3), pa.decimal128(8, 0), BOOL],
        "f64": [F32, BOOL],
        "f32": [F64, BOOL],
        "d1": [I32, I64, F32, F64, pa.decimal128(12, 1), pa.decimal128(9, 0), STR, BOOL],
        "d2": [I64, F64, pa.decimal128(20, 4), pa.decimal128(38, 2), STR, BOOL],
        "d3": [I32, I64, F64, pa.decimal128(7, 2), STR],
        "b1": [I8, I32, F64, pa.decimal128(3, 1), STR],
    }
    exprs = {f"{a}->{spark_type(t)}": cast(c(a), t) for a, ts in casts.items() for t in ts}
    check(spark, NUM, exprs)


# --- strings ------------------------------------------------------------------------------


def strings() -> pa.Table:
    rng = np.random.default_rng(11)
    alphabet = [*"aabB c%_\\", "ß", "é", "İ", "Σ", "ς", "日", "😀", "\n", "\t", "ﬁ", "Ǆ"]
    alphabet += ["\r", "\u2028", "\x0b", "\u0085", "1"]
    words = ["", " ", "abc", "ABC", "  padded  ", "ΟΔΟΣ", "straße", "a_b", "a%b", "a\\b"]

    def word() -> str:
        if rng.random() < 0.3:
            return str(pick(rng, words, 1)[0])
        return "".join(pick(rng, alphabet, int(rng.integers(0, 8))))

    columns = {
        "__row": pa.array(range(N), I32),
        "s1": pa.array(with_nulls(rng, [word() for _ in range(N)]), STR),
        "s2": pa.array(with_nulls(rng, [word() for _ in range(N)]), STR),
        "p": pa.array(with_nulls(rng, [int(v) for v in rng.integers(-6, 7, N)]), I32),
        "l": pa.array(with_nulls(rng, [int(v) for v in rng.integers(-2, 7, N)]), I32),
        "i32": pa.array(with_nulls(rng, [int(v) for v in rng.integers(-1000, 1000, N)]), I32),
        "d1": pa.array(
            with_nulls(rng, [Decimal(int(v)).scaleb(-2) for v in rng.integers(-9999, 9999, N)]),
            D10_2,
        ),
        "pat": pa.array(
            with_nulls(rng, pick(rng, ["a%", "%b", "_", "%", "", "a\\_b", "ß%", "%\\%%"])), STR
        ),
        "re": pa.array(
            with_nulls(rng, pick(rng, ["a.b", "^[a-z]*$", "ß|é", "\\d", "b$", "^$", "[^a]"])), STR
        ),
        "s_int": pa.array(
            with_nulls(rng, pick(rng, ["0", "+12", " -7 ", "0007", "\t42\n", "-128", "127"])), STR
        ),
        "s_dbl": pa.array(
            with_nulls(
                rng,
                pick(
                    rng,
                    [
                        "1.5",
                        "1e3",
                        " -2.5d ",
                        "NaN",
                        "inf",
                        "-Infinity",
                        ".5",
                        "1.",
                        "+1.5F",
                        "1E-7",
                        "3.4028236e38",
                        " INF",
                    ],
                ),
            ),
            STR,
        ),
        "s_dec": pa.array(
            with_nulls(
                rng,
                pick(
                    rng, [" 1.555 ", "-0.005", "1e2", "123.4", ".5", "-1.5E-1", "0", "99999999.994"]
                ),
            ),
            STR,
        ),
        "s_bool": pa.array(
            with_nulls(rng, pick(rng, ["t", "FALSE", " yes ", "0", "N", "True"])), STR
        ),
        "s_date": pa.array(
            with_nulls(
                rng,
                pick(
                    rng,
                    [
                        "2020-1-5",
                        " 2020-02-29 ",
                        "2020",
                        "2021-03",
                        "2020-01-05T10:00",
                        "+2020-01-01",
                        "1999-12-31 garbage",
                        "-0044-03-15",
                    ],
                ),
            ),
            STR,
        ),
        "s_ts": pa.array(
            with_nulls(
                rng,
                pick(
                    rng,
                    [
                        "2020-01-05 12:34:56.123456789",
                        "2020-01-05T12:34",
                        "2020-01-05 12:34:56Z",
                        "2020-01-05 12:34:56+02:00",
                        "2020-01-05 12:34:56 -05:30",
                        "2020-01-05",
                        "2020-01-05 1:2:3",
                        "2020-01-05 12",
                        "2020-01-05 12:34:56.1+0200",
                        "1969-12-31 23:59:59.999999UTC",
                        "2020-06-01 00:00:00 GMT+1",
                        "2020-06-01 00:00:00+5:30",
                        " 2020-03 ",
                    ],
                ),
            ),
            STR,
        ),
    }
    return pa.table(columns)


STRS = strings()


def s(name: str) -> E:
    return col(STRS, name)


def test_string_functions_match_spark(spark: SparkSession) -> None:
    exprs: dict[str, E] = {}
    for fn in [
        "upper",
        "lower",
        "ucase",
        "lcase",
        "length",
        "char_length",
        "trim",
        "ltrim",
        "rtrim",
    ]:
        exprs[fn] = call(fn, s("s1"))
    for args in [(1, 2), (0, 3), (-2, 1), (-10, 8), (3,), (-3,), (2, -1), (5, 100), (-1, 1)]:
        exprs[f"substring{args}"] = call("substring", s("s1"), *(lit(a, I32) for a in args))
    exprs["substr(s1,p,l)"] = call("substr", s("s1"), s("p"), s("l"))
    exprs["substring(s1,p)"] = call("substring", s("s1"), s("p"))
    exprs["replace"] = call("replace", s("s1"), lit("a", STR), lit("XY", STR))
    exprs["replace removing"] = call("replace", s("s1"), lit("ß", STR))
    exprs["replace empty"] = call("replace", s("s1"), lit("", STR), lit("x", STR))
    exprs["replace columns"] = call("replace", s("s1"), s("s2"), lit("z", STR))
    exprs["concat"] = call("concat", s("s1"), s("s2"))
    exprs["concat3"] = call("concat", s("s1"), lit("-", STR), s("s2"))
    exprs["concat numbers"] = call("concat", s("s1"), s("i32"), s("d1"))
    exprs["concat_ws"] = call("concat_ws", lit(", ", STR), s("s1"), s("s2"), s("s1"))
    exprs["concat_ws column sep"] = call("concat_ws", s("s2"), s("s1"), s("i32"))
    for pattern in ["a%", "%ß%", "_", "%\\%%", "a\\_b", "", "%", "__", "%b_"]:
        exprs[f"like {pattern}"] = op("like", s("s1"), lit(pattern, STR))
    exprs["like column"] = op("like", s("s1"), s("pat"))
    for pattern in [
        "a.b",
        "^[a-z]+$",
        "ß|é",
        "\\d",
        "b$",
        "^$",
        "(a|b){2}",
        "[^a]",
        "\\s",
        ".",
        "c\\.",
        "\\p{Lu}",
        "[\\s%]",
        "\\Qa.\\E",
    ]:
        exprs[f"rlike {pattern}"] = op("rlike", s("s1"), lit(pattern, STR))
    exprs["rlike column"] = op("rlike", s("s1"), s("re"))
    for pattern, group in [("(a)(b)?", 1), ("(a)(b)?", 2), ("(a)(b)?", 0), ("([^a-c]+)", 1)]:
        exprs[f"regexp_extract {pattern} {group}"] = call(
            "regexp_extract", s("s1"), lit(pattern, STR), lit(group, I32)
        )
    exprs["regexp_extract default group"] = call("regexp_extract", s("s1"), lit("(\\w)", STR))
    exprs["regexp_extract column"] = call("regexp_extract", s("s1"), s("re"), lit(0, I32))
    for delim, part in [("b", 1), ("b", -1), ("b", 2), ("b", 3), ("b", -3), ("", 1), ("", 2)]:
        exprs[f"split_part {delim!r} {part}"] = call(
            "split_part", s("s1"), lit(delim, STR), lit(part, I32)
        )
    exprs["split_part column"] = call("split_part", s("s1"), s("s2"), lit(1, I32))
    for fn in ["startswith", "endswith", "contains"]:
        exprs[f"{fn} literal"] = call(fn, s("s1"), lit("a", STR))
        exprs[f"{fn} empty"] = call(fn, s("s1"), lit("", STR))
        exprs[f"{fn} column"] = call(fn, s("s1"), s("s2"))
    for symbol in ["=", "<>", "<", "<=", ">", ">=", "<=>"]:
        exprs[f"s1{symbol}s2"] = op(symbol, s("s1"), s("s2"))
    exprs["coalesce"] = call("coalesce", s("s1"), s("s2"), lit("none", STR))
    exprs["greatest"] = call("greatest", s("s1"), s("s2"))
    exprs["least"] = call("least", s("s1"), s("s2"))
    exprs["in"] = call("in", s("s1"), lit("abc", STR), lit("ß", STR), sql="(`s1` IN ('abc', 'ß'))")
    check(spark, STRS, exprs)


def test_string_casts_match_spark(spark: SparkSession) -> None:
    casts = {
        "s_int": [I8, I16, I32, I64, F64, pa.decimal128(5, 1)],
        "s_dbl": [F64, F32],
        "s_dec": [pa.decimal128(10, 2), pa.decimal128(12, 0), F64],
        "s_bool": [BOOL],
        "s_date": [DATE],
        "s_ts": [TS, DATE],
        "i32": [STR],
        "d1": [STR],
    }
    exprs = {f"{a}->{spark_type(t)}": cast(s(a), t) for a, ts in casts.items() for t in ts}
    exprs["to_date"] = call("to_date", s("s_date"))
    check(spark, STRS, exprs)


# --- dates and timestamps -----------------------------------------------------------------


def datetimes() -> pa.Table:
    rng = np.random.default_rng(3)
    days = [int(v) for v in rng.integers(-200_000, 200_000, N)]
    # 1970-01-01, 1969-12-31, 0001-01-01, 9999-12-31, 0000-01-01, -0001-01-01, 12344-01-03
    days[:7] = [0, -1, -719162, 2932896, -719528, -719893, 3789027]
    micros = [int(v) for v in rng.integers(-3 * 10**15, 3 * 10**15, N)]
    micros[:5] = [0, -1, -500_000, 3789027 * 86_400_000_000 + 1, -719893 * 86_400_000_000]
    micros[3::5] = [m - m % 1_000_000 for m in micros[3::5]]  # whole seconds
    columns = {
        "__row": pa.array(range(N), I32),
        "dt": pa.array(with_nulls(rng, days), I32).cast(DATE),
        "dt2": pa.array(with_nulls(rng, list(reversed(days))), I32).cast(DATE),
        "ts": pa.array(with_nulls(rng, micros), I64).cast(TS),
        "ts2": pa.array(with_nulls(rng, list(reversed(micros))), I64).cast(TS),
        "k8": pa.array(with_nulls(rng, [int(v) for v in rng.integers(-128, 128, N)]), I8),
        "k32": pa.array(with_nulls(rng, [int(v) for v in rng.integers(-(10**6), 10**6, N)]), I32),
        "unit": pa.array(
            with_nulls(rng, pick(rng, ["year", "MM", "week", "day", "HOUR", "bogus"])), STR
        ),
    }
    return pa.table(columns)


DTS = datetimes()


def d(name: str) -> E:
    return col(DTS, name)


def test_datetime_functions_match_spark(spark: SparkSession) -> None:
    exprs: dict[str, E] = {}
    for fn in ["year", "month", "day", "dayofmonth", "dayofweek", "hour", "minute", "second"]:
        exprs[f"{fn}(dt)"] = call(fn, d("dt"))
        exprs[f"{fn}(ts)"] = call(fn, d("ts"))
    exprs["to_date(ts)"] = call("to_date", d("ts"))
    exprs["to_date(dt)"] = call("to_date", d("dt"))
    for unit in ["YEAR", "yyyy", "yy", "QUARTER", "month", "mon", "mm", "week", "DAY", "dd"]:
        exprs[f"date_trunc {unit}"] = call("date_trunc", lit(unit, STR), d("ts"))
    for unit in ["hour", "minute", "second", "millisecond", "microsecond", "bogus"]:
        exprs[f"date_trunc {unit}"] = call("date_trunc", lit(unit, STR), d("ts"))
    exprs["date_trunc of a date"] = call("date_trunc", lit("month", STR), d("dt"))
    exprs["date_trunc column unit"] = call("date_trunc", d("unit"), d("ts"))
    exprs["date_add"] = call("date_add", d("dt"), d("k32"))
    exprs["date_add tinyint"] = call("date_add", d("dt"), d("k8"))
    exprs["date_sub"] = call("date_sub", d("dt"), d("k32"))
    exprs["date_add of a timestamp"] = call("date_add", d("ts"), lit(1, I32))
    for fn in ["quarter", "dayofyear", "weekofyear"]:
        exprs[f"{fn}(dt)"] = call(fn, d("dt"))
        exprs[f"{fn}(ts)"] = call(fn, d("ts"))
    exprs["add_months"] = call("add_months", d("dt"), d("k32"))
    exprs["add_months tinyint"] = call("add_months", d("dt"), d("k8"))
    exprs["add_months of a timestamp"] = call("add_months", d("ts"), lit(-13, I32))
    # What the compiler makes of `x ± INTERVAL ...` (test_intervals_compile_as_spark_types).
    exprs["dt - 90 days"] = call("date_add", d("dt"), lit(-90, I32), sql="dt - INTERVAL '90' DAY")
    exprs["dt + 14 months"] = call(
        "add_months", d("dt"), lit(14, I32), sql="dt + INTERVAL '14' MONTH"
    )
    for sql, months, micros in [
        ("ts + INTERVAL '1' MONTH", 1, 0),
        ("ts - INTERVAL '3' YEAR", -36, 0),
        ("ts - INTERVAL '90' DAY", 0, -90 * 86_400_000_000),
        ("ts + INTERVAL '1.5' SECOND", 0, 1_500_000),
        ("dt + INTERVAL '36' HOUR", 0, 36 * 3_600_000_000),
    ]:
        base = d("ts") if sql.startswith("ts") else d("dt")
        exprs[sql] = call("timestamp_plus", base, lit(months, I32), lit(micros, I64), sql=sql)
    exprs["datediff"] = call("datediff", d("dt"), d("dt2"))
    exprs["datediff timestamps"] = call("datediff", d("ts"), d("dt"))
    exprs["unix_timestamp(ts)"] = call("unix_timestamp", d("ts"))
    exprs["unix_timestamp(dt)"] = call("unix_timestamp", d("dt"))
    for pattern in ["yyyy-MM-dd", "HH:mm", "yy/MM/dd HH:mm:ss", "yyyy-MM-dd'T'HH 'o''clock'"]:
        exprs[f"date_format(ts, {pattern})"] = call("date_format", d("ts"), lit(pattern, STR))
    exprs["date_format(dt)"] = call("date_format", d("dt"), lit("dd.MM.yyyy", STR))
    for symbol in ["=", "<", ">=", "<=>"]:
        exprs[f"dt{symbol}ts"] = op(symbol, d("dt"), d("ts"))
        exprs[f"ts{symbol}ts2"] = op(symbol, d("ts"), d("ts2"))
    exprs["coalesce(dt,ts)"] = call("coalesce", d("dt"), d("ts"))
    exprs["greatest(dt,dt2)"] = call("greatest", d("dt"), d("dt2"))
    exprs["least(ts,dt)"] = call("least", d("ts"), d("dt"))
    for a, t in [("dt", STR), ("ts", STR), ("ts", DATE), ("dt", TS), ("ts", I64), ("ts", F64)]:
        exprs[f"{a}->{spark_type(t)}"] = cast(d(a), t)
    exprs["k32->timestamp"] = cast(d("k32"), TS)
    check(spark, DTS, exprs)


def test_wide_decimals_match_spark(spark: SparkSession) -> None:
    """Operands of many digits: Spark's loss of scale past 38 digits, and operations
    beyond what Arrow's 76-digit decimals hold exactly (the row-by-row path)."""
    rng = np.random.default_rng(5)

    def digits(n: int, scale: int) -> list[Decimal]:
        """Random decimals of about n digits."""
        high = rng.integers(-(10**9), 10**9, N)
        low = rng.integers(0, 10 ** min(n - 9, 18), N)
        return [
            (Decimal(int(h)) * 10 ** min(n - 9, 18) + int(lo)).scaleb(-scale)
            for h, lo in zip(high, low, strict=True)
        ]

    table = pa.table(
        {
            "__row": pa.array(range(N), I32),
            "w0": pa.array(with_nulls(rng, digits(25, 0)), pa.decimal128(38, 0)),
            "w10": pa.array(with_nulls(rng, digits(24, 10)), pa.decimal128(38, 10)),
            "w18": pa.array(with_nulls(rng, [abs(d) + 1 for d in digits(22, 18)]), D38_18),
            "w37": pa.array(
                with_nulls(rng, [d + 1 for d in digits(27, 27)]), pa.decimal128(38, 37)
            ),
            "n": pa.array(with_nulls(rng, [int(v) for v in rng.integers(1, 1000, N)]), I64),
        }
    )

    def w(name: str) -> E:
        return col(table, name)

    exprs = {
        "w10*w10": op("*", w("w10"), w("w10")),
        "w37*w37": op("*", w("w37"), w("w37")),
        "w37/w37": op("/", w("w37"), w("w37")),
        "w0/w18": op("/", w("w0"), w("w18")),
        "w18/w0": op("/", w("w18"), w("w0")),
        "w10/w18": op("/", w("w10"), w("w18")),
        "w0/n": op("/", w("w0"), w("n")),
        "w0+w10": op("+", w("w0"), w("w10")),
        "w10-w37": op("-", w("w10"), w("w37")),
        "w0%n": op("%", w("w0"), w("n")),
        "pmod(w10,w18)": call("pmod", w("w10"), w("w18")),
        "w0<w10": op("<", w("w0"), w("w10")),
        "w37=w18": op("=", w("w37"), w("w18")),
        "coalesce(w10,w0)": call("coalesce", w("w10"), w("w0")),
        "w10->double": cast(w("w10"), F64),
        "w0->float": cast(w("w0"), F32),
        "w10->bigint": cast(w("w10"), I64),
        "w37->int": cast(w("w37"), I32),
        "w10->decimal(20,2)": cast(w("w10"), pa.decimal128(20, 2)),
        "round(w10,3)": call("round", w("w10"), lit(3, I32)),
        "round(w0,-20)": call("round", w("w0"), lit(-20, I32)),
        "floor(w37)": call("floor", w("w37")),
    }
    check(spark, table, exprs)


def test_literals_match_spark(spark: SparkSession) -> None:
    """Expressions of literals only (evaluated once, then repeated per row)."""
    when = dt.datetime(2020, 5, 17, 13, 45, 12, 345678)
    exprs = {
        "sum": op("+", lit(1, I32), lit(2, I64)),
        "division": op("/", lit(Decimal("1.00"), pa.decimal128(3, 2)), lit(3, I32)),
        "remainder": op("%", lit(-7, I32), lit(3, I32)),
        "round": call("round", lit(2.5, F64)),
        "upper": call("upper", lit("straße", STR)),
        "substring": call("substring", lit("hello", STR), lit(-3, I32), lit(2, I32)),
        "concat_ws": call("concat_ws", lit(",", STR), lit("a", STR), lit(None, STR), lit("b", STR)),
        "concat": call("concat", lit("a", STR), lit(1, I32)),
        "like": op("like", lit("abc", STR), lit("a%", STR)),
        "rlike": op("rlike", lit("abc", STR), lit("^a.c$", STR)),
        "replace": call("replace", lit("abcabc", STR), lit("b", STR), lit("", STR)),
        "length": call("length", lit("😀é", STR)),
        "coalesce": call("coalesce", lit(None, pa.null()), lit(1, I32)),
        "greatest": call("greatest", lit(1, I32), lit(2.5, F64)),
        "in": call("in", lit(2, I32), lit(1, I32), lit(2, I32), sql="(2 IN (1, 2))"),
        "year": call("year", lit(dt.date(2020, 2, 29), DATE)),
        "hour": call("hour", lit(when, TS)),
        "date_trunc": call("date_trunc", lit("MONTH", STR), lit(when, TS)),
        "date_add": call("date_add", lit(dt.date(2020, 2, 29), DATE), lit(366, I32)),
        "datediff": call("datediff", lit(dt.date(2020, 3, 1), DATE), lit(when, TS)),
        "to_date": call("to_date", lit(" 2020-7-4 ", STR)),
        "cast": cast(lit("12", STR), I32),
        "cast decimal": cast(lit(1.005, F64), pa.decimal128(4, 2)),
        "case": case([(lit(None, BOOL), lit(1, I32)), (lit(True, BOOL), lit(2, I32))]),
        "null arithmetic": op("*", lit(None, pa.null()), lit(None, pa.null())),
        "null comparison": op("=", lit(None, pa.null()), lit(1, I32)),
    }
    check(spark, NUM, exprs)


# --- errors, and the errors Spark's evaluation order avoids -------------------------------


def small_table() -> pa.Table:
    return pa.table(
        {
            "__row": pa.array(range(4), I32),
            "x": pa.array([1, 2, None, 4], I32),
            "zero": pa.array([0, 0, 0, 0], I32),
            "big": pa.array([2**63 - 1, 1, None, 5], I64),
            "tiny": pa.array([127, 1, None, -128], I8),
            "i32max": pa.array([2**31 - 1, 0, None, 3], I32),
            "min": pa.array([-(2**63), 0, None, 1], I64),
            "f": pa.array([1.5, 0.0, None, float("nan")], F64),
            "dec": pa.array(
                [Decimal("1.50"), Decimal("0.00"), None, Decimal("99999999.99")], D10_2
            ),
            "wide": pa.array(
                [Decimal(9 * 10**37), 1, None, Decimal(-9 * 10**37)], pa.decimal128(38, 0)
            ),
            "s": pa.array(["12", "abc", None, "1.5"], STR),
            "sd": pa.array(["2020-01-05", "2020-02-30", None, "x"], STR),
            "null": pa.array([None, None, None, None], I32),
            "b": pa.array([True, False, None, False], BOOL),
        }
    )


SMALL = small_table()


def t(name: str) -> E:
    return col(SMALL, name)


def test_errors_are_raised_where_spark_raises(spark: SparkSession) -> None:
    cases = {
        "long overflow": op("+", t("big"), lit(1, I64)),
        "int overflow": op("*", t("i32max"), lit(2, I32)),
        "tinyint overflow": op("+", t("tiny"), t("tiny")),
        "negate min": call("neg", t("min"), sql="(- `min`)"),
        "abs min": call("abs", t("min")),
        "int division by zero": op("/", t("x"), t("zero")),
        "double division by zero": op("/", t("f"), cast(t("zero"), F64)),
        "decimal division by zero": op("/", t("dec"), cast(t("zero"), D10_2)),
        "remainder by zero": op("%", t("x"), t("zero")),
        "pmod by zero": call("pmod", t("x"), t("zero")),
        "decimal overflow": op("*", t("wide"), lit(100, I32)),
        "decimal add overflow": op("+", t("wide"), t("wide")),
        "round overflow": call("round", t("tiny"), lit(-1, I32)),
        "cast to int invalid": cast(t("s"), I32),
        "cast to tinyint overflow": cast(t("big"), I8),
        "cast double NaN to int": cast(t("f"), I32),
        "cast to decimal overflow": cast(t("dec"), pa.decimal128(4, 2)),
        "cast to date invalid": cast(t("sd"), DATE),
        "cast to timestamp invalid": cast(t("sd"), TS),
        "cast to boolean invalid": cast(t("s"), BOOL),
        "to_date invalid": call("to_date", t("sd")),
        "like bad escape": op("like", t("s"), lit("a\\b", STR)),
        "regexp_extract no such group": call(
            "regexp_extract", t("s"), lit("(a)", STR), lit(2, I32)
        ),
        "split_part part 0": call("split_part", t("s"), lit(",", STR), lit(0, I32)),
        "case taken": case([(t("b"), op("/", t("x"), t("zero")))]),
    }
    check_raises(spark, SMALL, cases)


def test_no_error_where_spark_does_not_evaluate(spark: SparkSession) -> None:
    div = op("/", t("x"), t("zero"))
    exprs = {
        "case guard": case([(op("<>", t("zero"), lit(0, I32)), div)], lit(0.0, F64)),
        "case later branch": case([(lit(True, BOOL), t("f")), (t("b"), div)]),
        "and guard": op("and", op("<>", t("zero"), lit(0, I32)), op(">", div, lit(1.0, F64))),
        "or guard": op("or", op("=", t("zero"), lit(0, I32)), op(">", div, lit(1.0, F64))),
        "null left operand": op("+", t("null"), op("*", t("i32max"), lit(2, I32))),
        "null divisor": op("/", op("*", t("i32max"), lit(2, I32)), t("null")),
        "null dividend": op("/", t("null"), t("zero")),
        "coalesce": call("coalesce", t("x"), op("*", t("i32max"), lit(2, I32))),
        "if": call("if", op("<>", t("zero"), lit(0, I32)), div, lit(1.0, F64)),
        "in": call("in", t("zero"), lit(0, I32), div, sql="(`zero` IN (0, (`x` / `zero`)))"),
        "substring": call("substring", t("s"), t("null"), op("*", t("i32max"), lit(2, I32))),
        "nested": op(
            "*",
            lit(2, I32),
            case([(op(">", t("x"), lit(100, I32)), op("*", t("i32max"), t("x")))], lit(0, I32)),
        ),
    }
    check(spark, SMALL, exprs, batch=False)


# --- type rules, without Spark ------------------------------------------------------------


@pytest.mark.parametrize(
    ("fn", "types", "message"),
    [
        ("upper", [I64], "upper expects a string, got bigint"),
        ("+", [STR, I32], "+ expects numbers, got string, int"),
        ("=", [STR, I32], "= expects two values of comparable types, got string, int"),
        ("<", [BOOL, I32], "< expects two values of comparable types, got boolean, int"),
        ("and", [BOOL, I32], "and expects booleans, got boolean, int"),
        ("year", [STR], "year expects a date or timestamp, got string"),
        (
            "date_add",
            [DATE, I64],
            "date_add expects a date or timestamp and an int, got date, bigint",
        ),
        ("substring", [STR, F64], "substring expects a string, an int, got string, double"),
        ("coalesce", [I32, STR], "coalesce expects arguments of a common type, got int, string"),
        (
            "concat",
            [STR, F64],
            "concat expects strings (or values castable to string), got string, double",
        ),
        ("round", [D10_2, I32], "round of a decimal to a scale"),
        ("sqrt", [STR], "sqrt expects numbers, got string"),
    ],
)
def test_type_errors_name_the_function_and_what_it_expects(
    fn: str, types: list[pa.DataType], message: str
) -> None:
    with pytest.raises(FunctionTypeError) as info:
        FUNCTIONS[fn].result_type(types)
    assert str(info.value).startswith(message)


def test_common_types_follow_spark() -> None:
    assert common_type([I8, I32]) == I32
    assert common_type([I32, D10_2]) == pa.decimal128(12, 2)
    assert common_type([I64, pa.decimal128(2, 1)]) == pa.decimal128(21, 1)
    assert common_type([F32, I32]) == F64
    assert common_type([F32, F32]) == F32
    assert common_type([pa.decimal128(38, 0), pa.decimal128(38, 10)]) == pa.decimal128(38, 0)
    assert common_type([DATE, TS]) == TS
    assert common_type([pa.null(), STR]) == STR
    assert common_type([pa.null(), pa.null()]) == pa.null()
    for bad in ([I32, STR], [BOOL, I32], [DATE, STR], [DATE, I32]):
        with pytest.raises(FunctionTypeError, match="no common type"):
            common_type(bad)
    assert FUNCTIONS["/"].result_type([I32, I32]) == F64
    assert FUNCTIONS["/"].result_type([D10_2, D10_2]) == pa.decimal128(23, 13)
    assert FUNCTIONS["%"].result_type([I8, I16]) == I16
    assert FUNCTIONS["*"].result_type([D38_18, D38_18]) == pa.decimal128(38, 6)
    assert FUNCTIONS["floor"].result_type([F64]) == I64
    assert FUNCTIONS["round"].literal_type is not None
    assert FUNCTIONS["round"].literal_type([D10_2, I32], [None, -1]) == pa.decimal128(9, 0)


def test_casts_left_out_are_refused() -> None:
    assert not cast_type_ok(F64, STR) and not cast_type_ok(F32, STR)
    assert not cast_type_ok(DATE, I32) and not cast_type_ok(I32, DATE)
    assert not cast_type_ok(TS, BOOL) and not cast_type_ok(F64, TS)
    assert cast_type_ok(STR, TS) and cast_type_ok(pa.null(), DATE) and cast_type_ok(I32, TS)


def test_empty_tables_and_predicates() -> None:
    empty = SMALL.slice(0, 0)
    out = evaluate(op("/", t("x"), t("zero")).expr, empty)
    assert out.type == F64 and len(out) == 0
    mask = evaluate_predicate(op(">", t("x"), lit(1, I32)).expr, SMALL)
    assert mask.to_pylist() == [False, True, False, True]
    literal = evaluate(lit(Decimal("1.5"), pa.decimal128(2, 1)).expr, SMALL)
    assert literal.to_pylist() == [Decimal("1.5")] * 4


def test_evaluation_is_vectorised() -> None:
    """A million rows through arithmetic, a CASE, a string function and a cast in well
    under the time per-row Python would take."""
    n = 1_000_000
    big = pa.table({"x": pa.array(np.arange(n, dtype=np.int64)), "s": pa.array(["ab"] * n)})
    x, sx = E(Column("x", I64), "x"), E(Column("s", STR), "s")
    exprs = [
        op("+", op("*", x, lit(3, I64)), lit(1, I64)),
        case([(op(">", x, lit(10, I64)), op("/", x, lit(7, I64)))], lit(0.0, F64)),
        call("upper", call("concat", sx, cast(x, STR))),
        cast(op("%", x, lit(97, I64)), D10_2),
    ]
    start = dt.datetime.now()
    for e in exprs:
        assert len(evaluate(e.expr, big)) == n
    assert (dt.datetime.now() - start).total_seconds() < 10


@pytest.mark.parametrize(
    "pattern",
    ["a(?=b)", "(a)\\1", "a*+", "(?i)a", "[a-z&&[^x]]", "\\bword", "\\p{Alpha}", "[[a]]", "\\G"],
)
def test_regular_expressions_re2_reads_differently_are_refused(pattern: str) -> None:
    table = pa.table({"s": ["ab"]})
    e = op("rlike", E(Column("s", STR), "s"), lit(pattern, STR))
    with pytest.raises(EvaluationError):
        evaluate(e.expr, table)


def test_chunked_columns_give_the_same_results() -> None:
    """Columns of several chunks (as a table of several record batches has)."""
    chunked = pa.concat_tables([NUM.slice(0, 100), NUM.slice(100, 60), NUM.slice(160)])
    exprs = [
        op("+", c("i32"), c("i64")),
        call("coalesce", c("d1"), c("i32")),
        case([(c("b1"), op("/", c("d2"), c("d1nz")))], c("f64")),
        cast(c("d1"), STR),
    ]
    for e in exprs:
        ours, expected = evaluate(e.expr, chunked), evaluate(e.expr, NUM)
        assert all(
            same(a, b, e.type) for a, b in zip(ours.to_pylist(), expected.to_pylist(), strict=True)
        )
