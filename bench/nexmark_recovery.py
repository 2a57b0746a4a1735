"""Recovery from a crash, for `bench.nexmark`: a Spindle run of a query over the benchmark's
events, its driver and JVM SIGKILLed in the middle, then started again on the same storage.

The first run checkpoints every `CHECKPOINT_STEPS` steps and writes the view to a `files`
sink; it is killed at a random moment (seeded) after step `KILL_AFTER_STEP` finished. The
second run restores the newest checkpoint, rolls the sink back to it and runs to the end of
the input. Figures: the step it was killed in, the step it restored, `first_step_s` (from
starting the second driver to the end of its first step, Spark's start-up included) and its
own start-up phases; `correct` compares both runs' output, integrated, with the oracle over
every event. The issue's target: `first_step_s` within Spark's start-up (its query started,
measured by the same benchmark) plus 2 s.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from oracles.nexmark import Rows

from . import nexmark_runs as runs
from .nexmark_queries import Query

QUERIES = ("q5", "q8")  # the issue's: a hopping-window join and a tumbling-window join
CHECKPOINT_STEPS = 3
KILL_AFTER_STEP = 4
KILL_WITHIN_S = 1.0  # the kill comes this long at most after step KILL_AFTER_STEP
WAIT_S = 600


def recovery(q: Query, events: Path, want: Rows, work: Path, seed: int = 1) -> dict[str, Any]:
    """Run `q` over `events`, kill it, run it again; its figures (see the module)."""
    work.mkdir(parents=True)
    out = work / "out"
    sink = {"kind": "files", "path": str(out)}
    spec, storage = runs.spindle_spec(q, events, work, sink, {"every_steps": CHECKPOINT_STEPS})
    cmd = [*runs.driver_command(spec, storage), "--stop-when-idle", "3"]
    with open(work / "driver-killed.log", "wb") as log:
        first = runs.started(cmd, log)
        try:
            _wait_for_step(first, storage, KILL_AFTER_STEP)
            time.sleep(random.Random(seed).uniform(0, KILL_WITHIN_S))
        finally:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    killed_in = 1 + max((r["step"] for r in _steps(storage)), default=0)
    t0 = time.time()
    runs.measured(cmd, work / "driver.log")
    again = [r for r in runs.metrics(storage) if r.get("event") == "started"][-1]
    got = runs.files_output(out)
    return {
        "killed_in_step": killed_in,
        "restored_step": again["first_step"] - 1,
        "first_step_s": again["ts"] - t0,
        "phases_ms": again["phases_ms"],
        "correct": got == want,
    }


def _steps(storage: Path) -> list[dict[str, Any]]:
    return [r for r in runs.metrics(storage) if "step" in r and "event" not in r]


def _wait_for_step(p: subprocess.Popen[bytes], storage: Path, step: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while not any(r["step"] >= step for r in _steps(storage)):
        if p.poll() is not None:
            raise runs.RunFailed(f"the run to kill ended first, exit {p.returncode}")
        if time.monotonic() > deadline:
            raise runs.RunFailed(f"no step {step} within {WAIT_S} s")
        time.sleep(0.05)


__all__ = ["QUERIES", "recovery"]
