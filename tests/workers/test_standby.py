"""Hot standby drivers (`run --standby`, workers/standby.py), standalone: a standby takes
over a SIGKILLed run and its output is exactly once; one that is not needed, or is told
nonsense, leaves the storage location alone; the warm-up writes nothing outside its scratch
directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from workers.runner import spark_session
from workers.spec import parse_spec
from workers.standby import Takeover, warm_up

from .. import customers

ROOT = Path(__file__).resolve().parents[2]
FILES, ROWS = 12, 200


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    s = spark_session("spindle-tests-standby")
    yield s
    s.stop()


def spec_doc(tmp: Path) -> dict[str, Any]:
    return customers.spec("standby", str(tmp / "in"), str(tmp / "out"), 2, "500ms")


def driver(spec: Path, storage: Path, standby: bool) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "workers.runner", "run", str(spec), "--storage", str(storage)]
    return subprocess.Popen(
        [*cmd, "--stop-when-idle", "3", *(["--standby"] if standby else [])],
        cwd=ROOT,
        stdin=subprocess.PIPE if standby else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def wait_ready(p: subprocess.Popen[str]) -> None:
    assert p.stdout is not None
    for line in p.stdout:
        if line.startswith("standby: ready"):
            return
    raise AssertionError(f"the standby ended before it was ready: {p.wait()}")


def steps(storage: Path) -> int:
    m = storage / "metrics.jsonl"
    if not m.exists():
        return 0
    return sum(1 for x in m.read_text().splitlines() if '"step"' in x)


def test_a_standby_takes_over_a_killed_run_exactly_once_and_others_leave_storage_alone(
    tmp_path: Path,
) -> None:
    want = customers.write_input(tmp_path / "in", FILES, ROWS, customers=25, seed=3)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_doc(tmp_path)))
    state = tmp_path / "state"
    spare = driver(spec, state, standby=True)
    unneeded = driver(spec, tmp_path / "unneeded", standby=True)
    confused = driver(spec, tmp_path / "confused", standby=True)
    primary: subprocess.Popen[str] | None = None
    try:
        for p in (spare, unneeded, confused):
            wait_ready(p)
        primary = driver(spec, state, standby=False)
        deadline = time.monotonic() + 180
        while steps(state) < 3:
            assert primary.poll() is None, primary.communicate()
            assert time.monotonic() < deadline, "the primary made no progress"
            time.sleep(0.05)
        primary.send_signal(signal.SIGKILL)
        primary.wait()
        killed_at = steps(state)

        out, err = spare.communicate('{"from_checkpoint": "latest"}\n', timeout=300)
        assert spare.returncode == 0, err
        assert "standby: taking over" in out
        assert customers.integrated(tmp_path / "out") == want  # nothing lost, nothing twice
        records = [json.loads(x) for x in (state / "metrics.jsonl").read_text().splitlines()]
        started = [r for r in records if r.get("event") == "started"]
        assert [r["standby"] for r in started] == [False, True]
        assert started[1]["restored"] is not None and started[1]["first_step"] <= killed_at + 1

        # Not needed: its input ends. It exits 0 and never opened its storage location.
        _, err = unneeded.communicate("", timeout=120)
        assert unneeded.returncode == 0, err
        assert not (tmp_path / "unneeded").exists()
        # A line that is not a takeover: a clear error, the location untouched.
        _, err = confused.communicate('{"from": "latest"}\n', timeout=120)
        assert confused.returncode == 2 and "not a takeover" in err
        assert not (tmp_path / "confused").exists()
    finally:
        for p in (spare, unneeded, confused, primary):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def test_takeover_lines() -> None:
    assert Takeover.parse("\n", 1.0) == Takeover(1.0)
    got = Takeover.parse('{"from_checkpoint": "none", "run_id": 7}\n', 2.0)
    assert got == Takeover(2.0, "none", 7)
    for bad in ["[]", '{"run": 1}', '{"run_id": "7"}', '{"run_id": true}']:
        with pytest.raises(ValueError):
            Takeover.parse(bad, 0.0)
    for bad in ['{"from_checkpoint": 1}', "{not json"]:
        with pytest.raises(ValueError):
            Takeover.parse(bad, 0.0)


def test_the_warm_up_writes_nothing_outside_its_scratch_directory(
    tmp_path: Path, spark: SparkSession
) -> None:
    customers.write_input(tmp_path / "in", FILES, ROWS, customers=25, seed=3)
    spec = parse_spec(spec_doc(tmp_path))
    before = set(os.listdir(tmp_path))
    warm_up(spark, spec, until=threading.Event())  # to its first step
    assert set(os.listdir(tmp_path)) == before  # no sink output, no storage location
