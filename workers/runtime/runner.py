"""The Spark pipeline runner: a spec's run, whose Structured Streaming query's micro-batches
are steps of a dataflow on the storage engine, with exactly-once output across restarts.

A run (DESIGN.md §5): `run_builder.open_runner` restores checkpoint C of the storage location
(latest by default), rolls every sink and the dead letters back to C's step and hands what it
opened to a `Runner`, which only keeps it. The runner then takes steps: the first batch, read
ahead while the run opened; the steps after C that the offset log holds, redone with their
logged input; then a Spark query with a fresh checkpointLocation whose source starts at the
run's offsets, each micro-batch (`Runner.process`, Spark's foreachBatch) one step.

One step reads top to bottom in `Runner._step`:

1. each input table's rows from the run's offset to the batch's end: made in the driver as
   Arrow when Spark would only copy them (`BatchJobs.arrow_batch`), else Spark's part, one
   job (`StepInput.rows`, `BatchJobs.micro_batch`);
2. the step's offsets to the offset log (`OffsetLog.record`, durable), before anything else;
3. the durability check (`DurabilityWatch.check`);
4. the dataflow's step (partitioned: level 0's tasks read the tables they can, from the
   step's splits), its dead letters (`DeadLetters`), and its outputs to the sinks tagged
   with the step (`WrittenSteps`);
5. the commit policy (`Checkpointing.after_step`: every N steps and/or T seconds,
   asynchronous by default, each checkpoint recording the offsets its state reflects);
6. the step's metrics (`RunMetrics`).

A crash anywhere loses nothing and duplicates nothing: the next run redoes the steps after C,
with their logged input, which produce the same outputs. The command line is
`workers.runtime.driver`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from pipeline_spec import model as S
from pipeline_spec.exits import EXIT_HUNG, HUNG_HEADING
from pipeline_spec.offsets import Offset, advanced, count, total
from storage_engine import StorageLocation

from .batch_jobs import BatchJobs
from .checkpointing import Checkpointing
from .connectors.sink import Sink
from .connectors.source import Split
from .dead_letters import DeadLetters
from .durability import DurabilityWatch
from .micro_batch import MicroBatch
from .offset_log import OffsetLog
from .partitioned.reads import TableInput, is_spark_must_read
from .partitioned_run import PartitionedRun
from .plan import Plan
from .progress import QueryProgress, ReadAhead
from .restore import Skipped, state_report
from .run_metrics import RunMetrics, StepTimes
from .session import Timeline
from .sinks import WrittenSteps
from .sources import SOURCE
from .step_input import StepInput
from .step_query import batch_ends, start_query
from .watchdog import HangWatchdog

STARTUP_LIMIT_S = 600.0  # --stop-when-idle: a query's start-up longer than this fails the run
TAKEOVER_LOCK_WAIT_S = 30.0  # a spare taking over waits this long for the location's lock
# A query that fails outside a step is started again (from the run's offset) this many times
# in a row before the run fails: see Runner._run.
QUERY_RESTARTS = 2
# Every this many steps the offset log and the sinks drop what no restore can need.
OFFSET_LOG_TRIM_STEPS = 64

log = logging.getLogger("spindle.runner")


@dataclass
class RunResult:
    first_step: int
    last_step: int
    checkpoints: int
    source_offsets: dict[str, Offset]  # every input table's, as checkpoints hold them


@dataclass
class TableReader:
    """How a run reads one input table: into dataflow input `name`, by `input` and `jobs`."""

    name: str
    input: StepInput
    jobs: BatchJobs
    on_executors: TableInput | None = None  # how level 0's tasks read it (partitioned)


class Runner:
    """A pipeline's run, made by `run_builder.open_runner` (the one way to make one) of what
    it opened: the constructor only keeps its collaborators, so every file, connection and
    Spark job of the opening, and its failures, are the builder's. `close()` closes them.

    `step`: the run's last step (the restored one until it takes one); `offsets`: each input
    table's offset, where its next step starts; `replay`: the end offsets of the logged steps
    after `step` that the run redoes first (`OffsetLog.pending`); `first_in_driver`: every
    table's first step is read by the driver (no read-ahead); `ahead`: the first batch,
    being read while the run opened (`StepInput.read_ahead`)."""

    def __init__(
        self,
        spec: S.PipelineSpec,
        storage: str,
        *,
        timeline: Timeline,
        spark: SparkSession,
        plan: Plan,
        loc: StorageLocation,
        skipped: list[Skipped],
        step: int,
        offsets: dict[str, Offset],
        sinks: dict[str, Sink],
        written: WrittenSteps,
        metrics: RunMetrics,
        durability: DurabilityWatch,
        readers: dict[str, TableReader],
        step_lock: threading.RLock,
        checkpoints: Checkpointing,
        dead_letters: DeadLetters,
        offset_log: OffsetLog,
        replay: list[dict[str, Offset]],
        first_in_driver: bool,
        ahead: ReadAhead | None,
    ) -> None:
        self.spec, self.storage, self.timeline = spec, storage, timeline
        self.spark, self.plan = spark, plan
        self.loc, self.skipped = loc, skipped
        self.step = self.first_step = step
        self.offsets = offsets
        self.sinks, self.written = sinks, written
        self.metrics, self.durability = metrics, durability
        self._readers = readers
        self._table = spec.source.table
        self.input, self.jobs = readers[self._table].input, readers[self._table].jobs
        # Held while a step runs; commands from outside (commit, gc) take it between steps.
        self.step_lock = step_lock
        self.checkpoints = checkpoints
        self.dead_letters, self.offset_log = dead_letters, offset_log
        self._replay = replay
        self._first_in_driver = first_in_driver
        self._ahead = ahead
        # Unique among the session's queries: Spark's progress events name their query.
        self._query_name = f"spindle:{spec.name}:{os.getpid()}:{id(self):x}"
        self.paused = False
        self.exit_code: int | None = None
        self._draining = False
        self._gate = threading.Lock()  # makes "not draining, so busy" one step
        self._last_allowed_step: int | None = None  # `run(max_steps)`: no step beyond it
        self._reported = False
        self._last_step_at = time.monotonic()
        self._busy = False
        self.error: BaseException | None = None

    @property
    def offset(self) -> int:
        """`source`'s offset as one number (see `offsets` for every input table's)."""
        return total(self.offsets[self._table])

    def position(self) -> tuple[int, dict[str, Offset], dict[str, Any]]:
        """The run's step and offsets now, and what a checkpoint keeps of its sinks
        (`Checkpointing`'s position)."""
        return self.step, dict(self.offsets), {"sink_steps": dict(self.written.steps)}

    # -- one micro-batch = one step --

    def process(self, df: DataFrame, batch_id: int) -> None:
        """Spark's foreachBatch: micro-batch `batch_id` is the run's next step. `df`, the
        source's rows, is never read: `StepInput` reads the same rows without a Python
        worker."""
        with self._gate:
            if self._draining or self._max_steps_reached():
                # The query is being stopped (exit, pause, `max_steps` reached: the run's
                # loop notices within its poll, while the query may start another batch):
                # take no new step. Spark counts the batch as done, but the next query
                # starts from this run's own offset.
                return
            self._busy = True
        try:
            with self.step_lock:
                t0 = time.perf_counter()
                if not self._reported:
                    self.timeline.mark("first_batch")
                # The batch's end offsets, from the query's offset log (Spark writes it
                # before the batch runs).
                self._step(t0, batch_ends(self._spark_ck, batch_id, list(self._readers)))
        except BaseException as e:
            self.error = e
            raise
        finally:
            self._busy = False
            self._last_step_at = time.monotonic()

    def _step(
        self, t0: float, ends: dict[str, Offset], read: dict[str, MicroBatch] | None = None
    ) -> None:
        """One step: every input table from the run's offset to its end in `ends` (one
        missing from `ends` stays where it is), or the batches `read` already; `t0`: when
        the step began. No step if no table has a row."""
        # 1. The rows, per table: Arrow made in the driver when Spark would only copy them,
        # else Spark's part, one job computing every dataflow input of every row.
        batches = read
        # Tables level 0's tasks read on the executors (partitioned): their splits only.
        reads: dict[str, tuple[TableInput, list[Split]]] = {}
        if batches is None:
            batches = {}
            for t, r in self._readers.items():
                start, end = self.offsets[t], ends.get(t, self.offsets[t])
                if not advanced(start, end):
                    continue
                if r.on_executors is not None:
                    reads[t] = (r.on_executors, r.input.connector.splits(start, end))
                elif r.jobs.skips_spark() and (made := r.input.arrow(start, end)) is not None:
                    batches[t] = r.jobs.arrow_batch(*made)
                elif (rows := r.input.rows(count(start), count(end))) is not None:
                    batches[t] = r.jobs.micro_batch(rows)
        if not any(splits for _, splits in reads.values()) and all(
            b.end is None for b in batches.values()
        ):
            return
        first = not self._reported
        ends = {**self.offsets, **{t: ends[t] for t in [*batches, *reads]}}
        step = self.step + 1
        # 2. Same step, same input: its offsets are durable before any of its output is
        # written, unless it redoes a logged step with exactly that input. So is its
        # processing time (PROCTIME()): a step redone gives the same rows.
        now_us = time.time_ns() // 1000
        if self._replay and self._replay[0] == ends:
            self._replay.pop(0)
            proctime_us = self.offset_log.proctime(step)
            if proctime_us is None:  # an earlier release's entry: this redo's time, kept
                proctime_us = now_us
                self.offset_log.stamp(step, proctime_us)
        else:
            self._replay = []
            proctime_us = now_us
            spans = {t: (self.offsets[t], e) for t, e in ends.items()}
            self.offset_log.record(step, spans, proctime_us)
        if step % OFFSET_LOG_TRIM_STEPS == 0 and (cps := self.loc.list_checkpoints()):
            # No restore goes back beyond the oldest checkpoint: nor do the sinks' rollbacks.
            self.offset_log.truncate_through(cps[0].step)
            for sink in self.sinks.values():
                sink.forget_through(cps[0].step)
        # 3. Before the sinks are written again, a failed commit or upload is reported,
        # and fencing or commits failing in a row end the run.
        tables: dict[str, pa.Table] = {}
        for t, b in batches.items():
            name = self._readers[t].name
            tables.update({name if k == SOURCE else k: v for k, v in b.tables.items()})
        spark_ms = (time.perf_counter() - t0) * 1000
        if first:
            self.timeline.mark("spark_part")
        self.durability.check()
        # 4. The dataflow's step, its dead letters, its output to every sink.
        t1 = time.perf_counter()
        late_before = self.plan.dataflow.late_rows()
        out = self._dataflow_step(tables, reads, batches, ends, proctime_us)
        late_rows = self.plan.dataflow.late_rows() - late_before
        bad = {t: b.bad for t, b in batches.items()}
        bad_rows = self.dead_letters.write(step, bad, self.plan.dataflow.take_unmatched())
        self.written.write(self.spec, step, out)
        # End-to-end latency: the step's output is in every sink now; its oldest input
        # event happened at `oldest`. (Wall clock against event time: both UTC.)
        written_us = time.time_ns() // 1000
        times = [b.oldest for b in batches.values() if b.oldest is not None]
        oldest = min(times) if times else None
        latency_ms = None if oldest is None else (written_us - oldest) / 1000
        engine_ms = (time.perf_counter() - t1) * 1000
        self.step, self.offsets = step, ends
        rows_in = sum(b.rows_in for b in batches.values())
        # 5. The commit policy.
        commit_ms = self.checkpoints.after_step()
        if first:
            self.timeline.mark("engine_step")
        # 6. The step's metrics.
        step_ms = (time.perf_counter() - t0) * 1000
        self.metrics.step(
            step,
            (rows_in, sum(o.num_rows for o in out.values()), bad_rows, late_rows),
            StepTimes(spark_ms, engine_ms, commit_ms, step_ms, latency_ms),
            self.loc.spines(),
            self.plan.dataflow.operator_metrics(),
            {t: r.input.figures(self.offsets[t]) for t, r in self._readers.items()},
            self.written.figures(),
            self.plan.dataflow.memory(),
            self.durability.take_uploads(),
        )
        if first:
            self._report_started()

    def _dataflow_step(
        self,
        tables: dict[str, pa.Table],
        reads: dict[str, tuple[TableInput, list[Split]]],
        batches: dict[str, MicroBatch],
        ends: dict[str, Offset],
        proctime_us: int,
    ) -> dict[str, pa.Table]:
        """The dataflow's step on `tables`, and on `reads`, read by level 0's tasks: their
        figures join `batches`. A step with a split that only Spark's reader reads
        (`reads.SparkMustRead`) is read in the driver instead, as at parallelism 1."""
        if not reads:
            return self.plan.dataflow.step(tables, proctime_us)
        run = self.plan.dataflow
        assert isinstance(run, PartitionedRun)
        try:
            out, got = run.step_reading(tables, reads, proctime_us)
        except Exception as e:
            if not is_spark_must_read(e):
                raise
            log.info("tables %s: a split only Spark reads; read in the driver", sorted(reads))
            for t in reads:
                r = self._readers[t]
                start, end = self.offsets[t], ends[t]
                if (rows := r.input.rows(count(start), count(end))) is not None:
                    b = batches[t] = r.jobs.micro_batch(rows)
                    tables.update({r.name if k == SOURCE else k: v for k, v in b.tables.items()})
            return run.step(tables, proctime_us)
        batches.update(got)
        return out

    # -- steps before the query: the first batch read ahead, logged steps, driver reads --

    def _first_step_ahead(self, ahead: ReadAhead) -> None:
        """The run's first step, from the batch read ahead (`StepInput.read_ahead`), before
        the query starts (`_run`): a restart's first output waits neither for the query's
        start-up nor for its first batch (Python workers for the source and its planning,
        the offset log), and the batch's Spark job does not compete with them for the
        machine. The step is a step like any other: it covers the files or records the
        read-ahead took, and its offset is their end."""
        with self.step_lock:
            t0 = time.perf_counter()
            table = ahead.result()
            self.timeline.mark("first_batch")
            if table is None:
                if self.input.connector.batches is None:
                    return  # the query reads the batch, and reports what fails
                self.input.rows(self.offset, ahead.end)  # read again, and fail if it does
            self.jobs.ready = table
            batch = self.jobs.micro_batch(ahead.rows())
            self._step(t0, {self._table: ahead.end}, {self._table: batch})
        self._last_step_at = time.monotonic()

    def _replay_step(self) -> None:
        """Redo the next logged step (`_replay`) with its logged end offset, from the
        driver, before the query starts: a step redone after a crash reads exactly the input
        it read the first time."""
        if not self._driver_step(self._replay[0]):
            self._replay = []  # nothing to redo there: new input from here on

    def _driver_step(self, ends: dict[str, Offset]) -> bool:
        """A step to `ends`, read by the driver before the query starts; whether it was
        taken (no row, no step)."""
        with self.step_lock:
            t0 = time.perf_counter()
            if not self._reported:
                self.timeline.mark("first_batch")
            step = self.step
            self._step(t0, ends)
        self._last_step_at = time.monotonic()
        return self.step > step

    def _report_started(self) -> None:
        """Once per run, after its first step: where the start-up went (see `Timeline`).
        Written to the metrics file only, not to the other metrics sinks."""
        self._reported = True
        tl = self.timeline
        tl.mark("metrics")
        rec = {
            "ts": time.time(),
            "event": "started",
            "pid": os.getpid(),  # the driver's: a spare's keeps its own command line
            "first_step": self.step,
            "restored": self.loc.restored.uuid if self.loc.restored is not None else None,
            # Which operators kept their state, which started empty (a changed query, a fork).
            "state": dataclasses.asdict(state_report(self.loc, self.plan.dataflow)),
            "spare": tl.spare,
            "total_ms": tl.total_ms(),
            "phases_ms": tl.phases_ms(),
        }
        log.debug("run started: %s", rec)
        self.metrics.to_file(rec)

    # -- the query --

    def request_exit(self, code: int) -> None:
        """End the run after the current step (from a signal handler or the control loop)."""
        if self.exit_code is None:
            self.exit_code = code

    def _max_steps_reached(self) -> bool:
        last = self._last_allowed_step
        return last is not None and self.step >= last

    def drain(self, timeout_s: float = 120.0) -> None:
        """Let the step in flight finish before the query stops: stopping cancels its Spark
        jobs, which would fail the step (and the run) instead of ending it cleanly."""
        with self._gate:
            self._draining = True
        deadline = time.monotonic() + timeout_s
        while self._busy and time.monotonic() < deadline:
            time.sleep(0.02)

    def _query(self) -> Any:
        inputs = {t: r.input for t, r in self._readers.items()}
        q, self._spark_ck = start_query(
            self.spark,
            inputs,
            self.offsets,
            self._query_name,
            self.process,
            self.spec.trigger.interval,
        )
        return q

    def run(
        self,
        max_steps: int | None = None,
        stop_when_idle: float | None = None,
        hang_timeout: float | None = None,
    ) -> RunResult:
        """Process until `max_steps`, `stop_when_idle` seconds without a step, an error, or
        `request_exit`. While `paused` the query is stopped and the state stays open; it
        restarts from the current offset on resume. With `hang_timeout`, no step for that
        long while input waits ends the process (`_hung`)."""
        self._last_step_at = time.monotonic()
        self._last_allowed_step = None if max_steps is None else self.first_step + max_steps
        durations = QueryProgress(self.metrics.batch_durations(self._query_name))
        durations.add(self.spark)
        watchdog = None
        if hang_timeout:
            watchdog = HangWatchdog(
                hang_timeout,
                lambda: self._last_step_at,
                lambda: self.step > self.first_step,
                lambda: any(r.input.waiting(self.offsets[t]) for t, r in self._readers.items()),
                lambda: self.paused or self.exit_code is not None,
                self._hung,
                startup_s=STARTUP_LIMIT_S,
            )
            watchdog.start()
        try:
            return self._run(stop_when_idle)
        finally:
            if watchdog is not None:
                watchdog.stop()
            durations.remove(self.spark)

    def _hung(self, why: str) -> None:
        """The query is stuck: say so and end the process as a crash would (the restart
        policy restarts it from the last checkpoint; a stuck step cannot be drained)."""
        log.error("%s", why)
        with contextlib.suppress(Exception):
            self.metrics.to_file({"ts": time.time(), "event": "hung", "message": why})
        print(f"{HUNG_HEADING} {why}", file=sys.stderr, flush=True)
        os._exit(EXIT_HUNG)

    def _run(self, stop_when_idle: float | None) -> RunResult:
        failed = 0  # queries in a row that failed outside a step
        while self.exit_code is None:
            if self.paused:
                time.sleep(0.05)
                continue
            ahead, self._ahead = self._ahead, None
            if ahead is not None:
                self._first_step_ahead(ahead)
                if self._max_steps_reached():
                    break
                continue  # then the query, unless the run was told to exit or pause
            if self._replay:
                self._replay_step()
                if self._max_steps_reached():
                    break
                continue
            if self._first_in_driver:
                self._first_in_driver = False
                ends = [
                    (t, r.input.driver_step_end(self.offsets[t])) for t, r in self._readers.items()
                ]
                taken: dict[str, Offset] = {t: e for t, e in ends if e is not None}
                if taken:
                    self._driver_step(taken)
                    if self._max_steps_reached():
                        break
                    continue
            self._draining = False
            q = self._query()
            if not self._reported:
                self.timeline.mark("query_start")
            # Why the query ends, read when it does: a resume may come while it is stopping
            # (seconds), and must not turn a pause into the end of the run.
            pausing = False
            started_at = time.monotonic()
            up_at: float | None = None  # when the query's first trigger ended
            try:
                while q.isActive and self.exit_code is None and not self.paused:
                    if self.error is not None:
                        break
                    if self._max_steps_reached():
                        break
                    if stop_when_idle is not None and not self._busy:
                        # The query's start-up, up to its first trigger, is never idleness,
                        # however long a loaded machine makes it; one that does not end is
                        # a failure, not an idle end.
                        now = time.monotonic()
                        if up_at is None and q.lastProgress is not None:
                            up_at = now
                        if up_at is None and now - started_at > STARTUP_LIMIT_S:
                            raise RuntimeError(
                                f"the Spark query did not finish its first trigger within "
                                f"{STARTUP_LIMIT_S:.0f} s"
                            )
                        if up_at is not None and now - max(self._last_step_at, up_at) > (
                            stop_when_idle
                        ):
                            break
                    time.sleep(0.05)
                pausing = self.paused and self.exit_code is None and self.error is None
            finally:
                self.drain()
                q.stop()
                shutil.rmtree(self._spark_ck, ignore_errors=True)
            if self.error is not None:
                raise self.error
            error = q.exception()
            if error is not None:
                # Outside a step (a step's failure is `self.error`), e.g. a Python worker of
                # the source that did not connect back in time on a starved machine: the
                # state and offset are those of the last whole step, so a new query from
                # there is what a pause and resume do, without a new driver's start-up.
                failed += 1
                if failed > QUERY_RESTARTS:
                    raise RuntimeError(f"the Spark query failed: {error}")
                first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
                log.warning(
                    "the Spark query failed outside a step (%s); starting it again from "
                    "offset %d (%d of %d)",
                    first_line,
                    self.offset,
                    failed,
                    QUERY_RESTARTS,
                )
                time.sleep(failed)
                continue
            failed = 0
            if not pausing:
                break
        return RunResult(self.first_step, self.step, self.checkpoints.count, dict(self.offsets))

    def close(self) -> None:
        for s in self.sinks.values():
            s.close()
        if self._ahead is not None:
            self._ahead.wait()  # it uses the scratch directory removed below
        for r in self._readers.values():
            r.input.close()
        self.checkpoints.close()
        self.loc.close()


__all__ = ["RunResult", "Runner", "TableReader"]
