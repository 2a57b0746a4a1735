"""A spare driver: a driver process that has paid Spark's start-up in advance, for no
pipeline in particular, and becomes some pipeline's run when told to.

    python -m workers.runtime.driver spare

starts Spark, warms up on small built-in pipelines (`warm_up_spare`: a group and a window
aggregate over JSON, CSV and Parquet files, then a join, in a scratch directory), then waits
for one line on standard input (`SpareTakeover`: `{"argv": [...], "env": {...}}`, the
arguments of a `run` and the environment it adds, such as the run's token) and becomes that
run, on its already started Spark. End of input first means not
needed (exit 0). The control plane keeps one per worker while it runs pipelines
(`SPINDLE_SPARE_DRIVER`, `workers/jobs/spares.py`): any pipeline's next driver skips Spark's
start-up and most of its first micro-batch's cold work, for one idle driver's memory per
worker. Spark names its application when it starts, so a spare's stays `spindle:spare`
whatever run it becomes; the run's streaming query carries the pipeline's name
(`spindle:<pipeline>:<pid>:...`).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import typer
from pyspark.sql import SparkSession

from pipeline_spec import model as S
from pipeline_spec.exits import EXIT_SPEC, EXIT_STOPPED

from .run_builder import open_runner
from .session import spark_session

log = logging.getLogger("spindle.spare")


class TakeoverListener:
    """Reads the takeover line on a thread from the start, so that one arriving during the
    warm-up cuts it short."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._line: str | None = None
        self._at = 0.0
        self.arrived = threading.Event()  # the line, or the end of input
        threading.Thread(target=self._read, name="spindle-takeover", daemon=True).start()

    def _read(self) -> None:
        try:
            line = self._stream.readline()
        except (OSError, ValueError):
            line = ""
        self._at = time.time()
        # readline() returns "" only at the end of input; a takeover line ends with "\n"
        self._line = line if line else None
        self.arrived.set()

    def wait(self) -> SpareTakeover | None:
        """The takeover (None: the input ended without one). Raises ValueError on a line
        that is not a takeover."""
        self.arrived.wait()
        return None if self._line is None else SpareTakeover.parse(self._line, self._at)


@dataclass(frozen=True)
class SpareTakeover:
    """The line that turns a spare into a run: the run's arguments, as `run` takes them,
    and the environment variables it adds (its token: never on a command line)."""

    at: float  # wall clock when it arrived
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, line: str, at: float) -> SpareTakeover:
        """`line` is a JSON object `{"argv": [...]}`, `run`'s arguments (a spec file, then
        options), with an optional `"env": {name: value}`."""
        text = line.strip()
        try:
            fields = json.loads(text)
        except ValueError:
            fields = None
        ok = isinstance(fields, dict) and {"argv"} <= set(fields) <= {"argv", "env"}
        argv = fields.get("argv") if ok else None
        env = fields.get("env", {}) if ok else None
        if (
            not isinstance(argv, list)
            or not argv
            or not all(isinstance(a, str) for a in argv)
            or not isinstance(env, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        ):
            raise ValueError(f'not a spare\'s takeover ({{"argv": [...]}}): {text!r}')
        return cls(at, list(argv), dict(env))


def warm_up(spark: SparkSession, spec: S.PipelineSpec, until: threading.Event) -> float:
    """Run the spec's query once, to its second step, on a scratch storage location and
    without sinks (nothing outside the scratch directory is written; sources are read-only),
    so that the run taking over finds Spark's code paths warm. Stops early when `until` is
    set. Best effort: a failure is logged, never raised. Returns the seconds it took."""
    t0 = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="spindle-warm-up-")
    dry = spec.model_copy(update={"sinks": []})
    try:
        runner = open_runner(dry, scratch, spark=spark, from_checkpoint="none")
        try:
            done = threading.Event()

            def _cut_short() -> None:
                while not done.is_set():
                    if until.wait(0.05):
                        runner.request_exit(EXIT_STOPPED)
                        return

            threading.Thread(target=_cut_short, name="spindle-warm-up", daemon=True).start()
            # Two steps: a files source's first is a batch read ahead, before the query
            # starts (`Runner._first_step_ahead`); the second warms the query's path. An
            # input with nothing (more) to read gives no step: the run then ends once its
            # query is idle (or after its start-up grace), or when `until` is set.
            runner.run(max_steps=2, stop_when_idle=0.1)
            done.set()
        finally:
            runner.close()
    except Exception as e:  # the run taking over reports real problems
        log.warning("spare warm-up failed (the takeover will start cold): %s", e)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return time.monotonic() - t0


def stand_by_spare(preload: Callable[[], None]) -> tuple[SparkSession, SpareTakeover | None]:
    """`spare` up to the takeover: Spark started and warmed up on built-in pipelines
    (`warm_up_spare`), what a run under the control plane imports loaded (`preload`: the
    control plane's implementation the driver will be given, so that the takeover does not
    wait for it), then the takeover line from standard input (None: the input ended
    first). A line that is not a spare's takeover ends the process with EXIT_SPEC."""
    listener = TakeoverListener(sys.stdin)
    spark = spark_session("spindle:spare")
    took = warm_up_spare(spark, until=listener.arrived)
    preload()
    pid = os.getpid()
    typer.echo(f"spare: ready (pid {pid}, Spark started, warm-up {took:.1f} s); waiting")
    try:
        takeover = listener.wait()
    except ValueError as e:
        typer.echo(f"spare: {e}", err=True)
        raise typer.Exit(EXIT_SPEC) from None
    if takeover is not None:
        # The environment's names only: its values include the run's token.
        shown = {"at": takeover.at, "argv": takeover.argv, "env": sorted(takeover.env)}
        typer.echo(f"spare: taking over: {json.dumps(shown)}")
    return spark, takeover


def warm_up_spare(spark: SparkSession, until: threading.Event) -> float:
    """`warm_up` on each of the spare's workloads in turn, their inputs in a scratch
    directory: the class-data archive's files workload (`spark_cds.files_spec`: a
    transform, a group and a window aggregate) over JSON lines, then over CSV, then over
    Parquet files, then its Nexmark join (`spark_cds.nexmark_join_spec`). The code paths
    most pipelines' first micro-batch needs (Spark's first job, each file reader, Arrow,
    the circuit's operators), with nothing outside scratch directories read or written.
    What each adds, per source kind: bench.spare. Stops at the takeover. Returns the
    seconds it took."""
    from .warm_up import files_spec, nexmark_join_spec

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="spindle-spare-") as scratch:
        work = Path(scratch)
        workloads: list[Callable[[], S.PipelineSpec]] = [
            functools.partial(files_spec, work, fmt) for fmt in ("json", "csv", "parquet")
        ]
        for make in [*workloads, nexmark_join_spec]:
            if until.is_set():
                break
            warm_up(spark, make(), until)
    return time.monotonic() - t0


__all__ = [
    "SpareTakeover",
    "TakeoverListener",
    "stand_by_spare",
    "warm_up",
    "warm_up_spare",
]
