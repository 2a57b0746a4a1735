"""The upsert benchmark runs end to end at tiny sizes and reports every figure (no timing
thresholds: timing is never asserted in a unit test)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from bench.upserts import run_benchmark


def test_smoke_report_has_every_figure(tmp_path: Path) -> None:
    report = run_benchmark("smoke", base_dir=str(tmp_path))
    json.dumps(report)
    for key in ("inserts_per_s", "changes_per_s", "changes_over_inserts"):
        assert math.isfinite(report[key]) and report[key] > 0, key
    assert len(report["runs"]["upserts"]) == report["repeats"]
    assert not list(tmp_path.iterdir())  # cleaned up
