"""The API benchmark runs end to end in its quick profile (the real platform as a subprocess,
a pipeline running, three load phases, the metrics stream) and prints one JSON document with
every figure; it cleans up after itself. No timing thresholds: timing is never asserted in a
unit test."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# Smoke runs of a benchmark (a minute or more each): the full profile runs them.
pytestmark = pytest.mark.full

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 180


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _run(tmp_path: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "bench.api", "--json", "--quick", "--dir", str(tmp_path)]
    p = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = p.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)  # the benchmark stops the platform on SIGTERM
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        raise AssertionError(f"bench.api took over {TIMEOUT_S} s:\n{err[-4000:]}") from None
    assert p.returncode == 0, err[-4000:]
    report: dict[str, Any] = json.loads(out)  # stdout is the JSON document alone
    return report


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmdline = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{d.name}: {cmdline}")
    return found


def _ordered(name: str, p50: Any, p99: Any, top: Any) -> None:
    assert all(_number(x) for x in (p50, p99, top)), (name, p50, p99, top)
    assert 0 <= p50 <= p99 <= top, (name, p50, p99, top)


def test_quick_run_reports_every_figure_and_cleans_up(tmp_path: Path) -> None:
    report = _run(tmp_path)

    assert report["benchmark"] == "api"
    assert report["profile"] == "quick"
    assert report["machine"]["cores"] >= 1
    assert report["targets"] == {"read_p99_ms": 50, "sse_delay_p99_s": 1.0}
    assert set(report["met"]) == set(report["targets"])
    assert all(isinstance(v, bool) for v in report["met"].values())
    assert _number(report["pipeline_ready_s"]) and report["pipeline_ready_s"] > 0

    results = report["results"]
    assert {"list_pipelines", "list_checkpoints", "ingest", "sse"} <= set(results)
    for name in ("list_pipelines", "list_checkpoints", "ingest"):
        r = results[name]
        assert r["requests"] > 0, name
        assert sum(r["outcomes"].values()) == r["requests"], name
        assert 0 <= r["ok"] <= r["requests"], name
        assert r["target_rps"] == 200
        assert _number(r["achieved_rps"]) and r["achieved_rps"] >= 0, name
        assert r["ok"] > 0, (name, r["outcomes"])
        _ordered(name, r["p50_ms"], r["p99_ms"], r["max_ms"])
    assert results["ingest"]["records_per_s"] >= 0

    sse = results["sse"]
    assert sse["events"] > 0 and sse["steps"] > 0, sse
    _ordered("sse", sse["delay_p50_s"], sse["delay_p99_s"], sse["delay_max_s"])

    # The platform (server, Celery worker, Spark driver) is gone, and so is its directory.
    assert report["shutdown"]["stopped_s"] >= 0
    assert not _processes_mentioning(str(tmp_path))
    assert not list(tmp_path.iterdir())
