"""The Nexmark benchmark runs end to end at a tiny size on Spindle and Spark and reports every
figure, each system's output equal to the oracle's, and a killed Spindle run recovers to it
(no timing is asserted; several Spark and driver processes, minutes: `--full` only).
Flink's side needs the benchmark's own environment (`make bench-flink`), which the test
environment does not have; its statements are checked here as text."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.nexmark import read_events, run_benchmark, write_events
from bench.nexmark_queries import flink_events_ddl, flink_statements, load, names, spark_statements
from bench.nexmark_recovery import CHECKPOINT_STEPS, KILL_AFTER_STEP, recovery
from bench.nexmark_runs import SpindleOptions
from oracles.nexmark import oracle


@pytest.mark.full
def test_smoke_report_has_every_figure(tmp_path: Path) -> None:
    spindle = SpindleOptions(memory_budget="16MiB")
    report = run_benchmark("smoke", str(tmp_path), systems=("spindle", "spark"), spindle=spindle)
    json.dumps(report)
    q1 = report["queries"]["q1"]
    assert q1["oracle_rows"] > 0
    for system in ("spindle", "spark"):
        fig = q1[system]
        assert fig["correct"] is True, (system, fig)
        for key in ("events_per_s", "startup_s", "p50_batch_ms", "p99_batch_ms"):
            assert math.isfinite(fig[key]) and fig[key] > 0, (system, key)
        assert fig["peak_rss_bytes"] > 0
    assert q1["spindle"]["memory_budget_bytes"] == 16 << 20
    assert 0 <= q1["spindle"]["peak_memory_bytes"] <= 16 << 20
    assert not list(tmp_path.iterdir())  # cleaned up


@pytest.mark.full
def test_a_killed_run_recovers_to_the_oracles_output(tmp_path: Path) -> None:
    """q5's driver and JVM SIGKILLed after step 4 of 12; the second run restores a
    checkpoint and ends equal to the oracle over every event (two Spark starts)."""
    write_events(tmp_path / "ev", 24_000, 2_000)
    q = load("q5")
    want = oracle(q.name, q.spec.sql or "", {"events": read_events(tmp_path / "ev")})
    fig = recovery(q, tmp_path / "ev", want, tmp_path / "work")
    assert fig["correct"] is True, fig
    assert fig["killed_in_step"] > KILL_AFTER_STEP
    assert fig["restored_step"] % CHECKPOINT_STEPS == 0 and fig["restored_step"] >= 3
    assert fig["first_step_s"] > 0 and fig["phases_ms"]["storage_restore"] >= 0


def test_events_files_hold_every_event_and_the_sentinel(tmp_path: Path) -> None:
    write_events(tmp_path / "ev", 2_500, 1_000)
    assert len(list((tmp_path / "ev").iterdir())) == 3
    table = read_events(tmp_path / "ev")
    kinds = table.column("event_type").to_pylist()
    assert len(kinds) == 2_501 and kinds[-1] == 3 and set(kinds[:-1]) == {0, 1, 2}
    times = table.column("date_time").to_pylist()
    assert times == sorted(times)  # in order: one per millisecond, the sentinel an hour on
    assert (times[-1] - times[-2]).total_seconds() > 3_000


def test_every_example_has_each_systems_statements() -> None:
    assert {"q0", "q5", "q22"} <= set(names())
    for name in names():
        q = load(name)
        spark, flink = spark_statements(q), flink_statements(q)
        assert len(spark) == len(flink) == len(q.views) and q.views[-1][0] == name
        assert "TABLE(" not in spark[-1]  # Spark has no window table functions
    assert "COALESCE(SPLIT_INDEX(url, '/', 3), '')" in flink_statements(load("q22"))[-1]
    assert "avg(CAST(price AS DOUBLE))" in flink_statements(load("q17"))[-1]
    assert "WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND" in flink_events_ddl(
        "/x", 4.0
    )
