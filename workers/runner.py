"""The Spark pipeline runner: a spec becomes a Structured Streaming query whose micro-batches
are steps of a circuit on the storage engine, with exactly-once output across restarts.

    python -m workers.runner run SPEC --storage DIR [--from-checkpoint latest|none|UUID]
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

import sys

if __name__ == "__main__" and sys.argv[1:2] in (["run"], ["spare"]):
    # A driver: its JVM starts while the modules below load (`driver_jvm`).
    from workers import driver_jvm as _early

    _early.launch(*_early.driver_options(None, None))

import contextlib
import json
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import tenacity
import typer
from pyspark.errors import AnalysisException
from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StructField, StructType

from pipeline_spec import expressions
from pipeline_spec import model as S
from pipeline_spec.exits import (
    EXIT_FENCED,
    EXIT_HUNG,
    EXIT_INTERRUPTED,
    EXIT_SPEC,
    EXIT_STATE,
    EXIT_STOPPED,
    FENCED_HEADING,
    HUNG_HEADING,
    STATE_ERROR_HEADING,
)
from storage_engine import StorageLocation
from storage_engine.circuit import (
    Aggregate,
    Circuit,
    Distinct,
    GroupAggregate,
    Join,
    Operator,
    PartialForm,
    WindowAggregate,
)
from storage_engine.commit import CommitHandle
from storage_engine.errors import CorruptionError, LockedError
from storage_engine.input_log import InputLog
from storage_engine.manifest import MANIFEST
from storage_engine.objstore import ObjectStoreLike, open_object_store
from storage_engine.remote import FencedError

from . import driver_jvm
from .durability import DurabilityWatch
from .file_batches import CORRUPT, FileBatches
from .restore import StateError, open_state
from .sinks import FilesSink, PostgresSink, Sink, ViewSink
from .sources import (
    END,
    DatagenSource,
    FilesSource,
    LogSource,
    arrow_schema_option,
    datagen_batches,
    list_input_files,
    log_batches,
)
from .watchdog import HangWatchdog

SOURCE = "source"
# See Runner._pre_aggregation.
PreAggregate = Literal["auto", "always", "never"]
PRE_AGGREGATE_MIN_ROWS = 100_000
STARTUP_LIMIT_S = 600.0  # --stop-when-idle: a query's start-up longer than this fails the run
TAKEOVER_LOCK_WAIT_S = 30.0  # a standby taking over waits this long for the location's lock
# A query that fails outside a step is started again (from the run's offset) this many times
# in a row before the run fails: see Runner._run.
QUERY_RESTARTS = 2


MetricsSink = Callable[[dict[str, Any]], None]
log = logging.getLogger("spindle.runner")


def process_start_time() -> float | None:
    """When this process started (wall clock, 10 ms resolution; Linux), else None."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # started, since boot
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


class Timeline:
    """Wall-clock marks of a run's start-up, in order: what a restart spends where. Reported
    once, after the run's first step, as `{"event": "started", "phases_ms": {...}}` in
    metrics.jsonl (each phase: ms since the previous mark) and on the debug log."""

    def __init__(self, start: float | None = None, standby: bool = False) -> None:
        self.marks: list[tuple[str, float]] = [("start", start or time.time())]
        # A standby's run: its timeline starts at the takeover, Spark already started.
        self.standby = standby

    def mark(self, name: str) -> None:
        """The first time `name` is reached (a mark reached again, e.g. a query restarted
        after a pause before the first step, keeps its first time)."""
        if all(n != name for n, _ in self.marks):
            self.marks.append((name, time.time()))

    def phases_ms(self) -> dict[str, float]:
        return {
            name: round((t - self.marks[i][1]) * 1000, 1)
            for i, (name, t) in enumerate(self.marks[1:])
        }

    def total_ms(self) -> float:
        return round((self.marks[-1][1] - self.marks[0][1]) * 1000, 1)


_CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager"
)


def spark_session(
    app: str = "spindle", java_options: str | None = None, class_path: str | None = None
) -> SparkSession:
    """A Spark session for pipelines: master from SPINDLE_SPARK_MASTER (default local[2]),
    Python workers on this interpreter, UTC, no UI; its JVM maps the class-data archive when
    one is built (`spark_cds`). `java_options`: more options for the driver's JVM (instead
    of the archive's); `class_path`: jars first on its class path (instead of the archive's
    unsigned copies)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    java, first = driver_jvm.driver_options(java_options, class_path)
    driver_jvm.attach(java, first)  # the JVM `python -m workers.runner run` started early
    builder = SparkSession.builder
    if first:
        builder = builder.config("spark.driver.extraClassPath", first)
    try:
        spark = _build(builder, app, java)
    finally:
        driver_jvm.detach()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _build(builder: SparkSession.Builder, app: str, java_options: str) -> SparkSession:
    return (
        builder.appName(app)
        .master(os.environ.get("SPINDLE_SPARK_MASTER", "local[2]"))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        # Streaming queries write two small files per micro-batch (offset and commit logs).
        # The default manager goes through Hadoop's FileContext, whose rename asks for each
        # path's link status, which Hadoop's local file system answers by running `readlink`
        # (without Hadoop's native library, as with pip's pyspark): four process spawns from
        # the JVM per batch, 50-100 ms. The FileSystem-based manager renames with
        # File.renameTo (atomic on POSIX file systems).
        .config("spark.sql.streaming.checkpointFileManagerClass", _CHECKPOINT_FILE_MANAGER)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # PySpark's DataFrame debugging sends the Python call site of every DataFrame and
        # Column function to the JVM (to name it in error messages): about eight Py4J round
        # trips per call, ~190 ms of a step's planning. Spindle's errors name spec fields.
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        .getOrCreate()
    )


# -- planning ------------------------------------------------------------------------------


@dataclass
class Plan:
    """What a spec means for Spark and for the circuit, checked before anything runs."""

    spec: S.PipelineSpec
    source_schema: StructType  # columns after parsing, before the transform
    stream_schema: pa.Schema  # after the transform: the circuit's "source" input
    inputs: dict[str, tuple[str | None, list[str]]]  # circuit input -> (where, select)
    input_schemas: dict[str, pa.Schema]
    circuit: Circuit
    spark_options: dict[str, str] = field(default_factory=dict)
    # The stream column holding event times for the end-to-end latency metric, if any.
    event_time: str | None = None
    # How Spark pre-aggregates each micro-batch for the operators reading `source`; None:
    # they get its rows.
    pre_aggregation: PreAggregation | None = None


def source_schema(
    spark: SparkSession, source: S.DatagenSource | S.FilesSource | S.LogSource
) -> StructType:
    from .sources import CLICKS_SCHEMA, NEXMARK_SCHEMA

    if isinstance(source, S.DatagenSource):
        ddl = NEXMARK_SCHEMA if source.generator == "nexmark" else CLICKS_SCHEMA
    elif source.schema_:
        ddl = ", ".join(f"`{k}` {v}" for k, v in source.schema_.items())
    elif isinstance(source, S.FilesSource) and source.format == "parquet":
        raise S.SpecError([("source.schema", "give the schema of the parquet files")])
    else:
        raise S.SpecError([("source.schema", "required for json and csv files")])
    try:
        schema = StructType.fromDDL(ddl)
    except Exception as e:  # Spark's parser raises several kinds
        raise S.SpecError([("source.schema", f"not a valid schema: {_short(e)}")]) from None
    assert isinstance(schema, StructType)
    return StructType([f for f in schema.fields if f.name != END])


def _analyse(
    spark: SparkSession, schema: StructType, where: str | None, select: list[str], path: str
) -> StructType:
    # Again on Spark's own parse of each expression, before Spark analyses any of them: the
    # spec was checked at validation, but this is what runs (`pipeline_spec.expressions`).
    named = [(f"{path}.where", where)] if where else []
    parser = spark._jsparkSession.sessionState().sqlParser()
    for field_path, text in [*named, *((f"{path}.select.{i}", t) for i, t in enumerate(select))]:
        try:
            expressions.check_parsed(parser, text)
        except expressions.ExpressionError as e:
            raise S.SpecError([(field_path, str(e))]) from None
        except Exception as e:  # Spark's parser raises several kinds
            raise S.SpecError([(field_path, _short(e))]) from None
    df = _empty(spark, schema)
    try:
        if where:
            df = df.where(where)
    except AnalysisException as e:
        raise S.SpecError([(f"{path}.where", _short(e))]) from None
    except Exception as e:
        raise S.SpecError([(f"{path}.where", _short(e))]) from None
    try:
        return df.selectExpr(*select).schema
    except Exception as e:
        raise S.SpecError([(f"{path}.select", _short(e))]) from None


def _empty(spark: SparkSession, schema: StructType) -> DataFrame:
    """An empty DataFrame of `schema`, for analysis only. Not `createDataFrame([], schema)`:
    that ships its (empty) rows through an RDD of pickled rows, a code path nothing else in
    a run takes, 0.2 s on a cold JVM. (Typed nulls are nullable columns: a schema with a
    NOT NULL column still takes that path, to keep its nullability.)"""
    if not all(f.nullable for f in schema.fields):
        return spark.createDataFrame([], schema)
    cols = [F.lit(None).cast(f.dataType).alias(f.name) for f in schema.fields]
    return spark.range(0).select(*cols)


def _short(e: Exception) -> str:
    return str(e).strip().splitlines()[0][:500]


def _ddl(schema: StructType) -> str:
    return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)


def _arrow(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema, timestamp_utc=True, prefers_large_types=False)


def plan(spark: SparkSession, spec: S.PipelineSpec) -> Plan:
    """Check every column reference against the source schema and build the circuit."""
    src = source_schema(spark, spec.source)
    t = spec.transform
    stream = _analyse(spark, src, t.where, t.select, "transform")
    stream_arrow = _arrow(stream)
    inputs: dict[str, tuple[str | None, list[str]]] = {}
    schemas: dict[str, pa.Schema] = {}
    ops: list[Operator] = []
    for i, op in enumerate(spec.state):
        where = f"state.{i}"
        try:
            ops.append(_operator(spark, op, stream, stream_arrow, inputs, schemas, where))
        except ValueError as e:  # CircuitError: a column or type problem
            if isinstance(e, S.SpecError):
                raise
            raise S.SpecError([(where, str(e))]) from None
    if any(SOURCE in o.inputs for o in ops):
        inputs[SOURCE] = (None, ["*"])
        schemas[SOURCE] = stream_arrow
    event_time = _event_time(spec, stream_arrow)
    opts: dict[str, str] = {}
    s = spec.source
    if isinstance(s, S.DatagenSource):
        opts = {
            "generator": s.generator,
            "seed": str(s.seed),
            "rows_per_second": str(s.rows_per_second),
            "max_rows_per_step": str(s.max_rows_per_step),
            "users": str(s.users),
            **({"limit": str(s.limit)} if s.limit else {}),
        }
    elif isinstance(s, S.FilesSource):
        opts = {"path": s.path, "max_files_per_step": str(s.max_files_per_step)}
    else:
        opts = {
            "stream": s.stream,
            "schema": _ddl(src),
            "arrow_schema": arrow_schema_option(_arrow(src)),
            "max_records_per_step": str(s.max_records_per_step),
        }
    circuit = Circuit(ops)
    lines = isinstance(s, S.FilesSource) and s.format != "parquet"
    pre = pre_aggregation(circuit, stream_arrow, event_time, lines)
    return Plan(spec, src, stream_arrow, inputs, schemas, circuit, opts, event_time, pre)


def _event_time(spec: S.PipelineSpec, stream: pa.Schema) -> str | None:
    """The transformed stream's event-time column: `transform.event_time` (checked: a column
    of the stream, a timestamp), else the first window aggregate's time column — except for
    datagen, whose `ts` is synthetic (2024-01-01 + i / rows_per_second, so that row i is a
    pure function of seed and i), not wall clock: no latency unless the spec names a column."""
    col = spec.transform.event_time
    if col is None:
        if isinstance(spec.source, S.DatagenSource):
            return None
        windows = [op for op in spec.state if isinstance(op, S.WindowAggregateOp)]
        if not windows:
            return None
        col = windows[0].time_column  # the window operator checked it is a timestamp
    path = "transform.event_time"
    if col not in stream.names:
        raise S.SpecError(
            [(path, f"{col!r} is not a column of the transformed stream {stream.names}")]
        )
    t = stream.field(col).type
    if not pa.types.is_timestamp(t):
        raise S.SpecError([(path, f"{col!r} is {t}, not a timestamp")])
    return col


def _min_event_us(column: pa.ChunkedArray | pa.Array) -> int | None:
    """The oldest event time in a timestamp column, as UTC microseconds (None if no value)."""
    t = column.type
    assert isinstance(t, pa.TimestampType)
    us = pc.cast(column, pa.timestamp("us", tz=t.tz)).cast(pa.int64())
    v = pc.min(us).as_py()
    return None if v is None else int(v)


def _aggs(specs: list[S.AggregateSpec]) -> list[Aggregate]:
    return [Aggregate(a.name, a.func, a.column) for a in specs]


def _operator(
    spark: SparkSession,
    op: Any,
    stream: StructType,
    stream_arrow: pa.Schema,
    inputs: dict[str, tuple[str | None, list[str]]],
    schemas: dict[str, pa.Schema],
    path: str,
) -> Operator:
    if isinstance(op, S.GroupAggregateOp):
        return GroupAggregate(op.name, stream_arrow, op.group_by, _aggs(op.aggregates))
    if isinstance(op, S.WindowAggregateOp):
        return WindowAggregate(
            op.name,
            stream_arrow,
            op.time_column,
            int(op.size * 1e6),
            _aggs(op.aggregates),
            op.group_by,
            int(op.slide * 1e6) if op.slide else None,
            int(op.lateness * 1e6),
        )
    if isinstance(op, S.DistinctOp):
        return Distinct(op.name, stream_arrow, op.columns)
    assert isinstance(op, S.JoinOp)
    sides = {}
    for side in ("left", "right"):
        sp: S.StreamSpec = getattr(op, side)
        schema = _arrow(_analyse(spark, stream, sp.where, sp.select, f"{path}.{side}"))
        name = f"{op.name}.{side}"
        inputs[name] = (sp.where, sp.select)
        schemas[name] = schema
        sides[side] = schema
    return Join(
        op.name,
        sides["left"],
        sides["right"],
        op.left_on,
        op.right_on,
        left=f"{op.name}.left",
        right=f"{op.name}.right",
    )


# -- pre-aggregation -----------------------------------------------------------------------


# Types whose equality and order Spark's GROUP BY / min / max share with Arrow's: Spark
# normalises floating-point grouping keys (-0.0 and 0.0 become one group, Arrow keeps two)
# and nested types are not comparable in Arrow, so those keep sending rows.
def _exact(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_decimal(t)
    )


def _orderable(t: pa.DataType) -> bool:
    return _exact(t) or pa.types.is_floating(t)


def pre_aggregation(
    circuit: Circuit, stream: pa.Schema, event_time: str | None, lines: bool
) -> PreAggregation | None:
    """Pre-aggregate in Spark when every operator reading `source` accepts it (joins read
    their own inputs) and its columns have types on which Spark and Arrow agree; a stream
    column named `__weight` would make the circuit read weights, so the input would not be
    insert-only. Otherwise every such operator gets the rows, as before."""
    readers = [op for op in circuit.operators if SOURCE in op.inputs]
    names = stream.names
    if not readers or "__weight" in names or len(set(names)) != len(names):
        return None
    forms: dict[str, PartialForm] = {}
    for op in readers:
        form = op.partial_form()
        if form is None:
            return None
        if not all(_exact(stream.field(k).type) for k in form.keys):
            return None
        if not all(_orderable(stream.field(c).type) for c in form.ordered):
            return None
        if form.bucket is not None:
            t = stream.field(form.bucket[0]).type
            # Spark's unix_micros reads instants; a timestamp without zone would depend on
            # the session's zone.
            if not (isinstance(t, pa.TimestampType) and t.tz is not None):
                return None
        forms[op.id] = form
    return PreAggregation(forms, stream, event_time, lines)


# A step's Spark results as Arrow: the rows job's and the pre-aggregation's (None: not run).
JobTables = tuple[pa.Table | None, pa.Table | None]


@dataclass
class MicroBatch:
    """One micro-batch as the circuit gets it, with what the step's metrics need."""

    end: int | None  # the batch's end offset (None: an empty batch)
    rows_in: int  # rows fed to the circuit: parsed, passed the filter (and a side's)
    oldest: int | None  # their oldest event time (UTC microseconds), if known
    partials: dict[str, pa.Table]  # operator id -> its pre-aggregated delta
    bad: pa.Table | None  # dead letters: __file, __lineno, __line
    tables: dict[str, pa.Table] = field(default_factory=dict)  # circuit input -> rows


class PreAggregation:
    """Per-batch partial aggregation in Spark before the circuit.

    Source rows are insert-only (weight +1; no `__weight` column), so an operator reading
    `source` may get, instead of the rows, their per-group accumulators (its `PartialForm`):
    row count, non-null counts, sums, and for min/max only the batch's smallest and largest
    value per group — no later insert can make a value in between an extreme, and nothing is
    ever retracted (storage_engine/circuit/aggregate.py). Window aggregates are grouped by
    event-time slide bucket, a distinct by its columns.

    One Spark aggregation serves every such operator, the batch's dead letters, its end
    offset, `rows_in` and the oldest event time: one grouping set per distinct key list
    (`grouping_id()` tells them apart); the first set is also keyed by each bad row's file,
    line number and line, so bad rows come back one per group, with zero counts. Rows that
    are bad or filtered out are kept (every row carries `__end`) but with null keys and
    values, so they collapse into one group per set and count nowhere; groups with a zero
    count are dropped before the circuit.
    """

    def __init__(
        self,
        forms: Mapping[str, PartialForm],
        stream: pa.Schema,
        event_time: str | None,
        lines: bool,
    ) -> None:
        self.forms = dict(forms)
        self.keeps_extremes = any(f.ordered for f in self.forms.values())
        self.stream = stream
        self.event_time = event_time
        self.lines = lines
        idx = {n: i for i, n in enumerate(stream.names)}
        self._idx = idx
        sets: list[tuple[str, ...]] = []
        self._set_of: dict[str, int] = {}
        for op_id, f in self.forms.items():
            s = tuple(f"__k{idx[k]}" for k in f.keys)
            if f.bucket is not None:
                s += (self._bucket(f.bucket),)
            if s not in sets:
                sets.append(s)
            self._set_of[op_id] = sets.index(s)
        if lines:
            sets[0] += ("__bf", "__bl", "__bx")
        self.sets = sets
        self.keys = list(dict.fromkeys(k for s in sets for k in s))
        n = len(self.keys)
        # grouping_id(): bit n-1-i is set when key i is not in the row's grouping set.
        self._gids = [
            sum(1 << (n - 1 - i) for i, k in enumerate(self.keys) if k not in s) for s in sets
        ]
        self._columns: tuple[list[Column], list[Column]] | None = None

    def _bucket(self, bucket: tuple[str, int]) -> str:
        return f"__b{self._idx[bucket[0]]}_{bucket[1]}"

    def _spark_columns(self) -> tuple[list[Column], list[Column]]:
        """What the aggregation selects from the flagged batch, and its aggregates (built
        once: unresolved columns are reusable, and each costs a JVM call to make)."""
        if self._columns is not None:
            return self._columns
        g = F.col("__g")
        c = [F.col(f"`__c{i}`") for i in range(len(self.stream))]
        sel: dict[str, Column] = {}
        aggs: dict[str, Column] = {
            "__end": F.max(END),
            "__count": F.count_if(g),
        }
        for f in self.forms.values():
            for k in f.keys:
                i = self._idx[k]
                sel[f"__k{i}"] = F.when(g, c[i])
            if f.bucket is not None:
                i = self._idx[f.bucket[0]]
                us = F.unix_micros(c[i])
                sel[self._bucket(f.bucket)] = F.when(g, us - F.pmod(us, F.lit(f.bucket[1])))
                sel[f"__u{i}"] = F.when(g, us)
                aggs[f"__t{i}"] = F.max(f"__u{i}")
            for name in (*f.counted, *f.summed, *f.ordered):
                i = self._idx[name]
                sel[f"__v{i}"] = F.when(g, c[i])
            for name in f.counted:
                i = self._idx[name]
                aggs[f"__n{i}"] = F.count(f"__v{i}")
            for name in f.summed:
                i = self._idx[name]
                t = self.stream.field(name).type
                v = F.col(f"__v{i}")
                if not pa.types.is_decimal(t):  # Spark widens decimals' precision itself
                    v = v.cast("double" if pa.types.is_floating(t) else "bigint")
                aggs[f"__s{i}"] = F.sum(v)
            for name in f.ordered:
                i = self._idx[name]
                t = self.stream.field(name).type
                v = F.col(f"__v{i}")
                if pa.types.is_floating(t):
                    # Spark orders NaN above everything, Arrow's min/max skip it unless a
                    # group has nothing else: send the extremes without NaN, and whether
                    # there was one.
                    aggs[f"__nan{i}"] = F.bool_or(F.isnan(v))
                    v = F.nanvl(v, F.lit(None).cast("float" if t == pa.float32() else "double"))
                aggs[f"__min{i}"] = F.min(v)
                aggs[f"__max{i}"] = F.max(v)
        if self.event_time is not None:
            sel["__et"] = F.when(g, c[self._idx[self.event_time]])
            aggs["__oldest"] = F.min("__et")
        if self.lines:
            bad = F.col("__isbad")
            sel["__bf"] = F.when(bad, F.col("__file"))
            sel["__bl"] = F.when(bad, F.col("__lineno"))
            sel["__bx"] = F.when(bad, F.col("__line"))
            aggs["__nbad"] = F.count_if(bad)
        if len(self.sets) > 1:
            aggs["__gid"] = F.grouping_id()
        select = [g, F.col("__isbad"), F.col(END), *(e.alias(n) for n, e in sel.items())]
        self._columns = (select, [e.alias(n) for n, e in aggs.items()])
        return self._columns

    def dataframe(self, flagged: DataFrame) -> DataFrame:
        """The aggregation over a batch with the stream's columns as `__c<i>`, `__keep`
        (passed the filter), `__bad`, `__file`, `__lineno`, `__line` and the end offset."""
        select, aggs = self._spark_columns()
        x = flagged.select(
            "*",
            (~F.coalesce(F.col("__bad"), F.lit(False)) & F.col("__keep")).alias("__g"),
            F.coalesce(F.col("__bad"), F.lit(False)).alias("__isbad"),
        ).select(*select)
        if not self.keys:
            return x.agg(*aggs)
        if len(self.sets) == 1:
            return x.groupBy(*self.keys).agg(*aggs)
        return x.groupingSets([list(s) for s in self.sets], *self.keys).agg(*aggs)

    def split(self, tab: pa.Table) -> MicroBatch:
        """Spark's result as every operator's partial delta, dead letters and metrics."""
        ends = tab.column("__end") if tab.num_rows else pa.array([], pa.int64())
        end = pc.max(ends).as_py()
        if end is None:
            return MicroBatch(None, 0, None, {}, _no_dead_letters())
        oldest = None
        if self.event_time is not None:
            oldest = _min_event_us(tab.column("__oldest"))
        by_set = [
            tab if len(self.sets) == 1 else tab.filter(pc.equal(tab.column("__gid"), gid))
            for gid in self._gids
        ]
        rows_in = int(pc.sum(by_set[0].column("__count")).as_py() or 0)
        partials = {}
        for op_id, f in self.forms.items():
            t = by_set[self._set_of[op_id]]
            t = t.filter(pc.greater(t.column("__count"), 0))
            partials[op_id] = self._partial(t, f)
        bad = _no_dead_letters()
        if self.lines:
            b = by_set[0].filter(pc.greater(by_set[0].column("__nbad"), 0))
            n = b.column("__nbad").to_numpy(zero_copy_only=False)
            b = b.take(pa.array(np.repeat(np.arange(b.num_rows), n), pa.int64()))
            b = b.select(["__bf", "__bl", "__bx"]).rename_columns(bad.column_names)
            bad = b.cast(bad.schema).sort_by([("__file", "ascending"), ("__lineno", "ascending")])
        return MicroBatch(int(end), rows_in, oldest, partials, bad)

    def _partial(self, t: pa.Table, f: PartialForm) -> pa.Table:
        cols: dict[str, str] = {f"__k{self._idx[k]}": k for k in f.keys}
        if f.bucket is not None:
            cols[self._bucket(f.bucket)] = "__bucket"
            cols[f"__t{self._idx[f.bucket[0]]}"] = "__tmax"
        cols["__count"] = "__count"
        for prefix, names in (("n", f.counted), ("s", f.summed)):
            cols.update({f"__{prefix}{self._idx[c]}": f"__{prefix}_{c}" for c in names})
        for c in f.ordered:
            i = self._idx[c]
            cols.update({f"__min{i}": f"__min_{c}", f"__max{i}": f"__max_{c}"})
            if f"__nan_{c}" in f.schema.names:
                cols[f"__nan{i}"] = f"__nan_{c}"
        out = t.select(list(cols)).rename_columns(list(cols.values()))
        return out.select(f.schema.names).cast(f.schema)


def _no_dead_letters() -> pa.Table:
    return pa.schema(
        [("__file", pa.string()), ("__lineno", pa.int64()), ("__line", pa.string())]
    ).empty_table()


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
            FileBatches(self.spark, src.format, _ddl(self.plan.source_schema))
            if isinstance(src, S.FilesSource)
            else None
        )
        # pre-aggregated? -> a files batch's jobs (`_jobs_of`)
        self._jobs: dict[bool, tuple[DataFrame | None, DataFrame | None]] = {}
        tl.mark("sinks_rollback")
        # The first batch, read while the query starts (`_read_ahead`).
        self._ahead: _ReadAhead | None = None
        self._ahead_table: tuple[bool, JobTables] | None = None
        self._reported = False
        self.pre_aggregate = pre_aggregate
        self._last_rows_in = 0
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
        self._step(self._one_job(rows), t0)

    def _first_step_ahead(self, ahead: _ReadAhead) -> None:
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
            self._ahead_table = table
            self._step(self._one_job(ahead.rows()), t0)
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
        self._last_rows_in = batch.rows_in
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
        """Start reading the first batch (`_one_job`'s tables) of a files or log source: a files
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
            pre = self._pre_aggregation()
            files.read(paths, end)
            return pre is not None, self._job_tables(files.rows(), pre)

        self._ahead = _ReadAhead(end, job, files.rows, paths)

    def _log_ahead(self, src: S.LogSource) -> None:
        """`_read_ahead` of a log source."""
        start = self.offset
        input_log = self.input_log()
        end = min(input_log.end(), start + src.max_records_per_step)
        if end <= start:
            return  # nothing to read: the query waits for records
        frame: list[DataFrame] = []

        def job() -> tuple[bool, JobTables]:
            pre = self._pre_aggregation()
            frame.append(self._driver_frame(start, end))
            return pre is not None, self._job_tables(frame[0], pre)

        self._ahead = _ReadAhead(end, job, lambda: frame[0])

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

    def _pre_aggregation(self) -> PreAggregation | None:
        """This step's pre-aggregation, if the plan has one and the policy takes it: always,
        never, or `auto` — when an operator keeps min/max (its value multisets then grow by
        at most two values per group and step, not by every value), or when the previous
        step had at least PRE_AGGREGATE_MIN_ROWS rows. Below that, Spark's aggregation
        costs more than it saves: measured on 10 000-row steps (20 000 or 100 customers),
        +45-150 ms per step, all in Spark, for no measurable engine saving. Either path
        continues from the other's state, so the choice is free at every step."""
        pre = self.plan.pre_aggregation
        if pre is None or self.pre_aggregate == "never":
            return None
        if self.pre_aggregate == "always" or pre.keeps_extremes:
            return pre
        return pre if self._last_rows_in >= PRE_AGGREGATE_MIN_ROWS else None

    def _one_job(self, df: DataFrame) -> MicroBatch:
        """A step's Spark work, in as few jobs as the plan allows: one computes every
        row-level circuit input of every row (the transformed stream and each join side,
        `_jobs_of`), the dead letters and the end offset; the stream's pre-aggregation, when
        taken (`_pre_aggregation`), is a second one. Then the Arrow results are split into
        the circuit's inputs (`_split`). (Arrow, not collect(): row pickling has overflowed
        the stream thread's stack.)"""
        pre = self._pre_aggregation()
        ready, self._ahead_table = self._ahead_table, None
        if ready is not None and ready[0] == (pre is not None):
            return self._split(ready[1], pre)
        return self._split(self._job_tables(df, pre), pre)

    def _job_tables(self, df: DataFrame, pre: PreAggregation | None) -> JobTables:
        rows, agg = self._jobs_of(df, pre)
        return (
            None if rows is None else rows.toArrow(),
            None if agg is None else agg.toArrow(),
        )

    def _row_inputs(self, pre: PreAggregation | None) -> list[str]:
        """The circuit inputs the rows job gives (all but a pre-aggregated stream)."""
        return [n for n in self.plan.inputs if n != SOURCE or pre is None]

    def _jobs_of(
        self, df: DataFrame, pre: PreAggregation | None
    ) -> tuple[DataFrame | None, DataFrame | None]:
        """The rows job and the pre-aggregation job (None: not needed). A files source's
        are built once per path (with or without pre-aggregation) and planned anew for
        each batch (`FileBatches`)."""
        jobs = self._jobs.get(pre is not None) if self._files is not None else None
        if jobs is None:
            jobs = self._build_jobs(df, pre)
            if self._files is not None:
                self._jobs[pre is not None] = jobs
        rows, agg = jobs
        return (
            None if rows is None else rows.select("*"),
            None if agg is None else agg.select("*"),
        )

    def _build_jobs(
        self, df: DataFrame, pre: PreAggregation | None
    ) -> tuple[DataFrame | None, DataFrame | None]:
        t = self.spec.transform
        names = [f"`{f.name}`" for f in self.plan.source_schema.fields]
        select = [x for e in t.select for x in (names if e.strip() == "*" else [e])]
        keep = f"coalesce(({t.where}), false)" if t.where else "true"
        hidden = ["__keep", "__bad", "__file", "__lineno", "__line", END]
        stream_names = self.plan.stream_schema.names
        stream = self._flagged(df).selectExpr(*select, f"{keep} AS __keep", *hidden[1:])
        agg = None
        if pre is not None:
            agg = pre.dataframe(
                stream.toDF(*(f"__c{i}" for i in range(len(stream_names))), *hidden)
            )
        inputs = self._row_inputs(pre)
        if not inputs:
            return None, agg
        # Each input's columns in turn, a join side's preceded by its filter as a flag; the
        # expressions read the transformed stream's columns by name, as the spec writes them.
        stream = stream.toDF(*stream_names, *hidden)
        every = [f"`{n}`" for n in stream_names]
        cols: list[str] = []
        for name in inputs:
            where, sel = self.plan.inputs[name]
            if name != SOURCE:
                cols.append(f"coalesce(({where}), false)" if where else "true")
            cols += [x for e in sel for x in (every if e.strip() == "*" else [e])]
        et = self.plan.event_time
        if et is not None and SOURCE not in self.plan.inputs:
            cols.append(f"`{et}`")  # for the latency metric
        letters = ["__file", "__lineno", "__line"] if pre is None else []
        # Good rows' lines are not needed: shipping them took a third of a 200k-row step.
        rows = stream.selectExpr(
            *cols,
            "__keep",
            "__bad",
            *(f"CASE WHEN coalesce(__bad, false) THEN {c} END" for c in letters),
            END,
        )
        return rows.toDF(*(f"__x{i}" for i in range(len(cols))), *hidden[:2], *letters, END), agg

    def _split(self, tables: JobTables, pre: PreAggregation | None) -> MicroBatch:
        """The jobs' Arrow results as the circuit's inputs, dead letters and metrics."""
        rows, agg = tables
        batch = None if pre is None or agg is None else pre.split(agg)
        if rows is None:
            assert batch is not None
            return batch
        if rows.num_rows == 0:
            return batch or MicroBatch(None, 0, None, {}, None)
        bad = pc.fill_null(rows.column("__bad"), False)
        good = pc.and_(pc.invert(bad), pc.fill_null(rows.column("__keep"), False))
        inputs: dict[str, pa.Table] = {}
        k = 0
        for name in self._row_inputs(pre):
            schema = self.plan.input_schemas[name]
            mask = good
            if name != SOURCE:
                mask, k = pc.and_(good, rows.column(k)), k + 1
            part = rows.filter(mask).select(list(range(k, k + len(schema))))
            inputs[name] = part.rename_columns(schema.names).cast(schema)
            k += len(schema)
        rows_in = sum(x.num_rows for x in inputs.values())
        if batch is not None:  # its dead letters, end and oldest event cover the batch
            return MicroBatch(
                batch.end, batch.rows_in + rows_in, batch.oldest, batch.partials, batch.bad, inputs
            )
        et, oldest = self.plan.event_time, None
        if et is not None:
            times = inputs[SOURCE].column(et) if SOURCE in inputs else rows.filter(good).column(k)
            oldest = _min_event_us(times)
        end = pc.max(rows.column(END)).as_py()
        letters = rows.filter(bad).select(["__file", "__lineno", "__line"])
        return MicroBatch(int(end), rows_in, oldest, {}, letters, inputs)

    def _flagged(self, df: DataFrame) -> DataFrame:
        """The batch with the source's columns parsed, `__bad` marking unparseable rows, and
        `__file`, `__lineno`, `__line` for dead letters (nulls for sources without lines;
        JSON's line numbers are found later, for bad rows only: `FileBatches`). A JSON
        record is bad when Spark's JSON reader does not parse it: not an object (or an array
        of objects), malformed, or a present value that does not convert to its column's
        type (an empty string for a number included); a CSV line, if it has the wrong
        number of fields or a non-empty value does not convert."""
        src = self.spec.source
        fields = self.plan.source_schema.fields
        columns = [F.col(f"`{f.name}`") for f in fields]
        if not isinstance(src, S.FilesSource) or src.format == "parquet":
            return df.select(
                *columns,
                F.lit(False).alias("__bad"),
                F.lit(None).cast("string").alias("__file"),
                F.lit(None).cast("bigint").alias("__lineno"),
                F.lit(None).cast("string").alias("__line"),
                F.col(END),
            )
        if src.format == "json":
            return df.select(
                *columns,
                F.col(CORRUPT).isNotNull().alias("__bad"),
                "__file",
                F.lit(None).cast("bigint").alias("__lineno"),
                F.col(CORRUPT).alias("__line"),
                F.col(END),
            )
        line = F.col("__line")
        parsed = df.withColumn("__p", F.from_csv(line, _ddl(self.plan.source_schema)))
        raw = [F.get(F.split(line, ","), i) for i in range(len(fields))]  # NULL if short
        bad = F.size(F.split(line, ",")) != len(fields)
        for f, r in zip(fields, raw, strict=True):
            value = F.col(f"__p.`{f.name}`")
            present = r.isNotNull() & (F.lower(F.trim(r)) != "null") & (F.trim(r) != "")
            bad = bad | (present & value.isNull())
        bad = bad | F.col("__p").isNull()
        return parsed.select(
            *[F.col(f"__p.`{f.name}`").alias(f.name) for f in fields],
            bad.alias("__bad"),
            "__file",
            "__lineno",
            "__line",
            END,
        )

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
        return InputLog(src.log_dir(self.storage), _arrow(self.plan.source_schema))

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


class _ReadAhead:
    """A run's first batch (a files or log source's), computed by Spark in a thread of its
    own while the run starts: `job` gives (pre-aggregated?, the batch's Arrow table), and
    `rows` is then the batch's DataFrame (a files source's `paths`: the batch's files, to
    read again if the job failed). A cold JVM spends about a second on its first batch
    (class loading, JIT, code generation)."""

    def __init__(
        self,
        end: int,
        job: Callable[[], tuple[bool, JobTables]],
        rows: Callable[[], DataFrame],
        paths: list[str] | None = None,
    ) -> None:
        self.end, self.rows, self.paths = end, rows, paths or []
        self._out: tuple[bool, JobTables] | None = None
        self._thread = threading.Thread(
            target=self._run, args=(job,), name="spindle-read-ahead", daemon=True
        )
        self._thread.start()

    def _run(self, job: Callable[[], tuple[bool, JobTables]]) -> None:
        try:
            self._out = job()
        except Exception as e:  # the batch itself will read again and report the error
            log.debug("reading the first batch ahead failed: %s", e)

    def wait(self) -> None:
        self._thread.join()

    def result(self) -> tuple[bool, JobTables] | None:
        """The batch read ahead (None if the read failed), once the read has ended."""
        self.wait()
        return self._out


class QueryProgress:
    """A listener that calls `on_progress` with each progress event of a session's streaming
    queries, as Spark's JSON (a dict: `name`, `batchId`, `numInputRows`, `durationMs`, ...),
    on Spark's listener thread. `add(spark)`, then `remove(spark)`.

    It implements Spark's `PythonStreamingQueryListener` itself, through Py4J, instead of
    subclassing PySpark's `StreamingQueryListener`, whose wrapper converts every event field
    by field (each field, map entry and source a Py4J round trip: ~50 per micro-batch, run
    while the next micro-batch runs, competing with it for the driver's GIL and the JVM).
    Here an event costs one round trip: the progress as JSON."""

    def __init__(self, on_progress: Callable[[dict[str, Any]], None]) -> None:
        self._on_progress = on_progress
        self._jlistener: Any = None

    def add(self, spark: SparkSession) -> None:
        gateway = spark.sparkContext._gateway
        assert gateway is not None
        ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
        streaming = gateway.jvm.org.apache.spark.sql.streaming
        self._jlistener = streaming.PythonStreamingQueryListenerWrapper(self)
        spark._jsparkSession.streams().addListener(self._jlistener)

    def remove(self, spark: SparkSession) -> None:
        spark._jsparkSession.streams().removeListener(self._jlistener)

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        self._on_progress(json.loads(jevent.progress().json()))

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


# -- command line --------------------------------------------------------------------------

app = typer.Typer(help="Run a Spindle pipeline on Spark (standalone).", no_args_is_help=True)


@app.callback()
def _commands() -> None:
    """Subcommands: run, spare."""


# A spare's Spark session and when its takeover arrived, for the `run` it turns into.
_SPARE: tuple[SparkSession, float] | None = None


@app.command("spare")
def spare_cmd() -> None:
    """A spare driver: start Spark and warm up on a built-in pipeline, then wait for one line
    on standard input, {"argv": [...]}, the arguments of a `run`, and become that run on the
    Spark already started; exit 0 if the input ends first (workers/standby.py)."""
    global _SPARE
    from .standby import stand_by_spare

    spark, takeover = stand_by_spare()
    if takeover is None:
        spark.stop()
        return  # not needed
    _SPARE = (spark, takeover.at)
    app(["run", *takeover.argv], prog_name="python -m workers.runner")


@app.command("run")
def run_cmd(
    spec_file: Annotated[Path, typer.Argument(help="Pipeline spec (YAML or JSON).")],
    storage: Annotated[str, typer.Option(help="The pipeline's storage location.")],
    from_checkpoint: Annotated[str, typer.Option(help="latest, none, or a uuid.")] = "latest",
    max_steps: Annotated[int | None, typer.Option(help="Stop after N steps.")] = None,
    stop_when_idle: Annotated[
        float | None, typer.Option(help="Stop after S seconds without a step.")
    ] = None,
    base_dir: Annotated[str, typer.Option(help="Relative sink paths start here.")] = ".",
    hang_timeout: Annotated[
        float,
        typer.Option(
            help="End the run (exit 7, restarted like a crash) when it takes no step for "
            "this many seconds while input waits; 0: never."
        ),
    ] = 600.0,
    files_root: Annotated[
        list[str] | None,
        typer.Option(
            help="Files sources and sinks must resolve inside these directories (repeat the "
            "option for several); checked as the run opens them."
        ),
    ] = None,
    final_checkpoint: Annotated[bool, typer.Option(help="Checkpoint when stopping.")] = True,
    run_id: Annotated[
        int | None,
        typer.Option(help="Run under the control plane as this run (database from SPINDLE_*)."),
    ] = None,
    remote: Annotated[
        str | None,
        typer.Option(help="Mirror checkpoints to this object store: file:///dir or s3://b/p."),
    ] = None,
    pre_aggregate: Annotated[
        str,
        typer.Option(
            help="Partial aggregation in Spark before the circuit: auto (min/max, or steps of "
            f"{PRE_AGGREGATE_MIN_ROWS} rows or more), always, never."
        ),
    ] = "auto",
    standby: Annotated[
        bool,
        typer.Option(
            help="Hot standby: start Spark and warm up, then wait for one line on standard "
            'input ({"from_checkpoint": ..., "run_id": ...}, fields optional) before opening '
            "the storage location; exit 0 if the input ends first (workers/standby.py)."
        ),
    ] = False,
) -> None:
    if pre_aggregate not in ("auto", "always", "never"):
        raise typer.BadParameter("auto, always or never", param_hint="--pre-aggregate")
    timeline = Timeline(process_start_time())
    timeline.mark("imports")
    started: list[Runner] = []

    def _term(*_: object) -> None:
        # SIGTERM (the worker shutting down): finish the step, checkpoint, exit.
        if not started:
            raise SystemExit(EXIT_INTERRUPTED)
        started[0].request_exit(EXIT_INTERRUPTED)

    signal.signal(signal.SIGTERM, _term)
    control = None
    try:
        spec = S.load_spec(spec_file)
        spark = None
        if standby:
            from .standby import stand_by

            spark, takeover = stand_by(spec)
            if takeover is None:
                spark.stop()
                return  # not needed: the storage location was never opened
            from_checkpoint = takeover.from_checkpoint or from_checkpoint
            run_id = takeover.run_id if takeover.run_id is not None else run_id
            timeline = Timeline(takeover.at, standby=True)
        elif _SPARE is not None:
            spark, at = _SPARE
            timeline = Timeline(at, standby=True)
        if run_id is not None:
            from backend.db import Database
            from backend.settings import Settings

            from .control import JobControl

            settings = Settings()
            control = JobControl(Database(settings.db_url), settings, run_id)
        # A standby may be told to take over while the driver it replaces is still exiting:
        # the location's lock is then released within moments.
        opening = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(LockedError),
            stop=tenacity.stop_after_delay(TAKEOVER_LOCK_WAIT_S if spark is not None else 0),
            wait=tenacity.wait_fixed(0.05),
            reraise=True,
        )
        runner = opening(
            Runner,
            spec,
            storage,
            from_checkpoint=from_checkpoint,
            base_dir=base_dir,
            files_roots=files_root,
            spark=spark,
            own_retention=control is None,
            metrics_sinks=[control.metrics_sink] if control else None,
            remote=open_object_store(remote) if remote else None,
            timeline=timeline,
            pre_aggregate=cast(PreAggregate, pre_aggregate),
        )
    except S.SpecError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(EXIT_SPEC) from None
    except StateError as e:
        typer.echo(f"{STATE_ERROR_HEADING} {e}", err=True)
        raise typer.Exit(EXIT_STATE) from None
    started.append(runner)
    try:
        if control is not None:
            control.opened(runner)
        try:
            res = runner.run(max_steps, stop_when_idle, hang_timeout or None)
        except CorruptionError as e:
            # Read from a checkpoint's file during a step: restoring it again would too.
            typer.echo(f"{STATE_ERROR_HEADING} {e}", err=True)
            raise typer.Exit(EXIT_STATE) from None
        except FencedError as e:
            typer.echo(f"{FENCED_HEADING} {e}", err=True)
            raise typer.Exit(EXIT_FENCED) from None
        code = runner.exit_code or EXIT_STOPPED
        # A checkpoint on the way out, unless a stop said not to or a restore discards it.
        commit = final_checkpoint if control is None else code == EXIT_INTERRUPTED
        # Not when the policy's checkpoint already covers the last step: a second one at the
        # same step would take a retention slot for nothing.
        if commit and runner.step > res.first_step and runner.steps_since_checkpoint:
            runner.commit(wait=True)
        typer.echo(json.dumps(res.__dict__ | {"last_step": runner.step}))
    finally:
        if control is not None:
            control.close()
        runner.close()
        # Stop Spark while this process can still answer it: a JVM left to notice the
        # process's exit may still send it a query's last progress event, and print the
        # failure to deliver it.
        runner.spark.stop()
    if code:
        raise typer.Exit(code)


def main() -> None:
    app()


if __name__ == "__main__":
    main()


__all__ = ["Plan", "RunResult", "Runner", "plan", "spark_session"]
