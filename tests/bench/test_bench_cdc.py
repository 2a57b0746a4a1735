"""The CDC benchmark runs end to end at tiny sizes against its own PostgreSQL and reports
every figure (no timing thresholds: timing is never asserted in a unit test)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from bench.cdc import run_benchmark


def test_smoke_report_has_every_figure(tmp_path: Path) -> None:
    report = run_benchmark("smoke", base_dir=str(tmp_path))
    json.dumps(report)
    for key in ("inserts_per_s", "cdc_changes_per_s", "cdc_over_inserts", "snapshot_rows_per_s"):
        assert math.isfinite(report[key]) and report[key] > 0, key
    assert len(report["runs"]["cdc"]) == report["repeats"]
    assert not list(tmp_path.iterdir())  # cleaned up
