"""Per-batch partial aggregation in Spark before the circuit, on real Spark: the sinks of a
pre-aggregated run equal a Spark batch query over the same input (nulls in keys and values,
min/max, avg, a global aggregate, several operators over the source, windows, distinct),
and equal a run that ships the rows (NaN included); dead letters, `rows_in` and the latency
metric are unchanged; a checkpoint of the row path continues on the pre-aggregated path."""

from __future__ import annotations

import datetime as dt
import json
import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline_spec.model import parse_spec
from storage_engine.schema import WEIGHT
from workers.batch_jobs import PRE_AGGREGATE_MIN_ROWS
from workers.connectors.files_sink import FilesSink
from workers.plan import plan
from workers.runner import Runner

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
ALL_OPS = [PER_USER, SAME_KEYS, PER_USER_CAT, EVERYTHING, PAIRS, WINDOWS]


def _doc(tmp: Path, state: list[dict[str, Any]], **transform: Any) -> dict[str, Any]:
    return {
        "name": "pre-aggregation",
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


def _run(
    tmp: Path, spark: SparkSession, doc: dict[str, Any], rows: bool = False, steps: int = FILES
) -> Runner:
    """Run `steps` steps (`rows`: with the row path, as before pre-aggregation existed)."""
    r = Runner(
        parse_spec(doc),
        str(tmp / "state"),
        base_dir=str(tmp),
        spark=spark,
        pre_aggregate="never" if rows else "always",
    )
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
    names = next(o for o in r.plan.circuit.operators if o.id == op).output_schema.names
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


def test_pre_aggregated_run_equals_a_spark_batch_query(tmp_path: Path, spark: SparkSession) -> None:
    good, bad = write_input(tmp_path / "in")
    doc = _doc(tmp_path, ALL_OPS)
    p = plan(spark, parse_spec(doc)).pre_aggregation
    assert p is not None and set(p.forms) == {op["name"] for op in ALL_OPS}
    # Operators with the same keys share a grouping set: per_user and per_user_sum
    # (with the bad lines' keys), per_user_cat and pairs, everything, per_10s.
    assert len(p.sets) == 4
    r = _run(tmp_path, spark, doc)
    want = _reference(spark, good)
    for op in want:
        assert _integrated(r, op) == want[op], op
    recs = _metrics(tmp_path)
    assert [m["step"] for m in recs] == list(range(1, FILES + 1))
    kept = [g for g in good if g["amount"] is None or g["amount"] != 13]
    assert sum(m["rows_in"] for m in recs) == len(kept)
    assert sum(m["dead_letters"] for m in recs) == len(bad) > 0
    assert _letters(tmp_path) == sorted(bad)
    assert recs[-1]["source_offset"] == FILES
    # The window's time column is the event time: every step has a latency.
    assert all(m["latency_ms"] is not None for m in recs)


def test_pre_aggregation_equals_the_row_path(tmp_path: Path, spark: SparkSession) -> None:
    """Same sinks, rows_in, dead letters and latency ordering as shipping the rows, with a
    column holding NaN (Arrow's min/max skip NaN, Spark's do not: the row path decides)."""
    write_input(tmp_path / "a" / "in")
    write_input(tmp_path / "b" / "in")
    nan = {
        "name": "nan", "kind": "aggregate", "group_by": ["user"],
        "aggregates": [
            {"name": f, "func": f, "column": "p2"} for f in ("min", "max", "sum", "avg")
        ],
    }  # fmt: skip
    select = ["*", "CASE WHEN amount = 7 THEN double('NaN') ELSE price END AS p2"]
    ops = [*ALL_OPS, nan]
    a = _run(tmp_path / "a", spark, _doc(tmp_path / "a", ops, select=select))
    b = _run(tmp_path / "b", spark, _doc(tmp_path / "b", ops, select=select), rows=True)
    for op in ops:
        assert _integrated(a, op["name"]) == _integrated(b, op["name"]), op["name"]
    assert any("nan" in row for row in _integrated(a, "nan"))  # NaN reached the sums
    ma, mb = _metrics(tmp_path / "a"), _metrics(tmp_path / "b")
    for x, y in zip(ma, mb, strict=True):
        assert (x["rows_in"], x["dead_letters"]) == (y["rows_in"], y["dead_letters"])
    letters = _letters(tmp_path / "a")
    assert letters and letters == [
        (f.replace("/b/", "/a/"), n) for f, n in _letters(tmp_path / "b")
    ]


def test_a_row_path_checkpoint_continues_pre_aggregated(
    tmp_path: Path, spark: SparkSession
) -> None:
    """State written before pre-aggregation existed (the row path) restores (same
    fingerprint) and continues with pre-aggregated steps to the batch query's result."""
    good, _ = write_input(tmp_path / "in")
    doc = _doc(tmp_path, ALL_OPS)
    _run(tmp_path, spark, doc, rows=True, steps=2)
    r = _run(tmp_path, spark, doc, steps=FILES - 2)
    assert r.first_step == 2 and r.step == FILES
    want = _reference(spark, good)
    for op in want:
        assert _integrated(r, op) == want[op], op


def test_joins_and_pre_aggregated_operators_together(tmp_path: Path, spark: SparkSession) -> None:
    """A join reads its own inputs (rows, one job each); the aggregate beside it still gets
    its source pre-aggregated."""
    good, _ = write_input(tmp_path / "in")
    join = {
        "name": "self_join", "kind": "join",
        "left": {"select": ["user", "cat"], "where": "cat = 1"},
        "right": {"select": ["user AS u2", "amount"], "where": "amount > 15"},
        "left_on": ["user"], "right_on": ["u2"],
    }  # fmt: skip
    doc = _doc(tmp_path, [PER_USER, EVERYTHING, join])
    assert plan(spark, parse_spec(doc)).pre_aggregation is not None
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


@pytest.mark.parametrize(
    ("op", "select", "why"),
    [
        ({**SAME_KEYS, "group_by": ["price"]}, ["*"], "a floating-point key"),
        ({**PAIRS, "columns": ["price"]}, ["*"], "a floating-point key"),
        (SAME_KEYS, ["*", "amount AS __weight"], "weights in the stream"),
        (
            {**WINDOWS, "time_column": "t2"},
            ["*", "CAST(ts AS TIMESTAMP_NTZ) AS t2"],
            "a timestamp without a zone",
        ),
    ],
)
def test_what_keeps_the_rows(
    tmp_path: Path, spark: SparkSession, op: dict[str, Any], select: list[str], why: str
) -> None:
    doc = _doc(tmp_path, [PER_USER, op], select=select)
    doc["transform"]["event_time"] = "ts"
    assert plan(spark, parse_spec(doc)).pre_aggregation is None, why


def test_one_aggregation_returns_groups_dead_letters_and_the_end_offset(
    spark: SparkSession,
) -> None:
    """The Spark side on a hand-made flagged batch: the Arrow result has a row per group
    (per grouping set) and one per bad line, not one per input row; a batch whose rows are
    all filtered out still gives its end offset."""
    from storage_engine.circuit import Aggregate, Circuit, GroupAggregate
    from workers.pre_aggregation import pre_aggregation

    stream = pa.schema([("user", pa.string()), ("amount", pa.int64())])
    aggs = [Aggregate("n", "count"), Aggregate("s", "sum", "amount")]
    aggs += [Aggregate("lo", "min", "amount"), Aggregate("hi", "max", "amount")]
    circuit = Circuit(
        [
            GroupAggregate("per_user", stream, ["user"], aggs),
            GroupAggregate("everything", stream, [], aggs[:2]),
        ]
    )
    pre = pre_aggregation(circuit, stream, None, lines=True)
    assert pre is not None
    cols = "__c0 string, __c1 bigint, __keep boolean, __bad boolean, __file string, "
    cols += "__lineno bigint, __line string, __end bigint"
    batch = [
        ("u1", 5, True, False, "f", 1, "l1", 9),
        ("u1", None, True, False, "f", 2, "l2", 9),
        ("u1", -2, True, False, "f", 3, "l3", 9),
        (None, 7, True, False, "f", 4, "l4", 9),
        ("u2", 1, False, False, "f", 5, "l5", 9),  # filtered out
        (None, None, None, True, "f", 6, "{bad", 9),
        (None, None, None, True, "f", 7, "{bad", 9),
    ]
    tab = pre.dataframe(spark.createDataFrame(batch * 50, cols)).toArrow()
    # Per user: u1, null (where filtered and bad rows fall too, counting nowhere), 2 bad
    # lines; global: 1 group.
    assert tab.num_rows == 5
    got = pre.split(tab)
    assert (got.end, got.rows_in) == (9, 200)
    assert got.bad is not None and got.bad.num_rows == 100
    assert sorted({tuple(r.values()) for r in got.bad.to_pylist()}) == [
        ("f", 6, "{bad"),
        ("f", 7, "{bad"),
    ]
    assert sorted(got.partials["per_user"].to_pylist(), key=str) == sorted(
        [
            {"user": "u1", "__count": 150, "__n_amount": 100, "__s_amount": 150,
             "__min_amount": -2, "__max_amount": 5},
            {"user": None, "__count": 50, "__n_amount": 50, "__s_amount": 350,
             "__min_amount": 7, "__max_amount": 7},
        ],
        key=str,
    )  # fmt: skip
    assert got.partials["everything"].to_pylist() == [
        {"__count": 200, "__n_amount": 150, "__s_amount": 500}
    ]
    filtered = [(*r[:2], False, *r[3:]) for r in batch]
    none = pre.split(pre.dataframe(spark.createDataFrame(filtered, cols)).toArrow())
    assert (none.end, none.rows_in) == (9, 0)
    assert all(t.num_rows == 0 for t in none.partials.values())
    empty = pre.split(pre.dataframe(spark.createDataFrame([], cols)).toArrow())
    assert empty.end is None


def test_auto_pre_aggregates_min_max_and_large_steps(tmp_path: Path, spark: SparkSession) -> None:
    """`auto` (the default): Spark pre-aggregates when an operator keeps min/max, or once a
    step had PRE_AGGREGATE_MIN_ROWS rows; small steps of linear aggregates ship rows."""
    write_input(tmp_path / "in")

    def runner(op: dict[str, Any], d: str) -> Runner:
        spec = parse_spec(_doc(tmp_path, [op]))
        return Runner(spec, str(tmp_path / d), base_dir=str(tmp_path / d), spark=spark)

    linear, extremes = runner(PER_USER_CAT, "a"), runner(EVERYTHING, "b")
    try:
        assert linear.plan.pre_aggregation is not None
        assert linear.jobs.pre_aggregation() is None  # the first step: no size known yet
        linear.run(max_steps=2)
        assert linear.jobs.pre_aggregation() is None  # a few rows per step
        linear.jobs.last_rows_in = PRE_AGGREGATE_MIN_ROWS
        assert linear.jobs.pre_aggregation() is linear.plan.pre_aggregation
        assert extremes.jobs.pre_aggregation() is extremes.plan.pre_aggregation
        extremes.jobs.policy = "never"
        assert extremes.jobs.pre_aggregation() is None
    finally:
        linear.close()
        extremes.close()
