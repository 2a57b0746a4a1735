"""The view lookup benchmark runs end to end at a tiny size and reports every figure (no
timing thresholds: timing is never asserted in a unit test)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from bench.view_lookups import run_benchmark


def test_smoke_report_has_every_figure(tmp_path: Path) -> None:
    report = run_benchmark("smoke", base_dir=str(tmp_path))
    json.dumps(report)
    for key in ("indexed_p50_ms", "indexed_p99_ms", "scan_p50_ms", "scan_over_indexed_p50"):
        assert math.isfinite(report[key]) and report[key] > 0, key
    assert not list(tmp_path.iterdir())  # cleaned up
