"""The commit benchmark runs end to end at tiny sizes, against its own SeaweedFS server, and
reports every figure (no timing thresholds: timing is never asserted in a unit test)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from bench.commit import run_benchmark

REQUIRED = (
    "async_p99_ratio",
    "sync_p99_ratio",
    "upload_mb_s",
    "raw_put_mb_s",
    "remote_restore_ms_lazy",
    "remote_restore_ms_eager",
    "shard_open_ms_lazy",
)


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def test_smoke_report_has_every_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPINDLE_S3_ENDPOINT", raising=False)
    report = run_benchmark("smoke", base_dir=str(tmp_path))
    json.dumps(report)
    assert report["mode"] == "smoke" and report["sizes"]["steps"] > 0
    for key in REQUIRED:
        assert _finite(report[key]) and report[key] > 0, key
    for mode in ("none", "sync", "async", "async_remote"):
        assert _finite(report["p50_step_ms"][mode]) and _finite(report["p99_step_ms"][mode])
    assert report["steps"]["async"]["commit_local_ms_p50"] > 0
    assert report["steps"]["async_remote"]["commit_remote_ms_p50"] > 0
    assert report["targets"]["async_p99_ratio"]["target"] == "<= 1.25"
    assert report["restore_state_bytes"] > 0
    assert not list(tmp_path.iterdir())  # cleaned up
