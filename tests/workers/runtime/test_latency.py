"""The end-to-end latency metric on real Spark: `latency_ms` of a step is the newest sink
write's completion minus the oldest event time among the step's rows that passed the
transform's filter; null without an event-time column. Only logical bounds are asserted:
the events are 5 s old when the run starts, and a filtered-out row an hour old must not
count."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from pipeline_spec.model import SpecError, parse_spec
from workers.runtime.plan import plan
from workers.runtime.run_builder import open_runner

AGE_S = 5.0
FILTERED_AGE_S = 3600.0


def _write_input(d: Path) -> float:
    """One JSON-lines file: rows AGE_S old, one row an hour old that the filter drops, a
    malformed line. Returns the kept rows' event time (unix seconds)."""
    d.mkdir(parents=True)
    now = time.time()
    kept = now - AGE_S

    def iso(t: float) -> str:
        return dt.datetime.fromtimestamp(t, dt.UTC).isoformat()

    lines = [
        json.dumps({"user": f"u{i % 3}", "amount": 1 + i, "ts": iso(kept + i * 0.001)})
        for i in range(20)
    ]
    lines.append(json.dumps({"user": "old", "amount": -1, "ts": iso(now - FILTERED_AGE_S)}))
    lines.append("{not json")
    (d / "part-0000.json").write_text("\n".join(lines) + "\n")
    return kept


def _doc(tmp: Path, state: list[dict[str, Any]], **transform: Any) -> dict[str, Any]:
    return {
        "name": "latency",
        "source": {
            "kind": "files",
            "path": str(tmp / "in"),
            "format": "json",
            "schema": {"user": "string", "amount": "bigint", "ts": "timestamp"},
        },
        "transform": {"where": "amount > 0", **transform},
        "state": state,
        "sinks": [{"name": "out", "kind": "files", "from": state[0]["name"], "path": "out"}],
        "trigger": {"interval": "50ms"},
        "checkpoint": {"every_steps": 1},
    }


AGG = {"name": "per_user", "kind": "aggregate", "group_by": ["user"],
       "aggregates": [{"name": "n", "func": "count"}]}  # fmt: skip
WINDOW = {"name": "per_10s", "kind": "window_aggregate", "time_column": "ts", "size": "10s",
          "aggregates": [{"name": "n", "func": "count"}]}  # fmt: skip
JOIN = {"name": "self_join", "kind": "join",
        "left": {"select": ["user", "ts"]}, "right": {"select": ["user AS u2", "amount"]},
        "left_on": ["user"], "right_on": ["u2"]}  # fmt: skip


def _run(tmp: Path, spark: SparkSession, doc: dict[str, Any]) -> list[dict[str, Any]]:
    r = open_runner(parse_spec(doc), str(tmp / "state"), base_dir=str(tmp), spark=spark)
    try:
        r.run(max_steps=1)
    finally:
        r.close()
    lines = (tmp / "state" / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "step" in r]  # steps, not `started`


@pytest.mark.parametrize(
    ("state", "transform"),
    [
        ([AGG], {"event_time": "ts"}),  # named; one Spark job per step
        ([WINDOW], {}),  # default: the window's time column
        ([JOIN], {"event_time": "ts"}),  # a join: per-input jobs plus the oldest-event job
    ],
    ids=["named", "window-default", "join"],
)
def test_latency_is_sink_write_minus_the_oldest_kept_event(
    tmp_path: Path, spark: SparkSession, state: list[dict[str, Any]], transform: dict[str, Any]
) -> None:
    kept = _write_input(tmp_path / "in")
    recs = _run(tmp_path, spark, _doc(tmp_path, state, **transform))
    after = time.time()
    assert len(recs) == 1 and recs[0]["rows_in"] > 0 and recs[0]["dead_letters"] == 1
    lat = recs[0]["latency_ms"]
    assert lat is not None
    # At least the events' age when written; at most their age once the run is over (so
    # the hour-old row the filter dropped did not count).
    assert AGE_S * 1000 <= lat <= (after - kept) * 1000 < FILTERED_AGE_S * 1000


def test_no_event_time_column_records_null(tmp_path: Path, spark: SparkSession) -> None:
    _write_input(tmp_path / "in")
    recs = _run(tmp_path, spark, _doc(tmp_path, [AGG]))
    assert len(recs) == 1 and recs[0]["rows_in"] > 0
    assert "latency_ms" in recs[0] and recs[0]["latency_ms"] is None


def test_which_column_is_the_event_time(tmp_path: Path, spark: SparkSession) -> None:
    assert plan(spark, parse_spec(_doc(tmp_path, [AGG]))).event_time is None
    assert plan(spark, parse_spec(_doc(tmp_path, [WINDOW]))).event_time == "ts"
    named = _doc(tmp_path, [AGG, {**WINDOW, "time_column": "t2"}], select=["*", "ts AS t2"])
    assert plan(spark, parse_spec(named)).event_time == "t2"  # the first window's
    named["transform"]["event_time"] = "ts"
    assert plan(spark, parse_spec(named)).event_time == "ts"
    # datagen's ts is synthetic (2024-01-01 + i / rate), not wall clock: no default.
    gen = {**_doc(tmp_path, [WINDOW]), "source": {"kind": "datagen", "generator": "clicks"}}
    gen["transform"] = {}
    assert plan(spark, parse_spec(gen)).event_time is None
    gen["transform"] = {"event_time": "ts"}
    assert plan(spark, parse_spec(gen)).event_time == "ts"  # named explicitly: the user's call


@pytest.mark.parametrize(
    ("transform", "reason"),
    [
        ({"event_time": "nope"}, r"'nope' is not a column of the transformed stream"),
        ({"event_time": "user"}, r"'user' is string, not a timestamp"),
        ({"select": ["user", "amount"], "event_time": "ts"}, r"'ts' is not a column"),
    ],
    ids=["missing", "not-a-timestamp", "projected-away"],
)
def test_a_bad_event_time_names_its_field(
    tmp_path: Path, spark: SparkSession, transform: dict[str, Any], reason: str
) -> None:
    with pytest.raises(SpecError, match=r"transform\.event_time: " + reason) as e:
        plan(spark, parse_spec(_doc(tmp_path, [AGG], **transform)))
    assert [p for p, _ in e.value.errors] == ["transform.event_time"]


def test_an_empty_event_time_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(_doc(tmp_path, [AGG], event_time=""))
    assert [p for p, _ in e.value.errors] == ["transform.event_time"]
