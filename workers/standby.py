"""The driver's side of a hot standby: a driver process that has paid Spark's start-up in
advance and takes over a pipeline's storage location when told to.

    python -m workers.runner run SPEC --storage DIR --standby [other run options]

starts Spark, warms up (`warm_up`: the spec's query, once, on a scratch storage location and
without sinks, so the Python data source's workers, the parsing and the circuit's code paths
are loaded and compiled), then waits for one line on standard input (`Takeover`, JSON,
every field optional) and carries on as a `run` with it. End of input before that line means
"not needed": it exits with code 0 without having opened the storage location.

What a restart saves this way (`docs/benchmarks.md` § Pipeline): the interpreter's imports,
the JVM and Spark session, the first analysis, and most of the first micro-batch's cold work.
Kafka Streams' standby replicas and Flink's standby TaskManagers are the same trade: memory
for failover time.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import IO

import typer
from pyspark.sql import SparkSession

from . import spec as S
from .runner import EXIT_SPEC, EXIT_STOPPED, Runner, spark_session

log = logging.getLogger("spindle.standby")


@dataclass(frozen=True)
class Takeover:
    """The line that turns a standby into a run: where to start and, under the control
    plane, which run it is."""

    at: float  # wall clock when it arrived
    from_checkpoint: str | None = None
    run_id: int | None = None

    @classmethod
    def parse(cls, line: str, at: float) -> Takeover:
        """`line` is empty or a JSON object with optional `from_checkpoint` (latest, none or a
        uuid) and `run_id` (an integer)."""
        text = line.strip()
        fields = json.loads(text) if text else {}
        if not isinstance(fields, dict) or set(fields) - {"from_checkpoint", "run_id"}:
            raise ValueError(f"not a takeover (from_checkpoint, run_id): {text!r}")
        ck, run_id = fields.get("from_checkpoint"), fields.get("run_id")
        if ck is not None and not isinstance(ck, str):
            raise ValueError(f"from_checkpoint: a string, not {ck!r}")
        if run_id is not None and (not isinstance(run_id, int) or isinstance(run_id, bool)):
            raise ValueError(f"run_id: an integer, not {run_id!r}")
        return cls(at, ck, run_id)


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

    def wait(self) -> Takeover | None:
        """The takeover (None: the input ended without one). Raises ValueError on a line that
        is not a takeover."""
        self.arrived.wait()
        return None if self._line is None else Takeover.parse(self._line, self._at)


def warm_up(spark: SparkSession, spec: S.PipelineSpec, until: threading.Event) -> float:
    """Run the spec's query once, to its second step, on a scratch storage location and
    without sinks (nothing outside the scratch directory is written; sources are read-only),
    so that the run taking over finds Spark's code paths warm. Stops early when `until` is
    set. Best effort: a failure is logged, never raised. Returns the seconds it took."""
    t0 = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="spindle-warm-up-")
    dry = spec.model_copy(update={"sinks": []})
    try:
        runner = Runner(dry, scratch, spark=spark, from_checkpoint="none")
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
        log.warning("standby warm-up failed (the takeover will start cold): %s", e)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return time.monotonic() - t0


def stand_by(spec: S.PipelineSpec) -> tuple[SparkSession, Takeover | None]:
    """`run --standby` up to the takeover: Spark started and warmed up, then the takeover
    line from standard input (None: the input ended first). A line that is not a takeover
    ends the process with EXIT_SPEC."""
    listener = TakeoverListener(sys.stdin)
    spark = spark_session(f"spindle:{spec.name}")
    took = warm_up(spark, spec, until=listener.arrived)
    typer.echo(f"standby: ready (Spark started, warm-up {took:.1f} s); waiting to take over")
    try:
        takeover = listener.wait()
    except ValueError as e:
        typer.echo(f"standby: {e}", err=True)
        raise typer.Exit(EXIT_SPEC) from None
    if takeover is not None:
        typer.echo(f"standby: taking over: {json.dumps(takeover.__dict__)}")
    return spark, takeover


__all__ = ["Takeover", "TakeoverListener", "stand_by", "warm_up"]
