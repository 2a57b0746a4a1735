"""The Spark pipeline runner: a spec becomes a Structured Streaming query whose micro-batches
are steps of a circuit on the storage engine, with exactly-once output across restarts.

    python -m workers.driver run SPEC --storage DIR [--from-checkpoint latest|none|UUID]
                                      [--max-steps N] [--stop-when-idle SECONDS]

A run (DESIGN.md §5): restore checkpoint C of the storage location (latest by default) ->
roll every sink back to C's step -> start a Spark query with a fresh checkpointLocation whose
source starts at C's source offset -> each micro-batch is one step: Spark parses, filters,
projects and, where the operators reading the stream allow it, partially aggregates per group
(`PreAggregation`); the pruned delta reaches the circuit as Arrow; outputs go to the sinks
tagged with the step -> checkpoints by policy (every N steps and/or T seconds; asynchronous
by default), each recording the source offset its state reflects. A crash anywhere loses
nothing and duplicates nothing: the next run redoes the steps after C, which produce the same
outputs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from pipeline_spec import model as S
from pipeline_spec.exits import (
    EXIT_HUNG,
    HUNG_HEADING,
)
from storage_engine import StorageLocation
from storage_engine.commit import CommitHandle
from storage_engine.input_log import InputLog
from storage_engine.manifest import MANIFEST
from storage_engine.objstore import ObjectStoreLike

from .batch_jobs import BatchJobs, PreAggregate
from .durability import DurabilityWatch
from .file_batches import FileBatches
from .plan import Plan, arrow_schema, ddl, plan
from .pre_aggregation import JobTables, MicroBatch
from .progress import QueryProgress, ReadAhead
from .restore import open_state
from .session import Timeline, spark_session
from .sinks import FilesSink, PostgresSink, Sink, ViewSink
from .sources import (
    END,
    DatagenSource,
    FilesSource,
    LogSource,
    datagen_batches,
    list_input_files,
    log_batches,
)
from .watchdog import HangWatchdog

STARTUP_LIMIT_S = 600.0  # --stop-when-idle: a query's start-up longer than this fails the run
TAKEOVER_LOCK_WAIT_S = 30.0  # a standby taking over waits this long for the location's lock
# A query that fails outside a step is started again (from the run's offset) this many times
# in a row before the run fails: see Runner._run.
QUERY_RESTARTS = 2


MetricsSink = Callable[[dict[str, Any]], None]
log = logging.getLogger("spindle.runner")


# -- planning ------------------------------------------------------------------------------


# -- pre-aggregation -----------------------------------------------------------------------


# -- running -------------------------------------------------------------------------------


@dataclass
class RunResult:
    first_step: int
    last_step: int
    source_offset: int
    checkpoints: int


def restorable_from(remote: ObjectStoreLike, storage: str) -> bool:
    """True if `storage` has no checkpoints of its own but the object store has some."""
    if os.path.exists(os.path.join(storage, MANIFEST)):
        return False
    return bool(remote.list("manifests/"))


class Runner:
    def __init__(
        self,
        spec: S.PipelineSpec,
        storage: str,
        *,
        from_checkpoint: str = "latest",
        base_dir: str = ".",
        metrics_path: str | None = None,
        allow_state_drop: bool = False,
        spark: SparkSession | None = None,
        own_retention: bool = True,
        metrics_sinks: list[MetricsSink] | None = None,
        remote: ObjectStoreLike | None = None,
        timeline: Timeline | None = None,
        pre_aggregate: PreAggregate = "auto",
        files_roots: Sequence[str] | None = None,
    ) -> None:
        if files_roots:
            # Again as the run opens them: a path may have become a symlink leading out
            # since the spec was validated.
            errors = S.outside_roots(spec, [Path(r) for r in files_roots])
            if errors:
                raise S.SpecError(errors)
        self.spec = spec
        # Input files must resolve inside these too (os.pathsep-joined; "": anywhere).
        self._roots = os.pathsep.join(files_roots or [])
        self.timeline = tl = timeline or Timeline()
        self.spark = spark or spark_session(f"spindle:{spec.name}")
        tl.mark("spark_session")
        self.plan = plan(self.spark, spec)
        if self._roots and isinstance(spec.source, S.FilesSource):
            self.plan.spark_options["roots"] = self._roots
        tl.mark("plan")

        def opener(checkpoint: str, read_only: bool) -> StorageLocation:
            loc = StorageLocation.open(
                storage,
                fingerprint=self.plan.circuit.fingerprint,
                checkpoint=checkpoint,
                allow_state_drop=allow_state_drop,
                read_only=read_only,
                remote=None if read_only else remote,
                # On a machine without the local copy, restore from the object store.
                from_remote=not read_only
                and remote is not None
                and restorable_from(remote, storage),
            )
            try:
                self.plan.circuit.open(loc)
            except BaseException:
                loc.close()
                raise
            return loc

        fallback = spec.checkpoint.on_corruption == "fallback"
        self.loc, self.skipped = open_state(storage, from_checkpoint, opener, fallback)
        try:
            self.step = self.loc.step if self.loc.restored is not None else 0
            self.offset = int(self.loc.metadata.get("source_offset", 0)) if self.loc.restored else 0
            tl.mark("storage_restore")
            self.sinks = self._open_sinks(base_dir)
            for s in self.sinks.values():
                s.rollback(self.step)
        except BaseException:
            self.loc.close()
            raise
        self.first_step = self.step
        self.storage = storage
        self.metrics_path = metrics_path or os.path.join(storage, "metrics.jsonl")
        # Under the control plane its retention policy decides what is deleted (it knows
        # pins); standalone, the spec's keep_last does.
        self.own_retention = own_retention
        self._oldest_checkpoint: str | None = None  # as `_retention_ran` last saw it
        self.metrics_sinks: list[MetricsSink] = [self._metrics_file, *(metrics_sinks or [])]
        self._metrics_lock = threading.Lock()
        self.durability = DurabilityWatch(self._event, lambda: self.loc.remote)
        for skipped in self.skipped:
            self._metrics_file(
                {
                    "ts": time.time(),
                    "event": "checkpoint_skipped",
                    "checkpoint": skipped.uuid,
                    "step": skipped.step,
                    "reason": skipped.reason,
                    "restored": self.loc.restored.uuid if self.loc.restored else None,
                }
            )
        # Unique among the session's queries: Spark's progress events name their query.
        self._query_name = f"spindle:{spec.name}:{os.getpid()}:{id(self):x}"
        self.auto_commit_s: float | None = spec.checkpoint.every
        # Held while a step runs; commands from outside (commit, gc) take it between steps.
        self.step_lock = threading.RLock()
        self.paused = False
        self.exit_code: int | None = None
        self._draining = False
        self._gate = threading.Lock()  # makes "not draining, so busy" one step
        self._last_allowed_step: int | None = None  # `run(max_steps)`: no step beyond it
        self.dead_letters = os.path.join(storage, "dead-letters")
        self._rollback_dead_letters()
        src = spec.source
        self._files = (
            FileBatches(self.spark, src.format, ddl(self.plan.source_schema))
            if isinstance(src, S.FilesSource)
            else None
        )
        self.jobs = BatchJobs(spec, self.plan, self._files, pre_aggregate)
        tl.mark("sinks_rollback")
        # The first batch, read while the query starts (`_read_ahead`).
        self._ahead: ReadAhead | None = None
        self._reported = False
        self._last_commit = time.monotonic()
        self._since_commit = 0
        self._commits = 0
        self._last_step_at = time.monotonic()
        self._busy = False
        self.error: BaseException | None = None
        self._read_ahead()

    def _open_sinks(self, base_dir: str) -> dict[str, Sink]:
        out: dict[str, Sink] = {}
        schemas = {op.id: op.output_schema for op in self.plan.circuit.operators}
        for s in self.spec.sinks:
            schema = schemas[s.from_]
            if isinstance(s, S.FilesSink):
                out[s.name] = FilesSink(s, base_dir)
            elif isinstance(s, S.PostgresSink):
                out[s.name] = PostgresSink(s, schema, self.spec.name)
            else:
                out[s.name] = ViewSink(s, schema, self.loc)
        return out

    # -- one micro-batch = one step --

    def process(self, df: DataFrame, batch_id: int) -> None:
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
                # `df`, the source's rows, is never read: `_batch_rows` reads the same rows
                # without a Python worker.
                self._process(batch_id)
        except BaseException as e:
            self.error = e
            raise
        finally:
            self._busy = False
            self._last_step_at = time.monotonic()

    def _process(self, batch_id: int) -> None:
        t0 = time.perf_counter()
        if not self._reported:
            self.timeline.mark("first_batch")
        rows = self._batch_rows(batch_id)
        if rows is None:
            return
        self._step(self.jobs.micro_batch(rows), t0)

    def _first_step_ahead(self, ahead: ReadAhead) -> None:
        """The run's first step, from the batch read ahead (`_read_ahead`), before the query
        starts (`_run`): a restart's first output waits neither for the query's start-up
        nor for its first batch (Python workers for the source and its planning, the offset
        log: 2.5-3 s of bench.pipeline's recovery; 4-6 s with a log source, whose batches
        Python workers read), and the batch's Spark job does not compete with them for the
        machine. The step is a step like any other: it covers the files or records the
        read-ahead took, and its offset is their end."""
        with self.step_lock:
            t0 = time.perf_counter()
            table = ahead.result()
            self.timeline.mark("first_batch")
            if table is None:
                if self._files is None:
                    return  # the query reads the batch, and reports what fails
                self._files.read(ahead.paths, ahead.end)  # read again, and fail if it does
            self.jobs.ready = table
            self._step(self.jobs.micro_batch(ahead.rows()), t0)
        self._last_step_at = time.monotonic()

    def _step(self, batch: MicroBatch, t0: float) -> None:
        """One engine step over a micro-batch Spark computed (`t0`: when the batch began)."""
        if batch.end is None:
            return
        first = not self._reported
        end, oldest = batch.end, batch.oldest
        bad_rows = self._dead_letters(batch.bad)
        spark_ms = (time.perf_counter() - t0) * 1000
        if first:
            self.timeline.mark("spark_part")
        # A failed commit or upload is reported; fencing or commits failing in a row end
        # the run here, before the sinks are written again.
        self.durability.check()
        step = self.step + 1
        t1 = time.perf_counter()
        out = self.plan.circuit.step(batch.tables, batch.partials)
        for s in self.spec.sinks:
            self.sinks[s.name].write(step, out[s.from_])
        # End-to-end latency: the step's output is in every sink now; its oldest input
        # event happened at `oldest`. (Wall clock against event time: both UTC.)
        written_us = time.time_ns() // 1000
        latency_ms = None if oldest is None else (written_us - oldest) / 1000
        engine_ms = (time.perf_counter() - t1) * 1000
        self.step, self.offset = step, int(end)
        self.jobs.last_rows_in = batch.rows_in
        commit_ms = self._maybe_commit()
        if first:
            self.timeline.mark("engine_step")
        self._metrics(
            step,
            batch.rows_in,
            sum(o.num_rows for o in out.values()),
            bad_rows,
            spark_ms,
            engine_ms,
            commit_ms,
            (time.perf_counter() - t0) * 1000,
            latency_ms,
        )
        if first:
            self._report_started()

    def _report_started(self) -> None:
        """Once per run, after its first step: where the start-up went (see `Timeline`).
        Written to the metrics file only (a record without `step`; readers of steps skip it),
        not to the other metrics sinks."""
        self._reported = True
        tl = self.timeline
        tl.mark("metrics")
        rec = {
            "ts": time.time(),
            "event": "started",
            "pid": os.getpid(),  # the driver's: a spare's keeps its own command line
            "first_step": self.step,
            "restored": self.loc.restored.uuid if self.loc.restored is not None else None,
            "standby": tl.standby,
            "total_ms": tl.total_ms(),
            "phases_ms": tl.phases_ms(),
        }
        log.debug("run started: %s", rec)
        self._metrics_file(rec)

    def _batch_rows(self, batch_id: int) -> DataFrame | None:
        """The micro-batch's rows (None if it has none): a files source's files read by
        Spark (`FileBatches`), or a log or datagen source's rows read here, in the driver
        (`_driver_frame`). Which: those from this run's offset to the batch's end offset,
        read from the query's offset log (Spark writes it before the batch runs). The
        source's own rows are the same, but reading them is a Spark job through a Python
        worker: 190 ms a batch, measured with files."""
        src = self.spec.source
        end = self._batch_end(batch_id)
        if end <= self.offset:
            return None
        if not isinstance(src, S.FilesSource):
            return self._driver_frame(self.offset, end)
        assert self._files is not None
        listed = list_input_files(src.path, self._roots)
        paths = [os.path.join(src.path, n) for n in listed[self.offset : end]]
        self._files.read(paths, end)
        return self._files.rows()

    def _read_ahead(self) -> None:
        """Start reading the first batch (`BatchJobs.tables`) of a files or log source: a files
        source's files from the run's offset, as many as a step takes, or a log source's
        records, as many as a step takes of those in the log now (what the source's next
        offset would take). The run's first step is that batch (`_first_step_ahead`), and
        its query starts after it; files are immutable, and log records too, so the table
        is the batch's. A log's records are read here, in the driver, by the source's own
        function, and reach Spark as Arrow (`createDataFrame`): no Python worker."""
        src = self.spec.source
        if isinstance(src, S.LogSource):
            self._log_ahead(src)
            return
        if self._files is None:
            return
        assert isinstance(src, S.FilesSource)
        names = list_input_files(src.path, self._roots)[
            self.offset : self.offset + src.max_files_per_step
        ]
        if not names:
            return
        paths = [os.path.join(src.path, n) for n in names]
        end = self.offset + len(paths)
        files = self._files

        def job() -> tuple[bool, JobTables]:
            pre = self.jobs.pre_aggregation()
            files.read(paths, end)
            return pre is not None, self.jobs.tables(files.rows(), pre)

        self._ahead = ReadAhead(end, job, files.rows, paths)

    def _log_ahead(self, src: S.LogSource) -> None:
        """`_read_ahead` of a log source."""
        start = self.offset
        input_log = self.input_log()
        end = min(input_log.end(), start + src.max_records_per_step)
        if end <= start:
            return  # nothing to read: the query waits for records
        frame: list[DataFrame] = []

        def job() -> tuple[bool, JobTables]:
            pre = self.jobs.pre_aggregation()
            frame.append(self._driver_frame(start, end))
            return pre is not None, self.jobs.tables(frame[0], pre)

        self._ahead = ReadAhead(end, job, lambda: frame[0])

    def _driver_frame(self, start: int, end: int) -> DataFrame:
        """A log or datagen source's rows [start, end), as its reader gives them (the log's
        records, `log_batches`; generated rows, `datagen_batches`), made here in the driver
        and handed to Spark as Arrow: no Python worker."""
        if isinstance(self.spec.source, S.LogSource):
            batches = list(log_batches(self.input_log(), start, end))
        else:
            batches = list(datagen_batches(self.plan.spark_options, start, end, end))
        table = pa.Table.from_batches(batches, schema=batches[0].schema)
        schema = StructType([*self.plan.source_schema.fields, StructField(END, LongType())])
        return self.spark.createDataFrame(table, schema=schema)

    def _batch_end(self, batch_id: int) -> int:
        """A batch's end offset, from the last line of Spark's offset log entry of the
        batch (`v1`, the batch's metadata, then one line per source: its offset's JSON)."""
        path = os.path.join(self._spark_ck, "offsets", str(batch_id))
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        try:
            return int(json.loads(lines[-1])["offset"])
        except (IndexError, KeyError, TypeError, ValueError) as e:
            raise RuntimeError(f"{path}: not a Spark offset log entry of one source") from e

    def _rollback_dead_letters(self) -> None:
        if not os.path.isdir(self.dead_letters):
            return
        for n in os.listdir(self.dead_letters):
            if not n.startswith("step-") or int(n[5:17]) > self.step:
                os.remove(os.path.join(self.dead_letters, n))

    def _dead_letters(self, bad: pa.Table | None) -> int:
        if bad is None or bad.num_rows == 0:
            return 0
        rows = bad.select(["__file", "__lineno", "__line"]).to_pylist()
        files = self._files
        if files is not None:
            unnumbered = [r for r in rows if r["__lineno"] is None]
            found = files.bad_line_numbers([(r["__file"], r["__line"]) for r in unnumbered])
            for r, n in zip(unnumbered, found, strict=True):
                r["__lineno"] = n
            rows.sort(key=lambda r: (files.path_of(r["__file"]), r["__lineno"] or 0))
        src = self.spec.source
        kind = src.format if isinstance(src, S.FilesSource) else src.kind
        os.makedirs(self.dead_letters, exist_ok=True)
        path = os.path.join(self.dead_letters, f"step-{self.step + 1:012d}.jsonl")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            for r in rows:
                f.write(
                    json.dumps(
                        {
                            "file": self._files.path_of(r["__file"]) if self._files else None,
                            "line": r["__lineno"],
                            "record": r["__line"],
                            "reason": f"not parseable as {kind} with the source schema",
                        }
                    )
                    + "\n"
                )
        os.replace(path + ".tmp", path)
        return len(rows)

    def _maybe_commit(self) -> float:
        self._since_commit += 1
        pol = self.spec.checkpoint
        every = self.auto_commit_s
        due = (pol.every_steps is not None and self._since_commit >= pol.every_steps) or (
            every is not None and time.monotonic() - self._last_commit >= every
        )
        if not due:
            return 0.0
        return self.commit()

    @property
    def steps_since_checkpoint(self) -> int:
        return self._since_commit

    def commit(self, identifier: str | None = None, wait: bool = False) -> float:
        """Checkpoint the state after the current step; ms spent on the caller's thread."""
        t0 = time.perf_counter()
        self.checkpoint(identifier, wait or not self.spec.checkpoint.asynchronous)
        return (time.perf_counter() - t0) * 1000

    def checkpoint(self, identifier: str | None = None, wait: bool = True) -> str | None:
        """Take a checkpoint between steps; its uuid once locally durable if `wait`."""
        h, _ = self.checkpoint_async(identifier)
        return h.wait_local() if wait else None

    def checkpoint_async(self, identifier: str | None = None) -> tuple[CommitHandle, int]:
        """Request a checkpoint of the state between steps; its handle and step."""
        with self.step_lock:
            step = self.step
            # The checkpoint will say these steps' output is written: make it durable first.
            for sink in self.sinks.values():
                sink.sync()
            # Standalone, the spec's keep_last is applied by the commit thread once the
            # checkpoint is durable: a gc here would wait for the running commit.
            keep = self.spec.retention.keep_last if self.own_retention else None
            h = self.plan.circuit.commit_async(
                self.step,
                {"source_offset": self.offset, "pipeline": self.spec.name},
                identifier=identifier,
                keep_last=keep,
            )
            self.durability.track(h)
            self._since_commit = 0
            self._last_commit = time.monotonic()
            self._commits += 1
            if self.own_retention:
                self._retention_ran()
        return h, step

    def _retention_ran(self) -> None:
        """Standalone retention runs on the commit thread (`checkpoint_async`): once it
        has deleted the oldest checkpoint, the input log below the new oldest can go."""
        if not isinstance(self.spec.source, S.LogSource):
            return
        cps = self.loc.list_checkpoints()
        if not cps or cps[0].uuid == self._oldest_checkpoint:
            return
        self._oldest_checkpoint = cps[0].uuid
        self.checkpoints_deleted()

    def checkpoints_deleted(self) -> None:
        """After a gc: the input log is needed only from the oldest checkpoint a run may
        restore (or, with none left, from the live state's offset)."""
        if not isinstance(self.spec.source, S.LogSource):
            return
        cps = self.loc.list_checkpoints()
        offset = (
            int(self.loc.checkpoint_metadata(cps[0].uuid).get("source_offset", 0))
            if cps
            else self.offset
        )
        self.input_log().truncate_below(offset)

    def input_log(self) -> InputLog:
        src = self.spec.source
        assert isinstance(src, S.LogSource)
        return InputLog(src.log_dir(self.storage), arrow_schema(self.plan.source_schema))

    def _metrics(
        self,
        step: int,
        rows_in: int,
        rows_out: int,
        bad: int,
        spark_ms: float,
        engine_ms: float,
        commit_ms: float,
        step_ms: float,
        latency_ms: float | None = None,
    ) -> None:
        stats = [sp.stats() for sp in self.loc.spines()]
        rec = {
            "ts": time.time(),
            "step": step,
            "source_offset": self.offset,
            "rows_in": rows_in,
            "rows_out": rows_out,
            "dead_letters": bad,
            "spark_ms": round(spark_ms, 3),
            "engine_ms": round(engine_ms, 3),
            "commit_ms": round(commit_ms, 3),
            "step_ms": round(step_ms, 3),
            # max over the step's input rows that passed the filter of (sink writes done -
            # event time); None without an event-time column or an event time in the step
            "latency_ms": None if latency_ms is None else round(latency_ms, 3),
            "state_rows": sum(s.rows for s in stats),
            "state_bytes": sum(s.mem_bytes + s.file_bytes for s in stats),
            "spine_batches": sum(s.batches for s in stats),
            "merge_backlog": sum(s.merge_backlog for s in stats),
        }
        for sink in self.metrics_sinks:
            sink(rec)

    def _event(self, rec: dict[str, Any]) -> None:
        """Something a user must see (a durability failure): to every metrics sink."""
        for sink in self.metrics_sinks:
            sink(rec)

    def _metrics_file(self, rec: dict[str, Any]) -> None:
        # Spark's listener thread writes `batch` records while steps write theirs.
        with self._metrics_lock, open(self.metrics_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")

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
        src = self.spec.source
        source = {"datagen": DatagenSource, "files": FilesSource, "log": LogSource}[src.kind]
        # Registered here, not with the session: a session's first registration costs ~1 s
        # (Spark starts a Python worker to look for installed data sources), which a
        # files source's first step (`_first_step_ahead`) need not wait for.
        self.spark.dataSource.register(source)
        reader = self.spark.readStream.format(source.name()).option("start", str(self.offset))
        if isinstance(src, S.LogSource):
            reader = reader.option("path", src.log_dir(self.storage))
        for k, v in self.plan.spark_options.items():
            reader = reader.option(k, v)
        self._spark_ck = tempfile.mkdtemp(prefix="spindle-spark-ck-")
        return (
            reader.load()
            .writeStream.queryName(self._query_name)
            .foreachBatch(self.process)
            .option("checkpointLocation", self._spark_ck)
            .trigger(processingTime=f"{int(self.spec.trigger.interval * 1000)} milliseconds")
            .start()
        )

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
        durations = QueryProgress(self._batch_durations)
        durations.add(self.spark)
        watchdog = None
        if hang_timeout:
            watchdog = HangWatchdog(
                hang_timeout,
                lambda: self._last_step_at,
                lambda: self.step > self.first_step,
                self._input_waiting,
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

    def _input_waiting(self) -> bool:
        """Whether the source has input beyond the run's offset."""
        src = self.spec.source
        if isinstance(src, S.FilesSource):
            return len(list_input_files(src.path, self._roots)) > self.offset
        if isinstance(src, S.LogSource):
            return self.input_log().end() > self.offset
        return src.limit is None or self.offset < src.limit

    def _hung(self, why: str) -> None:
        """The query is stuck: say so and end the process as a crash would (the restart
        policy restarts it from the last checkpoint; a stuck step cannot be drained)."""
        log.error("%s", why)
        with contextlib.suppress(Exception):
            self._metrics_file({"ts": time.time(), "event": "hung", "message": why})
        print(f"{HUNG_HEADING} {why}", file=sys.stderr, flush=True)
        os._exit(EXIT_HUNG)

    def _batch_durations(self, progress: dict[str, Any]) -> None:
        """Spark's own account of each micro-batch of this run's query that ran a step: its
        durationMs (triggerExecution = the whole batch: offsets, planning, our
        foreachBatch, Spark's offset and commit logs), as a `batch` record in the metrics
        file. A step's `step_ms` is only the foreachBatch part; this is what Spark's own
        queries report as their batch time."""
        durations = progress.get("durationMs", {})
        # Triggers that found no input run no batch (no addBatch): not a step.
        if progress.get("name") != self._query_name or "addBatch" not in durations:
            return
        rec = {"ts": time.time(), "event": "batch", "batch_id": progress["batchId"]}
        self._metrics_file({**rec, "duration_ms": durations})

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
        return RunResult(self.first_step, self.step, self.offset, self._commits)

    def close(self) -> None:
        for s in self.sinks.values():
            s.close()
        if self._ahead is not None:
            self._ahead.wait()  # it uses the scratch directory removed below
        if self._files is not None:
            self._files.close()
        if self.own_retention and not self.loc.read_only:
            self.loc.wait_commits()  # the last commits, and the retention they ran
            self._retention_ran()
        self.loc.close()


# -- command line --------------------------------------------------------------------------


__all__ = ["Plan", "RunResult", "Runner", "plan", "spark_session"]
