"""The pipeline benchmark runs end to end at tiny sizes and reports every figure (no timing
thresholds: timing is never asserted in a unit test). Several minutes: `--full` only."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from bench.pipeline import run_benchmark


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


@pytest.mark.full
def test_smoke_report_has_every_figure(tmp_path: Path) -> None:
    report = run_benchmark("smoke", base_dir=str(tmp_path))
    json.dumps(report)
    figures = ("throughput_ratio", "p99_batch_ms_ratio", "recovery_ms", "spark_recovery_ms")
    figures += ("sql_throughput_ratio", "sql_p50_batch_ms_ratio")
    for key in (*figures, "recovery_platform_ms", "recovery_log_ms"):
        assert _finite(report[key]) and report[key] > 0, key
    assert "imports" in report["recovery_phases_ms"]  # a cold driver's run, from its start
    # A log source's first step is read ahead too: no query start before it.
    assert "query_start" not in report["recovery_log_phases_ms"]
    # Through the platform: the new driver's start-up and the platform's own part; the
    # worker's spare driver (ready before the kill) took the new run over.
    assert 0 < report["recovery_platform_driver_ms"] < report["recovery_platform_ms"]
    assert report["recovery_platform_restart_ms"] > 0
    assert report["recovery_platform_spare_runs"] == 1
    for side in ("spindle", "spindle_sql", "spark_rocksdb"):
        assert _finite(report["p50_batch_ms"][side])
        assert report[side]["batches"] >= 3
    assert report["input_rows"] > 0
    assert not list(tmp_path.iterdir())  # cleaned up
