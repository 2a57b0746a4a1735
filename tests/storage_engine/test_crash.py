"""Crash injection with real processes: SIGKILL a writer at random moments, then recover.

Each chain is one storage location written by a sequence of child processes
(tests/storage_engine/crash_worker.py). Every child resumes from the latest checkpoint and is killed
with SIGKILL after a random delay: before its imports finish, during open/startup cleanup, or
in the middle of inserts, background merges, spills, commits, gc and deletes. After each kill
the parent copies the directory (so the next child still finds the debris and has to clean it
up itself, possibly crashing again while doing so) and checks the copy:

- it opens, and the latest checkpoint is at least the last commit the child acknowledged;
- the latest and every other retained checkpoint restore exactly the reference state of
  their step (recomputed from the deterministic generator);
- startup cleanup leaves no `*.mut`, no unreferenced batch file and no checkpoint directory
  that is not in the manifest.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import trials
from tests.storage_engine.crash_worker import Model, check_location

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().with_name("crash_worker.py")
TRIALS = trials(200, 20)
CHAINS = 8 if TRIALS >= 80 else 2
PARALLEL = 2


@dataclass
class ChainLog:
    seed: int
    kills: list[str] = field(default_factory=list)  # phase each kill landed in
    latest: list[int] = field(default_factory=list)
    retained: int = 0


def _kill_delay(rng: np.random.Generator) -> tuple[str | None, float]:
    """(the worker's line to wait for first, if any; delay before SIGKILL). Waiting for a
    line rather than guessing how long the worker takes to reach it keeps the share of kills
    in each phase the same on a loaded machine."""
    r = rng.random()
    if r < 0.08:
        return None, float(rng.uniform(0.0, 0.4))  # while starting the interpreter
    if r < 0.30:
        return "I", float(rng.uniform(0.0, 0.06))  # open: manifest read, cleanup, restore
    return "O", float(rng.uniform(0.0, 1.0))  # steady state: inserts, merges, commits, gc


def _run_child(loc: Path, seed: int, rng: np.random.Generator) -> tuple[list[str], str]:
    wait_for, delay = _kill_delay(rng)
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(loc), str(seed)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    first = ""
    while wait_for is not None:  # "I": imports done, about to open; "O <step>": opened
        line = proc.stdout.readline()
        first += line
        if not line or line.startswith(wait_for):
            break
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, (
        f"worker (seed {seed}) exited with {proc.returncode} before it was killed:\n{err}"
    )
    return (first + out).splitlines(), err


def _phase(lines: list[str]) -> str:
    if not lines:
        return "startup"
    if not any(x.startswith("O ") for x in lines):
        return "open"
    return "running"


def _run_chain(base: Path, seed: int, n: int) -> ChainLog:
    rng = np.random.default_rng([seed, 99])
    loc = base / f"loc-{seed}"
    scratch = base / f"check-{seed}"
    model = Model(seed)
    log = ChainLog(seed)
    acked = 0
    for _ in range(n):
        lines, _err = _run_child(loc, seed, rng)
        log.kills.append(_phase(lines))
        for ln in lines:
            if ln.startswith("C "):
                acked = max(acked, int(ln.split()[1]))
        if not loc.exists():
            continue  # killed before it created the directory
        if scratch.exists():
            shutil.rmtree(scratch)
        shutil.copytree(loc, scratch, ignore=shutil.ignore_patterns("LOCK"))
        try:
            latest, steps = check_location(str(scratch), model, min_latest=acked)
        except AssertionError as e:
            raise AssertionError(f"chain seed {seed}, after kill #{len(log.kills)}: {e}") from e
        acked = max(acked, latest)  # a newer checkpoint than acknowledged is fine, now durable
        log.latest.append(latest)
        log.retained += len(steps)
        if steps:
            model.forget_below(steps[0])
    return log


@pytest.mark.slow
def test_sigkill_at_random_points_recovers_last_commit(tmp_path: Path) -> None:
    per_chain = [TRIALS // CHAINS + (1 if i < TRIALS % CHAINS else 0) for i in range(CHAINS)]
    seeds = [1000 + i for i in range(CHAINS)]
    with ThreadPoolExecutor(PARALLEL) as pool:
        pairs = zip(seeds, per_chain, strict=True)
        jobs = [pool.submit(_run_chain, tmp_path, s, n) for s, n in pairs]
        logs = [j.result() for j in jobs]
    kills = [k for log in logs for k in log.kills]
    assert len(kills) == TRIALS
    # The kills must have exercised recovery, not just killed idle interpreters.
    assert kills.count("running") >= TRIALS // 2, kills
    assert kills.count("open") >= 1, kills
    assert max(max(log.latest, default=0) for log in logs) > 0, "no checkpoint ever survived"
    assert sum(log.retained for log in logs) > TRIALS, "too few checkpoints verified"
    for log in logs:
        # resumed chains make progress: the latest checkpoint never moves backwards
        assert log.latest == sorted(log.latest), (log.seed, log.latest)


KILL_SEED = 5
KILL_STEPS = 6  # seed 5 commits at steps 4 and 6 (checked below)


def _run_killed_at(loc: Path, n: int) -> tuple[int, list[str]]:
    env = {**os.environ, "SPINDLE_KILL_AT_OP": str(n)}
    proc = subprocess.run(
        [sys.executable, str(WORKER), str(loc), str(KILL_SEED), str(KILL_STEPS)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode in (0, -signal.SIGKILL), proc.stderr
    return proc.returncode, proc.stdout.splitlines()


def _kill_point(base: Path, n: int) -> str | None:
    loc = base / f"k{n}"
    rc, lines = _run_killed_at(loc, n)
    acked = max((int(ln.split()[1]) for ln in lines if ln.startswith("C ")), default=0)
    if not loc.exists():
        return None
    try:
        check_location(str(loc), Model(KILL_SEED), min_latest=acked)
    except Exception as e:
        return f"SIGKILL before mutating file call #{n} (rc {rc}): {type(e).__name__}: {e}"
    return None


@pytest.mark.slow
def test_sigkill_at_enumerated_file_operations_of_first_commits(tmp_path: Path) -> None:
    """Deterministic kill points: the worker SIGKILLs itself at its N-th mutating file call,
    for N spread over a fresh location's open, first two commits and gc."""
    rc, lines = _run_killed_at(tmp_path / "count", 10**9)
    commits = [ln.split() for ln in lines if ln.startswith("C ")]
    assert rc == 0 and [int(c[1]) for c in commits] == [4, 6], lines
    total = int(commits[-1][3])
    points = sorted({int(x) for x in np.linspace(1, total, trials(60, 10)).round()})
    if trials(1, 0):  # full profile: every call of the first commit's checkpoint/manifest
        points = sorted(set(points) | set(range(int(commits[0][3]) - 16, int(commits[0][3]) + 1)))
    with ThreadPoolExecutor(PARALLEL) as pool:
        failures = [f for f in pool.map(lambda n: _kill_point(tmp_path, n), points) if f]
    assert not failures, "\n".join(failures)
