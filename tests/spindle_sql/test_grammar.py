"""The parser's tree is read only where the compiler knows it (`sql/grammar.py`): a flag
or node it was not taught is refused at its line, never silently dropped; the parser is
the pinned version; and constructs whose tree changed between parser versions (NOT LIKE,
ltrim, date_sub, concat_ws) mean what Spark means."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pyarrow as pa
import pytest
import sqlglot

from spindle_sql.errors import SqlError
from spindle_sql.expr import Call, Literal
from spindle_sql.grammar import NODES
from spindle_sql.parse import parse
from spindle_sql.planner import plan

ROOT = Path(__file__).resolve().parents[2]
T = pa.schema(
    [
        ("k", pa.int32()),
        ("s", pa.string()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("x", pa.float64()),
    ]
)


def test_the_parser_is_the_pinned_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = [d for d in project["dependencies"] if d.startswith("sqlglot")]
    assert pins == [f"sqlglot=={sqlglot.__version__}"]


def test_the_table_names_arguments_the_parser_has() -> None:
    """A parser release that renames or drops an argument is noticed here, not in a query."""
    for node_type, shape in NODES.items():
        missing = set(shape) - set(node_type.arg_types)
        assert not missing, f"{node_type.__name__} has no arguments {missing}"


def _select(expr: str) -> Call | Literal:
    views = plan(parse(f"CREATE VIEW v AS SELECT {expr} AS r FROM t"), {"t": T})
    out = views["v"].root.outputs[0][1]  # type: ignore[attr-defined]
    assert isinstance(out, Call | Literal)
    return out


@pytest.mark.parametrize(
    ("sql", "fn", "type_"),
    [
        ("s NOT LIKE 'a%'", "not", pa.bool_()),
        ("NOT s LIKE 'a%'", "not", pa.bool_()),
        ("ltrim(s)", "ltrim", pa.string()),
        ("rtrim(s)", "rtrim", pa.string()),
        ("trim(s)", "trim", pa.string()),
        ("trim(LEADING FROM s)", "ltrim", pa.string()),
        ("concat_ws('-', s, s)", "concat_ws", pa.string()),
        ("unix_timestamp(ts)", "unix_timestamp", pa.int64()),
        ("date_sub(d, 3)", "date_sub", pa.date32()),
        ("date_add(d, k)", "date_add", pa.date32()),
        ("add_months(d, 3)", "add_months", pa.date32()),
        ("extract(year FROM d)", "year", pa.int32()),
        ("extract(DOW FROM ts)", "dayofweek", pa.int32()),
        ("extract(week FROM d)", "weekofyear", pa.int32()),
        ("d - INTERVAL '90' DAY", "date_add", pa.date32()),
        ("d + INTERVAL 3 DAYS", "date_add", pa.date32()),
        ("INTERVAL '2' WEEK + d", "date_add", pa.date32()),
        ("d + INTERVAL '1' YEAR", "add_months", pa.date32()),
        ("d + INTERVAL '1 month'", "add_months", pa.date32()),
        ("d + INTERVAL '36' HOUR", "timestamp_plus", pa.timestamp("us", tz="UTC")),
        ("ts - INTERVAL '90' DAY", "timestamp_plus", pa.timestamp("us", tz="UTC")),
        ("ts + INTERVAL '1' MONTH", "timestamp_plus", pa.timestamp("us", tz="UTC")),
    ],
)
def test_constructs_mean_what_spark_means(sql: str, fn: str, type_: pa.DataType) -> None:
    """Result types as Spark 4 gives them (checked there: date - INTERVAL '90' DAY is a
    date, date + INTERVAL '1' HOUR a timestamp)."""
    out = _select(sql)
    assert isinstance(out, Call) and (out.fn, out.type) == (fn, type_)


def test_interval_values() -> None:
    out = _select("d - INTERVAL '90' DAY")
    assert isinstance(out, Call) and out.args[1] == Literal(-90, pa.int32())
    out = _select("ts + INTERVAL '1.5' SECOND")
    assert isinstance(out, Call) and out.args[1:] == (
        Literal(0, pa.int32()),
        Literal(1_500_000, pa.int64()),
    )


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("k BETWEEN SYMMETRIC 1 AND 2", "SYMMETRIC is not supported"),
        ("try_cast(s AS int)", "the TRY_ form is not supported"),
        ("trim(BOTH 'x' FROM s)", "trimming characters other than spaces is not supported"),
        ("s ILIKE 'a'", "not supported in a view"),
        ("s IS DISTINCT FROM 'a'", "not supported in a view"),
        ("s LIKE 'a!%' ESCAPE '!'", "not supported in a view"),
        ("d + INTERVAL '1-2' YEAR TO MONTH", "not supported in a view"),
        ("d + INTERVAL '1' FORTNIGHT", "interval unit FORTNIGHT"),
        ("d + INTERVAL '1.5' DAY", "a whole number is needed"),
        ("s + INTERVAL '1' DAY", "added to a date or timestamp, not string"),
        ("INTERVAL '1' DAY - d", "an interval minus a date"),
        ("extract(second FROM ts)", "EXTRACT(SECOND FROM ...)"),
        ("timestamp_plus(ts, 1, 2)", "function 'timestamp_plus' is not supported"),
        ("k IS TRUE", "only IS NULL and IS NOT NULL"),
    ],
)
def test_unknown_flags_and_nodes_are_refused_at_their_line(sql: str, message: str) -> None:
    text = f"CREATE VIEW v AS\n  SELECT k,\n    {sql} AS r FROM t"
    with pytest.raises(SqlError) as e:
        plan(parse(text), {"t": T})
    problem = e.value.problems[0]
    assert message in problem.message
    assert problem.line == 3, str(e.value)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("SELECT k FROM t NATURAL JOIN t u", "NATURAL is not supported"),
        ("SELECT k, percent_rank() OVER (ORDER BY k) FROM t", "not supported in a view"),
        ("SELECT k, lag(k) IGNORE NULLS OVER (ORDER BY k) FROM t", "not supported in a view"),
        (
            "SELECT k, row_number() OVER (ORDER BY k DESC NULLS FIRST) AS r FROM t",
            "NULLS FIRST with DESC",
        ),
        ("SELECT k FROM t GROUP BY ROLLUP (k)", "'ROLLUP (k)': not supported in a view"),
        ("SELECT k FROM t QUALIFY k > 1", "QUALIFY is not supported"),
        ("SELECT DISTINCT ON (k) k FROM t", "ON is not supported"),
        ("WITH RECURSIVE r AS (SELECT k FROM t) SELECT k FROM r", "RECURSIVE"),
        ("SELECT k FROM t TABLESAMPLE (10 PERCENT)", "SAMPLE is not supported"),
    ],
)
def test_query_level_constructs_not_handled_are_refused(query: str, message: str) -> None:
    with pytest.raises(SqlError, match=re.escape(message)):
        plan(parse(f"CREATE VIEW v AS {query}"), {"t": T})
