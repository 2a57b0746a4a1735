"""The live lookup benchmark runs end to end at a tiny size (the real platform, a pipeline
filled and fed, lookups live and from the checkpoint, a whole-view read) and reports every
figure. No timing thresholds: timing is never asserted in a unit test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.live_lookups import run_benchmark

# A smoke run of a benchmark (a minute): the full profile runs it.
pytestmark = pytest.mark.full


def test_smoke_report_has_every_figure(tmp_path: Path) -> None:
    report = run_benchmark("smoke", base_dir=str(tmp_path))
    json.dumps(report)
    phases = report["phases"]
    for name in ("live", "checkpoint"):
        got = phases[name]
        assert got["ok"] == got["requests"] > 0, got  # every lookup found its bidder
        assert got["p99_ms"] > 0
    assert phases["scan"]["scans"] >= 1
    assert phases["quiet_after"]["steps"] > 0  # the feeder kept the run stepping
    assert not list(tmp_path.iterdir())  # cleaned up
