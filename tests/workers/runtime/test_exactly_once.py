"""Exactly-once, proven: a pipeline (aggregate and windowed aggregate; files and Postgres
sinks) over a fixed input of JSON files is killed with SIGKILL at random moments and
restarted from its latest checkpoint each time; the sinks' final contents must equal a Spark
batch query over the whole input. Malformed lines go to dead letters and never stop a run."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from storage_engine.location_view import inspect_location, list_checkpoints
from storage_engine.schema import WEIGHT
from workers.runtime.connectors.files_sink import STEP

from ...conftest import trials

ROOT = Path(__file__).resolve().parents[3]
FILES, ROWS = 16, 300
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def write_input(d: Path) -> int:
    """FILES json-lines files with increasing event times; a few malformed lines."""
    d.mkdir()
    rng = random.Random(5)
    bad = 0
    for f in range(FILES):
        lines = []
        for r in range(ROWS):
            i = f * ROWS + r
            if rng.random() < 0.01:
                lines.append('{"customer": "c1", "amount": oops}')
                bad += 1
                continue
            ts = (T0 + dt.timedelta(milliseconds=50 * i)).isoformat()
            row = {"customer": f"c{rng.randint(0, 20)}", "amount": rng.randint(1, 100), "ts": ts}
            lines.append(json.dumps(row))
        (d / f"part-{f:04d}.json").write_text("\n".join(lines) + "\n")
    return bad


def spec(tmp: Path, dsn: str) -> Path:
    p = tmp / "spec.yaml"
    p.write_text(
        f"""
name: exactly-once
source:
  kind: files
  path: {tmp / "in"}
  format: json
  schema: {{customer: string, amount: bigint, ts: timestamp}}
  max_files_per_step: 1
state:
  - name: per_customer
    kind: aggregate
    group_by: [customer]
    aggregates: [{{name: n, func: count}}, {{name: total, func: sum, column: amount}}]
  - name: per_10s
    kind: window_aggregate
    time_column: ts
    size: 10s
    lateness: 1h
    aggregates: [{{name: n, func: count}}, {{name: total, func: sum, column: amount}}]
sinks:
  - {{name: agg, kind: files, from: per_customer, path: {tmp / "out-agg"}}}
  - {{name: win, kind: files, from: per_10s, path: {tmp / "out-win"}, format: jsonl}}
  - {{name: pg, kind: postgres, from: per_customer, dsn: "{dsn}", table: per_customer}}
checkpoint: {{every_steps: 2}}
trigger: {{interval: 100ms}}
"""
    )
    return p


def run(
    tmp: Path, spec_path: Path, kill_after: float | None, *args: str, after_steps: int = 0
) -> int | None:
    """One run of the runner; SIGKILLed after `kill_after` seconds if given, counted from
    its start or from its `after_steps`-th step (in its metrics file), so that the kill
    lands among the steps however long Spark took to start."""
    err = tmp / "run.err"
    metrics = tmp / "state" / "metrics.jsonl"
    steps_before = _steps(metrics)
    p = start_run(tmp, spec_path, "--stop-when-idle", "4", *args)
    try:
        if after_steps and kill_after is not None:
            _wait_for_steps(metrics, steps_before + after_steps, p)
        p.wait(timeout=kill_after if kill_after is not None else 300)
    except subprocess.TimeoutExpired:
        if kill_after is None:
            raise
        p.send_signal(signal.SIGKILL)
        p.wait()
        return None
    assert p.returncode == 0, err.read_text()[-3000:]
    return p.returncode


def start_run(
    tmp: Path, spec_path: Path, *args: str, err: str = "run.err"
) -> subprocess.Popen[bytes]:
    """`python -m workers.runtime.driver run` of the spec with its storage in `tmp / "state"`,
    standard error to `tmp / err`."""
    storage = str(tmp / "state")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workers.runtime.driver",
            "run",
            str(spec_path),
            "--storage",
            storage,
            *args,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=(tmp / err).open("w"),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _steps(metrics: Path) -> int:
    """How many steps the runs have recorded in the metrics file (its lines but events)."""
    if not metrics.exists():
        return 0
    lines = metrics.read_text().splitlines()
    return sum(1 for x in lines if x.endswith("}") and '"event": ' not in x)


def _wait_for_steps(metrics: Path, steps: int, p: subprocess.Popen[bytes]) -> None:
    """Until the metrics file holds `steps` steps, or the run `p` has ended."""
    deadline = time.monotonic() + 300
    while _steps(metrics) < steps and p.poll() is None:
        assert time.monotonic() < deadline, f"no step {steps} within 300 s"
        time.sleep(0.05)


def integrate_files(rows: list[dict[str, Any]], cols: list[str]) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for r in rows:
        out[tuple(r[c] for c in cols)] += r[WEIGHT]
    return +out


def test_sigkill_restarts_give_exactly_the_batch_result(
    tmp_path: Path, spark: SparkSession, pg_dsn: str
) -> None:
    bad = write_input(tmp_path / "in")
    spec_path = spec(tmp_path, pg_dsn)
    rng = random.Random(11)
    kills = 0
    for _ in range(trials(10, 3)):
        if run(tmp_path, spec_path, kill_after=rng.uniform(4.0, 9.0)) is None:
            kills += 1
    run(tmp_path, spec_path, kill_after=None)  # to the end of the input
    assert kills >= trials(8, 2), "most runs should have been killed mid-way"
    assert_batch_result(tmp_path, spark, pg_dsn, bad)


@pytest.mark.full
def test_a_run_dying_after_a_restore_to_an_older_checkpoint_loses_nothing(
    tmp_path: Path, spark: SparkSession, pg_dsn: str
) -> None:
    """Restore step 4 of a finished run, take one step, die before checkpointing; the next
    run's "latest" is step 4's timeline (the sinks were rolled back to it), not the
    abandoned newest checkpoint, whose steps the sinks no longer hold."""
    bad = write_input(tmp_path / "in")
    spec_path = spec(tmp_path, pg_dsn)
    run(tmp_path, spec_path, kill_after=None)
    listed = list_checkpoints(tmp_path / "state").checkpoints
    assert listed[-1].step == FILES
    four = next(c for c in listed if c.step == 4)
    run(tmp_path, spec_path, None, "--from-checkpoint", four.uuid, "--max-steps", "1",
        "--no-final-checkpoint")  # fmt: skip
    assert {p.name for p in (tmp_path / "out-agg").iterdir()} == {
        f"step-{s:012d}.parquet" for s in range(1, 6)
    }
    assert list_checkpoints(tmp_path / "state").head == four.uuid
    run(tmp_path, spec_path, kill_after=None)
    assert_batch_result(tmp_path, spark, pg_dsn, bad)


@pytest.mark.full
def test_a_corrupt_newest_checkpoint_fails_at_once_or_falls_back(
    tmp_path: Path, spark: SparkSession, pg_dsn: str
) -> None:
    """Flipped bytes in a batch file only the newest checkpoint references: a run fails at
    once (exit 5) with one line naming the file and the newest intact checkpoint, instead
    of crashing on every restart; with checkpoint.on_corruption: fallback, it restores that
    checkpoint, redoes the steps after it, and the sinks still equal the batch result."""
    bad = write_input(tmp_path / "in")
    spec_path = spec(tmp_path, pg_dsn)
    run(tmp_path, spec_path, kill_after=None)
    state = tmp_path / "state"
    report = inspect_location(state)
    newest, previous = report.checkpoints[-1], report.checkpoints[-2]
    only = [f for f in report.batch_files if f.referenced_by == [newest.uuid]]
    assert only, "the newest checkpoint has files of its own"
    victim = state / only[0].name
    data = bytearray(victim.read_bytes())
    data[-8:] = bytes(b ^ 0xFF for b in data[-8:])
    victim.write_bytes(bytes(data))

    cmd = [sys.executable, "-m", "workers.runtime.driver", "run", str(spec_path), "--storage",
           str(state), "--stop-when-idle", "4"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 5, p.stderr[-2000:]
    (line,) = [x for x in p.stderr.splitlines() if x.startswith("state error:")]
    assert f"checkpoint {newest.uuid} (step {newest.step}) is corrupt" in line
    assert only[0].name in line and f"{previous.uuid} (step {previous.step})" in line

    doc = spec_path.read_text().replace(
        "checkpoint: {every_steps: 2}", "checkpoint: {every_steps: 2, on_corruption: fallback}"
    )
    spec_path.write_text(doc)
    run(tmp_path, spec_path, kill_after=None)
    events = [json.loads(x) for x in (state / "metrics.jsonl").read_text().splitlines()]
    (skipped,) = [e for e in events if e.get("event") == "checkpoint_skipped"]
    assert (skipped["checkpoint"], skipped["restored"]) == (newest.uuid, previous.uuid)
    assert_batch_result(tmp_path, spark, pg_dsn, bad)


def assert_batch_result(tmp_path: Path, spark: SparkSession, pg_dsn: str, bad: int) -> None:
    """The sinks' integrated contents equal Spark batch queries over the whole input."""
    ref = (
        spark.read.schema("customer string, amount bigint, ts timestamp")
        .option("mode", "DROPMALFORMED")
        .json(str(tmp_path / "in"))
    )
    want_agg = Counter(
        (r["customer"], r["n"], r["total"])
        for r in ref.groupBy("customer")
        .agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
        .collect()
    )
    w = ref.groupBy(F.window("ts", "10 seconds")).agg(
        F.count("*").alias("n"), F.sum("amount").alias("total")
    )
    want_win = Counter(
        (r["window"]["start"].replace(tzinfo=None), r["n"], r["total"]) for r in w.collect()
    )

    agg = pytest.importorskip("pyarrow.parquet").read_table(str(tmp_path / "out-agg")).to_pylist()
    got_agg = integrate_files(agg, ["customer", "n", "total"])
    assert got_agg == want_agg
    with open_all(tmp_path / "out-win") as rows:
        got_win = integrate_files(rows, ["window_start", "n", "total"])
    got_win = Counter(
        {
            (dt.datetime.fromisoformat(str(k[0])).replace(tzinfo=None), k[1], k[2]): v
            for k, v in got_win.items()
        }
    )
    assert got_win == want_win
    with psycopg.connect(pg_dsn) as c:
        rows = c.execute(
            "SELECT customer, n, total, sum(weight) FROM per_customer "
            "GROUP BY customer, n, total HAVING sum(weight) <> 0"
        ).fetchall()
    assert Counter({(a, b, t): int(w) for a, b, t, w in rows}) == want_agg
    # Every step's change rows were written once: no step appears twice in the files.
    steps = [r[STEP] for r in agg]
    assert len(set(steps)) == len({p.name for p in (tmp_path / "out-agg").iterdir()})
    assert_dead_letters(tmp_path, bad)


def assert_dead_letters(tmp_path: Path, bad: int) -> None:
    """Each of write_input's `bad` malformed lines is a dead letter, once."""
    letters = [
        json.loads(x)
        for f in (tmp_path / "state" / "dead-letters").iterdir()
        for x in f.read_text().splitlines()
    ]
    assert len({(d["file"], d["line"]) for d in letters}) == bad
    assert all("oops" in d["record"] and d["reason"] for d in letters)


class open_all:
    """All JSON-lines rows of a sink directory."""

    def __init__(self, d: Path) -> None:
        self.d = d

    def __enter__(self) -> list[dict[str, Any]]:
        rows = []
        for f in sorted(self.d.iterdir()):
            rows += [json.loads(x) for x in f.read_text().splitlines()]
        return rows

    def __exit__(self, *exc: object) -> None:
        return None
