"""The UDF benchmark runs end to end at tiny sizes and reports every figure (no timing
thresholds: timing is never asserted in a unit test)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from bench.udf import run_benchmark


def test_smoke_report_has_every_figure(tmp_path: Path) -> None:
    report = run_benchmark("smoke", base_dir=str(tmp_path))
    json.dumps(report)
    for name in ("count_char", "amount_band"):
        r = report[name]
        for key in ("udf_s_per_million_rows", "builtin_s_per_million_rows", "udf_over_builtin"):
            assert math.isfinite(r[key]) and r[key] > 0, (name, key)
        assert len(r["runs"]["udf"]) == report["repeats"]
    assert not list(tmp_path.iterdir())  # cleaned up
