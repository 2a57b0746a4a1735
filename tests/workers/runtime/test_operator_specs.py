"""Operator specs on the SQL dataflow (`spindle_sql.operators`), on real Spark: a run's sinks
equal a Spark batch query over the same input (nulls in keys and values, min/max, avg, a
global aggregate, several operators over the source, windows, distinct, a join beside them),
with the dead letters, `rows_in` and the latency metric of every step."""

from __future__ import annotations

import datetime as dt
import json
import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline_spec.model import parse_spec
from storage_engine.schema import WEIGHT
from workers.runtime.connectors.files_sink import FilesSink
from workers.runtime.run_builder import open_runner
from workers.runtime.runner import Runner

FILES, ROWS = 4, 150
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
SCHEMA = "user string, cat int, amount bigint, price double, ts timestamp, name string"


BAD_LINES = [
    '{"user": "u1", "amount": oops}', '{"amount": "x"}', '{"amount": 1.5}', "[1, 2]", "7",
    '{"user": "u2", "amount": ""}', '{"ts": "yesterday"}',
]  # fmt: skip


def write_input(d: Path) -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:
    """FILES JSON-lines files: nulls in every column, some unparseable lines. Returns the
    good rows and the bad lines' (file, line number)."""
    d.mkdir(parents=True)
    rng = random.Random(3)
    good: list[dict[str, Any]] = []
    bad: list[tuple[str, int]] = []

    def maybe(v: Any) -> Any:
        return None if rng.random() < 0.15 else v

    for f in range(FILES):
        path = d / f"part-{f:04d}.json"
        lines = []
        for r in range(ROWS):
            if rng.random() < 0.03:
                # Malformed, a wrong type, not an object, an empty string for a number.
                lines.append(rng.choice(BAD_LINES))
                bad.append((str(path), r + 1))
                continue
            i = f * ROWS + r
            ts = T0 + dt.timedelta(milliseconds=137 * i)
            row = {
                "user": maybe(f"u{rng.randint(0, 5)}"),
                "cat": maybe(rng.randint(0, 2)),
                "amount": maybe(rng.randint(-5, 20)),
                "price": maybe(round(rng.uniform(0, 100), 2)),
                "ts": maybe(ts),
                "name": maybe(rng.choice(["kiwi", "apple", "fig", "Zed"])),
            }
            lines.append(
                json.dumps({k: v.isoformat() if k == "ts" and v else v for k, v in row.items()})
            )
            good.append(row)
        path.write_text("\n".join(lines) + "\n")
    return good, bad


WHERE = "amount IS NULL OR amount <> 13"
PER_USER = {
    "name": "per_user", "kind": "aggregate", "group_by": ["user"],
    "aggregates": [
        {"name": "n", "func": "count"}, {"name": "n_amount", "func": "count", "column": "amount"},
        {"name": "total", "func": "sum", "column": "amount"},
        {"name": "avg_price", "func": "avg", "column": "price"},
        {"name": "lo", "func": "min", "column": "amount"},
        {"name": "hi", "func": "max", "column": "amount"},
        {"name": "cheapest", "func": "min", "column": "price"},
        {"name": "dearest", "func": "max", "column": "price"},
        {"name": "first", "func": "min", "column": "ts"},
        {"name": "last_name", "func": "max", "column": "name"},
    ],
}  # fmt: skip
SAME_KEYS = {
    "name": "per_user_sum", "kind": "aggregate", "group_by": ["user"],
    "aggregates": [{"name": "s", "func": "sum", "column": "price"}],
}  # fmt: skip
PER_USER_CAT = {
    "name": "per_user_cat", "kind": "aggregate", "group_by": ["user", "cat"],
    "aggregates": [
        {"name": "n", "func": "count"}, {"name": "total", "func": "sum", "column": "amount"},
    ],
}  # fmt: skip
EVERYTHING = {
    "name": "everything", "kind": "aggregate",
    "aggregates": [
        {"name": "n", "func": "count"}, {"name": "total", "func": "sum", "column": "amount"},
        {"name": "dearest", "func": "max", "column": "price"},
    ],
}  # fmt: skip
PAIRS = {"name": "pairs", "kind": "distinct", "columns": ["user", "cat"]}
WINDOWS = {
    "name": "per_10s", "kind": "window_aggregate", "time_column": "ts", "size": "10s",
    "slide": "5s", "lateness": "1h", "group_by": ["cat"],
    "aggregates": [
        {"name": "n", "func": "count"}, {"name": "total", "func": "sum", "column": "amount"},
        {"name": "hi", "func": "max", "column": "amount"},
    ],
}  # fmt: skip
ALL_OPS: list[dict[str, Any]] = [PER_USER, SAME_KEYS, PER_USER_CAT, EVERYTHING, PAIRS, WINDOWS]


def _doc(tmp: Path, state: list[dict[str, Any]], **transform: Any) -> dict[str, Any]:
    return {
        "name": "operators",
        "source": {
            "kind": "files",
            "path": str(tmp / "in"),
            "format": "json",
            "schema": dict(x.split() for x in SCHEMA.split(", ")),
            "max_files_per_step": 1,
        },
        "transform": {"where": WHERE, **transform},
        "state": state,
        "sinks": [
            {"name": op["name"], "kind": "files", "from": op["name"], "path": f"out/{op['name']}"}
            for op in state
        ],
        "trigger": {"interval": "50ms"},
        "checkpoint": {"every_steps": 1},
    }


def _run(tmp: Path, spark: SparkSession, doc: dict[str, Any], steps: int = FILES) -> Runner:
    r = open_runner(parse_spec(doc), str(tmp / "state"), base_dir=str(tmp), spark=spark)
    try:
        r.run(max_steps=steps)
        r.checkpoints.commit(wait=True)
    finally:
        r.close()
    return r


def _norm(v: Any) -> Any:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else round(v, 6)
    if isinstance(v, dt.datetime):
        return v.astimezone(dt.UTC)
    return v


def _integrated(r: Runner, op: str) -> Counter[tuple[Any, ...]]:
    sink = r.sinks[op]
    assert isinstance(sink, FilesSink)
    t = sink.read_all()
    names = r.plan.dataflow.output_schemas[op].names
    out: Counter[tuple[Any, ...]] = Counter()
    for row in [] if t is None else t.to_pylist():
        out[tuple(_norm(row[n]) for n in names)] += row[WEIGHT]
    return +out


def _rows(df: DataFrame) -> Counter[tuple[Any, ...]]:
    t = df.toArrow()
    return Counter(tuple(_norm(v) for v in r.values()) for r in t.to_pylist())


def _reference(spark: SparkSession, good: list[dict[str, Any]]) -> dict[str, Any]:
    df = spark.createDataFrame(good, SCHEMA).where(WHERE)
    return {
        "per_user": _rows(
            df.groupBy("user").agg(
                F.count("*"), F.count("amount"), F.sum("amount"), F.avg("price"),
                F.min("amount"), F.max("amount"), F.min("price"), F.max("price"),
                F.min("ts"), F.max("name"),
            )
        ),
        "per_user_sum": _rows(df.groupBy("user").agg(F.sum("price"))),
        "per_user_cat": _rows(df.groupBy("user", "cat").agg(F.count("*"), F.sum("amount"))),
        "everything": _rows(df.agg(F.count("*"), F.sum("amount"), F.max("price"))),
        "pairs": _rows(df.select("user", "cat").distinct()),
        "per_10s": _rows(
            df.where("ts IS NOT NULL")
            .groupBy(F.window("ts", "10 seconds", "5 seconds"), "cat")
            .agg(F.count("*"), F.sum("amount"), F.max("amount"))
            .select("window.start", "window.end", "*")
            .drop("window")
        ),
    }  # fmt: skip


def _metrics(tmp: Path) -> list[dict[str, Any]]:
    lines = (tmp / "state" / "metrics.jsonl").read_text().splitlines()
    return [m for m in map(json.loads, lines) if "step" in m]


def _letters(tmp: Path) -> list[tuple[str, int]]:
    return sorted(
        (d["file"], d["line"])
        for f in (tmp / "state" / "dead-letters").iterdir()
        for d in map(json.loads, f.read_text().splitlines())
    )


def test_a_run_equals_a_spark_batch_query(tmp_path: Path, spark: SparkSession) -> None:
    good, bad = write_input(tmp_path / "in")
    doc = _doc(tmp_path, ALL_OPS)
    r = _run(tmp_path, spark, doc)
    # One operator per spec operator, under its name.
    assert [o.id for o in r.plan.dataflow.operators] == [op["name"] for op in ALL_OPS]
    want = _reference(spark, good)
    for op in want:
        assert _integrated(r, op) == want[op], op
    recs = _metrics(tmp_path)
    assert [m["step"] for m in recs] == list(range(1, FILES + 1))
    kept = [g for g in good if g["amount"] is None or g["amount"] != 13]
    assert sum(m["rows_in"] for m in recs) == len(kept)
    assert sum(m["dead_letters"] for m in recs) == len(bad) > 0
    assert _letters(tmp_path) == sorted(bad)
    assert recs[-1]["inputs"]["input"]["offset"] == FILES
    # The window's time column is the event time: every step has a latency.
    assert all(m["latency_ms"] is not None for m in recs)


def test_joins_and_aggregates_together(tmp_path: Path, spark: SparkSession) -> None:
    """A join reads its own inputs (each side a filter and projection Spark computes in
    the step's one job); the aggregates beside it read the stream."""
    good, _ = write_input(tmp_path / "in")
    join = {
        "name": "self_join", "kind": "join",
        "left": {"select": ["user", "cat"], "where": "cat = 1"},
        "right": {"select": ["user AS u2", "amount"], "where": "amount > 15"},
        "left_on": ["user"], "right_on": ["u2"],
    }  # fmt: skip
    doc = _doc(tmp_path, [PER_USER, EVERYTHING, join])
    r = _run(tmp_path, spark, doc)
    want = _reference(spark, good)
    assert _integrated(r, "per_user") == want["per_user"]
    assert _integrated(r, "everything") == want["everything"]
    df = spark.createDataFrame(good, SCHEMA).where(WHERE)
    left = df.where("cat = 1").select("user", "cat")
    right = df.where("amount > 15").selectExpr("user AS u2", "amount")
    joined = left.join(right, left.user == right.u2).select("user", "cat", "amount")
    assert _integrated(r, "self_join") == _rows(joined)
    kept = [g for g in good if g["amount"] is None or g["amount"] != 13]
    rows_in = sum(m["rows_in"] for m in _metrics(tmp_path))
    assert rows_in == len(kept) + left.count() + right.count()
