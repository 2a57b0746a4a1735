"""The Kafka ingest benchmark runs end to end at a tiny size and reports every figure (no
timing thresholds: timing is never asserted in a unit test)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.kafka import run_benchmark

# Smoke runs of a benchmark (a minute or more each): the full profile runs them.
pytestmark = pytest.mark.full


def test_smoke_report_has_every_figure(tmp_path: Path) -> None:
    report = run_benchmark("smoke", base_dir=str(tmp_path))
    json.dumps(report)
    for side in ("kafka", "kafka_small_steps", "kafka_avro", "files", "object_files"):
        r = report[side]
        assert r["steps"] >= 4  # every event read (the benchmark checks the count)
        for key in ("events_per_s", "p50_step_ms", "p99_step_ms", "open_s"):
            assert math.isfinite(r[key]) and r[key] > 0, (side, key)
    assert report["throughput_ratio"] > 0 and report["produce_events_per_s"] > 0
    assert report["object_files_ratio"] > 0 and report["avro_ratio"] > 0
    assert not list(tmp_path.iterdir())  # cleaned up
