"""A run's opening: `open_runner` opens everything a `Runner` works with, in order, and hands
it over; the runner's constructor only keeps it. It is the one way to make a runner (the
driver, a spare's warm-up, the class-data workload, the benchmarks and the tests all call it).

In order, each phase ending with its mark on the start-up timeline (`Timeline`): the spec's
paths checked against the roots again and the Spark session (`spark_session`); the spec
planned (`plan`); the storage location opened at the checkpoint asked for, its dataflow
restored (`storage_restore`); the sinks opened and rolled back to its step, the metrics, each
input table's source, the checkpointing, the dead letters rolled back (`sinks_rollback`);
then the offset log and the logged steps to redo, each table's first offset, and the first
batch read ahead.

A failure closes what was opened before it, the storage location last: nothing holds the
location's lock, a sink's connection or a table's consumer after a run that never started.
The Spark session stays: it is the process's (`getOrCreate`), which the driver stops.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from pipeline_spec import model as S
from pipeline_spec.offsets import Offset, count, total
from pipeline_spec.udf_source import inline as inline_udfs
from storage_engine import EngineSettings
from storage_engine.objstore import ObjectStoreLike

from .batch_jobs import BatchJobs
from .checkpointing import Checkpointing
from .dead_letters import DeadLetters
from .durability import DurabilityWatch
from .offset_log import OffsetLog
from .partitioned.reads import TableInput
from .partitioned_run import PartitionedRun
from .plan import Plan, plan
from .restore import open_circuit_state
from .run_metrics import MetricsSink, RunMetrics
from .runner import Runner, TableReader
from .session import Timeline, spark_session
from .sinks import WrittenSteps, open_sinks, steps_held_beyond
from .sources import SOURCE, table_input
from .step_input import StepInput

log = logging.getLogger("spindle.runner")


def open_runner(
    spec: S.PipelineSpec,
    storage: str,
    *,
    from_checkpoint: str = "latest",
    base_dir: str = ".",
    metrics_path: str | None = None,
    drop_state: Sequence[str] = (),
    spark: SparkSession | None = None,
    own_retention: bool = True,
    metrics_sinks: list[MetricsSink] | None = None,
    remote: ObjectStoreLike | None = None,
    timeline: Timeline | None = None,
    files_roots: Sequence[str] | None = None,
    object_roots: Sequence[str] | None = None,
) -> Runner:
    """The run of `spec` on the storage location `storage`, restored at `from_checkpoint`
    (latest, none, a uuid; operators in `drop_state` start empty), ready to `run`.
    `base_dir`: where relative sink paths start; `files_roots`, `object_roots`: where files
    and object-store paths must lie (checked again now); `spark`: the session to run on (by
    default the process's, started now); `own_retention`: apply the spec's retention (a
    standalone run's; the control plane's policy otherwise); `metrics_sinks`: where step
    records go besides `metrics_path` (default `<storage>/metrics.jsonl`); `remote`: the
    object store checkpoints are mirrored to; `timeline`: the start-up's (default: from
    now)."""
    if files_roots or object_roots:
        # Again as the run opens them: a path may have become a symlink leading out
        # since the spec was validated.
        local = [Path(r) for r in files_roots or [base_dir]]
        errors = S.outside_roots(spec, local, object_roots or ())
        if errors:
            raise S.SpecError(errors)
    # Input files must resolve inside these too (os.pathsep-joined; "": anywhere).
    roots = os.pathsep.join(files_roots or [])
    spec = inline_udfs(spec, [Path(r) for r in files_roots or [base_dir]])
    tl = timeline or Timeline()
    spark = spark or spark_session(f"spindle:{spec.name}")
    tl.mark("spark_session")
    planned = plan(spark, spec)
    tl.mark("plan")

    loc, skipped = open_circuit_state(
        storage,
        planned.dataflow,
        from_checkpoint,
        drop_state=drop_state,
        view_sinks={s.name: s.from_ for s in spec.sinks if s.kind == "view"},
        remote=remote,
        fallback=spec.checkpoint.on_corruption == "fallback",
        settings=EngineSettings(memory_budget_bytes=spec.engine.memory_budget),
    )
    with contextlib.ExitStack() as opened:
        _close_on_failure(opened, "the storage location", loc.close)
        step = loc.step if loc.restored is not None else 0
        restored = loc.metadata if loc.restored is not None else {}
        # Each input table's offset (`source`'s first): where its next step starts.
        offsets = spec.offsets(restored)
        tl.mark("storage_restore")
        sinks = open_sinks(spec, planned.dataflow, loc, base_dir)
        for name, sink in sinks.items():
            _close_on_failure(opened, f"sink {name}", sink.close)
        written = WrittenSteps(sinks, restored)
        for sink in sinks.values():
            sink.rollback(step)
        metrics = RunMetrics(metrics_path or os.path.join(storage, "metrics.jsonl"), metrics_sinks)
        durability = DurabilityWatch(metrics.event, lambda: loc.remote)
        for s in skipped:
            metrics.to_file(
                {
                    "ts": time.time(),
                    "event": "checkpoint_skipped",
                    "checkpoint": s.uuid,
                    "step": s.step,
                    "reason": s.reason,
                    "restored": loc.restored.uuid if loc.restored else None,
                }
            )
        # `source` first: into the dataflow's `source` input; then each further table.
        tables: dict[str, tuple[str, S.PipelineSpec, Plan]] = {
            spec.source.table: (SOURCE, spec, planned),
            **{t: (table_input(t), p.spec, p) for t, p in planned.tables.items()},
        }
        readers: dict[str, TableReader] = {}
        for t, (name, table_spec, table_plan) in tables.items():
            step_input = StepInput(spark, table_spec, table_plan, storage, roots)
            _close_on_failure(opened, f"table {t}", step_input.close)
            jobs = BatchJobs(table_spec, table_plan, step_input.connector)
            readers[t] = TableReader(name, step_input, jobs, _on_executors(planned, name, jobs))
        sources = {t: r.input.connector for t, r in readers.items()}
        step_lock = threading.RLock()

        # A checkpoint's position is the runner's, made last: nothing asks for it before
        # the runner exists (the first checkpoint comes after a step).
        def position() -> tuple[int, dict[str, Offset], dict[str, Any]]:
            return runner.position()

        checkpoints = Checkpointing(
            spec,
            planned.dataflow,
            loc,
            sinks,
            durability,
            step_lock,
            position,
            own_retention,
            {t: c.release_below for t, c in sources.items() if c.release_below is not None},
            {t: c.on_durable for t, c in sources.items() if c.on_durable is not None},
        )
        dead_letters = DeadLetters(storage, sources)
        dead_letters.rollback(step)
        tl.mark("sinks_rollback")

        # The steps after the restored one that a previous run logged (`OffsetLog`): each
        # is redone with its logged end offsets before the query takes new input.
        offset_log = OffsetLog(storage, store=remote, on_error=durability.offsets_not_uploaded)
        for t, r in readers.items():
            offsets[t] = r.input.first_offset(offsets[t])
        pending = offset_log.pending(step, offsets)
        replay = [{t: end for t, (_, end) in entry.items()} for entry in pending]
        redo = step + len(replay)
        for name, held in steps_held_beyond(sinks, redo).items():
            log.warning(
                "sink %s holds steps %d-%d, which this run cannot redo", name, redo + 1, held
            )
            metrics.to_file(
                {"ts": time.time(), "event": "sink_ahead", "sink": name, "held": held, "redo": redo}
            )
        # The first batch, read while the query starts: the run's first step
        # (`Runner._first_step_ahead`); with several input tables, the query reads the first.
        # Rows the driver reads (log sources', files the driver parses) need no read-ahead:
        # the driver reads them as its first step, every table's.
        first_in_driver = all(r.jobs.skips_spark() for r in readers.values())
        source = readers[spec.source.table]
        ahead = (
            None
            if planned.tables or first_in_driver
            else source.input.read_ahead(
                total(offsets[spec.source.table]),
                source.jobs.tables,
                count(replay[0][spec.source.table]) if replay else None,
            )
        )

        runner = Runner(
            spec,
            storage,
            timeline=tl,
            spark=spark,
            plan=planned,
            loc=loc,
            skipped=skipped,
            step=step,
            offsets=offsets,
            sinks=sinks,
            written=written,
            metrics=metrics,
            durability=durability,
            readers=readers,
            step_lock=step_lock,
            checkpoints=checkpoints,
            dead_letters=dead_letters,
            offset_log=offset_log,
            replay=replay,
            first_in_driver=first_in_driver,
            ahead=ahead,
        )
        opened.pop_all()  # the runner's now: `Runner.close` closes them
    return runner


def _on_executors(planned: Plan, name: str, jobs: BatchJobs) -> TableInput | None:
    """How level 0's tasks read the table on the executors: for a partitioned run, when
    the source reads its splits outside the driver and its rows go to the dataflow as
    read (`BatchJobs.skips_spark`)."""
    if not isinstance(planned.dataflow, PartitionedRun) or not jobs.skips_spark():
        return None
    reader = jobs.source.split_reader()
    return None if reader is None else TableInput(name, reader, jobs.shape)


def _close_on_failure(opened: contextlib.ExitStack, what: str, close: Callable[[], None]) -> None:
    """Close `what` if the opening fails; a close that fails too is logged, not raised, so
    that the run fails with why it could not open (its exit code depends on it)."""

    def closing() -> None:
        try:
            close()
        except Exception:
            log.warning("closing %s after a failed start failed", what, exc_info=True)

    opened.callback(closing)


__all__ = ["open_runner"]
