"""The driver's side of a hot standby: a driver process that has paid Spark's start-up in
advance and takes over a pipeline's storage location when told to.

    python -m workers.driver run SPEC --storage DIR --standby [other run options]

starts Spark, warms up (`warm_up`: the spec's query, once, on a scratch storage location and
without sinks, so the Python data source's workers, the parsing and the circuit's code paths
are loaded and compiled), then waits for one line on standard input (`Takeover`, JSON,
every field optional) and carries on as a `run` with it. End of input before that line means
"not needed": it exits with code 0 without having opened the storage location.

What a restart saves this way (`docs/benchmarks.md` § Pipeline): the interpreter's imports,
the JVM and Spark session, the first analysis, and most of the first micro-batch's cold work.
Kafka Streams' standby replicas and Flink's standby TaskManagers are the same trade: memory
for failover time.

A spare is the same for no pipeline in particular:

    python -m workers.driver spare

starts Spark, warms up on small built-in pipelines (`warm_up_spare`: a group and a window
aggregate over JSON, CSV and Parquet files, then a join, in a scratch directory), then waits
for one line (`SpareTakeover`: `{"argv": [...]}`, the arguments of a `run`) and becomes that
run, on its already started Spark. End of input first means not needed (exit 0). The control
plane keeps one per worker while it runs pipelines (`SPINDLE_SPARE_DRIVER`): any pipeline's
next driver skips Spark's start-up and most of its first micro-batch's cold work, for one idle
driver's memory per worker rather than one per pipeline. Spark names its application when it
starts, so a spare's stays `spindle:spare` whatever run it becomes; the run's streaming query
carries the pipeline's name (`spindle:<pipeline>:<pid>:...`).
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
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeVar

import numpy as np
import pyarrow as pa
import typer
from pyspark.sql import SparkSession

from pipeline_spec import model as S
from pipeline_spec.exits import EXIT_SPEC, EXIT_STOPPED
from storage_engine.input_log import InputLog

from .runner import Runner
from .session import spark_session

log = logging.getLogger("spindle.standby")
T = TypeVar("T")


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

    def wait(self, parse: Callable[[str, float], T]) -> T | None:
        """The takeover, `parse`d from the line and its arrival time (None: the input ended
        without one). Raises ValueError on a line that is not a takeover."""
        self.arrived.wait()
        return None if self._line is None else parse(self._line, self._at)


@dataclass(frozen=True)
class SpareTakeover:
    """The line that turns a spare into a run: the run's arguments, as `run` takes them."""

    at: float  # wall clock when it arrived
    argv: list[str]

    @classmethod
    def parse(cls, line: str, at: float) -> SpareTakeover:
        """`line` is a JSON object `{"argv": [...]}`: `run`'s arguments (a spec file, then
        options), without `--standby` (a spare takes over as a plain run)."""
        text = line.strip()
        try:
            fields = json.loads(text)
        except ValueError:
            fields = None
        argv = fields.get("argv") if isinstance(fields, dict) and set(fields) == {"argv"} else None
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError(f'not a spare\'s takeover ({{"argv": [...]}}): {text!r}')
        if "--standby" in argv:
            raise ValueError("a spare takes over as a run, not as a standby: --standby")
        return cls(at, list(argv))


def warm_up(spark: SparkSession, spec: S.PipelineSpec, until: threading.Event) -> float:
    """Run the spec's query once, to its second step, on a scratch storage location and
    without sinks (nothing outside the scratch directory is written; sources are read-only),
    so that the run taking over finds Spark's code paths warm. Stops early when `until` is
    set. Best effort: a failure is logged, never raised. Returns the seconds it took."""
    t0 = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="spindle-warm-up-")
    dry = spec.model_copy(update={"sinks": []})
    try:
        if isinstance(dry.source, S.LogSource):
            dry = dry.model_copy(update={"source": _seed_input_log(scratch, dry.source)})
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


_SEED_STEPS, _SEED_ROWS = 2, 64


def _seed_input_log(storage: str, source: S.LogSource) -> S.LogSource:
    """Records for a log pipeline's warm-up: two steps of zero-valued rows of the stream's
    schema in the scratch location's input log (otherwise empty: the warm-up would read
    nothing and the run's first step would read the log cold, slower than a spare's, as
    bench.spare shows). Returns the source reading
    them in two steps."""
    schema = source.arrow_schema()
    n = _SEED_STEPS * _SEED_ROWS
    table = pa.table(
        [
            pa.array(np.zeros(n, np.int32 if pa.types.is_date(f.type) else np.int64)).cast(f.type)
            for f in schema
        ],
        schema=schema,
    )
    InputLog(source.log_dir(storage), schema).append(table)
    return source.model_copy(update={"max_records_per_step": _SEED_ROWS})


def stand_by(spec: S.PipelineSpec) -> tuple[SparkSession, Takeover | None]:
    """`run --standby` up to the takeover: Spark started and warmed up on the spec's query,
    then the takeover line from standard input (None: the input ended first). A line that is
    not a takeover ends the process with EXIT_SPEC."""
    return _stand_by(
        "standby", f"spindle:{spec.name}", functools.partial(warm_up, spec=spec), Takeover.parse
    )


def stand_by_spare() -> tuple[SparkSession, SpareTakeover | None]:
    """`spare` up to the takeover: Spark started and warmed up on a built-in pipeline
    (`warm_up_spare`), then the takeover line from standard input (None: the input ended
    first). A line that is not a spare's takeover ends the process with EXIT_SPEC."""
    return _stand_by("spare", "spindle:spare", warm_up_spare, SpareTakeover.parse)


def _stand_by(
    role: str,
    app: str,
    warm: Callable[..., float],
    parse: Callable[[str, float], T],
) -> tuple[SparkSession, T | None]:
    listener = TakeoverListener(sys.stdin)
    spark = spark_session(app)
    took = warm(spark, until=listener.arrived)
    _preload_control_plane()
    pid = os.getpid()
    typer.echo(f"{role}: ready (pid {pid}, Spark started, warm-up {took:.1f} s); waiting")
    try:
        takeover = listener.wait(parse)
    except ValueError as e:
        typer.echo(f"{role}: {e}", err=True)
        raise typer.Exit(EXIT_SPEC) from None
    if takeover is not None:
        typer.echo(f"{role}: taking over: {json.dumps(vars(takeover))}")
    return spark, takeover


def _preload_control_plane() -> None:
    """Import what a run under the control plane imports (`workers.control`: its database
    and settings modules) before the takeover, which then does not wait for
    them: the control plane is what starts standbys and spares."""
    from . import control  # noqa: F401


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
    "Takeover",
    "TakeoverListener",
    "stand_by",
    "stand_by_spare",
    "warm_up",
    "warm_up_spare",
]
