"""The engine benchmark runs end to end at tiny sizes and reports every figure (no timing
thresholds: timing is never asserted in a unit test)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from bench.engine import KEY_KINDS, TARGETS, main, run_benchmark

REQUIRED = (
    "ingest_ratio_vs_rocksdict",
    "ingest_ratio_vs_sqlite",
    "lookup_ratio_vs_rocksdict",
    "commit_ms_small",
    "commit_ms_large",
    "commit_ratio_large_vs_small",
    "restore_ms_large",
    "over_budget_ratio",
    "state_bytes_small",
    "state_bytes_large",
)


def _finite_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def test_smoke_report_has_every_figure(tmp_path: Path) -> None:
    report = run_benchmark("smoke", base_dir=str(tmp_path))
    json.dumps(report)  # serialisable as is
    assert report["mode"] == "smoke"
    assert report["machine"]["cores"] >= 1
    assert report["versions"]["rocksdict"]
    for kind in KEY_KINDS:
        result = report[kind]
        for key in REQUIRED:
            assert _finite_number(result[key]), (kind, key, result.get(key))
        for system in ("spindle", "rocksdict", "sqlite", "dict"):
            assert _finite_number(result["ingest_rows_per_s"][system])
            assert result["ingest_rows_per_s"][system] > 0
        assert result["state_bytes_large"] > result["state_bytes_small"] > 0
        assert set(result["targets"]) == {key for key, _, _ in TARGETS}
        assert all(isinstance(t["pass"], bool) for t in result["targets"].values())
        # Every system ended with the same state, and restores gave back what was committed.
        checks = result["checks"]
        assert checks["same_state_as_dict"] and checks["same_rows_as_sqlite"]
        assert checks["large_restored_rows_match"] and checks["small_restored_rows_match"]
        assert checks["large_restore_probe_found"] and checks["small_restore_probe_found"]
    assert isinstance(report["all_targets_met"], bool)
    assert list(tmp_path.iterdir()) == []  # temporary state cleaned up


def test_cli_json_prints_only_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--smoke", "--json", "--quiet", "--keys", "int64", "--dir", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "string" not in report
    assert _finite_number(report["int64"]["over_budget_ratio"])


def test_cli_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--smoke", "--quiet", "--keys", "string", "--dir", str(tmp_path)]) == 0
    assert "over-budget ratio" in capsys.readouterr().out


def test_unknown_key_kind_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown key kind"):
        run_benchmark("smoke", base_dir=str(tmp_path), kinds=["float"])
