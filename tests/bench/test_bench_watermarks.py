"""The watermark benchmark runs end to end at tiny sizes and reports every figure (no timing
thresholds: timing is never asserted in a unit test)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from bench.watermarks import QUERIES, run_benchmark


def test_smoke_report_has_every_figure(tmp_path: Path) -> None:
    report = run_benchmark("smoke", base_dir=str(tmp_path))
    json.dumps(report)
    for q in QUERIES:
        r = report[q]
        for key in ("state_bytes_ratio", "state_rows_ratio", "throughput_ratio"):
            assert math.isfinite(r[key]) and r[key] > 0, (q, key)
        for variant in ("watermark", "none"):
            assert r[variant]["steps"] == report["events"] // report["events_per_step"]
            assert r[variant]["late_rows"] == 0  # the generator's events are in order
    assert not list(tmp_path.iterdir())  # cleaned up
