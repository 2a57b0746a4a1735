"""Planning: a spec becomes Spark's analysis of its expressions and the dataflow the engine
steps (SQL views, or an operator spec's operators as views: `spindle_sql.operators`), with every
error naming its spec field before anything starts."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from pipeline_spec import expressions
from pipeline_spec import model as S
from spindle_sql.dataflow import Dataflow
from spindle_sql.layout import Layout
from spindle_sql.liveness import live_columns
from spindle_sql.operators import plan_operators
from spindle_sql.spec import SqlPlan, plan_spec
from storage_engine.circuit import CircuitError

from . import udfs
from .connectors.registry import source_kind
from .dataflow_run import DataflowRun
from .partitioned_run import PartitionedRun
from .sources import END, SOURCE, table_input


@dataclass
class Plan:
    """What a spec means for Spark and for the dataflow, checked before anything runs."""

    spec: S.PipelineSpec
    source_schema: StructType  # columns after parsing, before the transform
    stream_schema: pa.Schema  # after the transform: the dataflow's "source" input
    inputs: dict[str, tuple[str | None, list[str]]]  # dataflow input -> (where, select)
    input_schemas: dict[str, pa.Schema]
    # The SQL views', or the operator spec's operators as views, bound to the run's storage
    # (in `parallelism` shards on Spark's executors: `PartitionedRun`).
    dataflow: DataflowRun | PartitionedRun
    spark_options: dict[str, str] = field(default_factory=dict)
    # The stream column holding event times for the end-to-end latency metric, if any.
    event_time: str | None = None
    # The further input tables (spec `tables`), each read as a one-source pipeline's
    # source is, into the dataflow input `table_input(name)`.
    tables: dict[str, Plan] = field(default_factory=dict)
    # A SQL table's whole schema when Spark reads only its live columns (`_read_live`):
    # the dataflow gets the others as nulls.
    padded: pa.Schema | None = None


def source_schema(spark: SparkSession, source: S.InputSource) -> StructType:
    ddl = source_kind(source).columns(source)
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
    a run takes, slow on a cold JVM. (Typed nulls are nullable columns: a schema with a
    NOT NULL column still takes that path, to keep its nullability.)"""
    if not all(f.nullable for f in schema.fields):
        return spark.createDataFrame([], schema)
    cols = [F.lit(None).cast(f.dataType).alias(f.name) for f in schema.fields]
    return spark.range(0).select(*cols)


def _short(e: Exception) -> str:
    return str(e).strip().splitlines()[0][:500]


def ddl(schema: StructType) -> str:
    return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)


def arrow_schema(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema, timestamp_utc=True, prefers_large_types=False)


def plan(spark: SparkSession, spec: S.PipelineSpec) -> Plan:
    """Check every column reference against the source schema and build the dataflow.
    A UDF module runs now: its code is inline (`pipeline_spec.udf_source.inline`)."""
    src = source_schema(spark, spec.source)
    t = spec.transform
    stream = _analyse(spark, src, t.where, t.select, "transform")
    stream_arrow = arrow_schema(stream)
    inputs: dict[str, tuple[str | None, list[str]]] = {}
    schemas: dict[str, pa.Schema] = {}
    sql: SqlPlan | None = None
    more: dict[str, pa.Schema] = {}
    if spec.sql is not None:
        sql = plan_spec(spec, udf_impls=udfs.load(spec))
        if sql.schema.names != stream_arrow.names:
            raise S.SpecError([("source.schema", f"Spark reads {stream_arrow.names}")])
        more = {name: schema for name, schema in sql.tables.items() if name != sql.table}
        flow = _sql_flow(sql)
        inputs[SOURCE] = (None, ["*"])
        schemas[SOURCE] = sql.schema
        stream_arrow = sql.schema
    else:
        flow = _operators(spark, spec, stream, stream_arrow, inputs, schemas)
    event_time = _event_time(spec, stream_arrow)
    opts = _options(spec.source, src)
    live = _live(spec, sql)
    run: DataflowRun | PartitionedRun = DataflowRun(flow)
    if sql is not None and spec.parallelism > 1:
        # Each executor builds the views from the spec's JSON (`sql_dataflow`).
        spec_json = spec.model_dump_json(by_alias=True)
        sinks_read = {s.from_ for s in spec.sinks}
        run = PartitionedRun(
            partial(sql_dataflow, spec_json), spec.parallelism, spark, outputs=sinks_read
        )
    tables = {
        source.table: _table_plan(
            spark, spec.table_spec(source.table), where, more[source.table], run, live
        )
        for where, source in spec.input_fields()
        if source.table in more
    }
    padded = None
    if sql is not None:
        src, stream_arrow, padded = _read_live(spec.source, src, sql.schema, live[sql.table])
        schemas[SOURCE] = stream_arrow
    return Plan(spec, src, stream_arrow, inputs, schemas, run, opts, event_time, tables, padded)


def _sql_flow(sql: SqlPlan) -> Dataflow:
    """A SQL spec's dataflow: the table's rows are the stream's, typed as the views were
    planned for; each further table an input of its own."""
    more = [name for name in sql.tables if name != sql.table]
    names = {SOURCE: sql.table, **{table_input(name): name for name in more}}
    return Dataflow(sql.views, inputs=names, event_time=sql.event_time)


def sql_dataflow(spec_json: str) -> Dataflow:
    """The dataflow of the SQL spec `spec_json` (its JSON), as a partitioned run's
    executors build it."""
    spec = S.PipelineSpec.model_validate_json(spec_json)
    return _sql_flow(plan_spec(spec, udf_impls=udfs.load(spec)))


def _operators(
    spark: SparkSession,
    spec: S.PipelineSpec,
    stream: StructType,
    stream_arrow: pa.Schema,
    inputs: dict[str, tuple[str | None, list[str]]],
    schemas: dict[str, pa.Schema],
) -> Dataflow:
    """An operator spec's dataflow (`spindle_sql.operators`); each join side, a filter and
    projection of the stream that Spark computes, is an input of its own (`inputs`,
    `schemas`: filled in here), as is the stream if an operator reads it."""
    sides: dict[str, pa.Schema] = {}
    for i, op in enumerate(spec.state):
        if not isinstance(op, S.JoinOp):
            continue
        for side in ("left", "right"):
            sp: S.StreamSpec = getattr(op, side)
            path = f"state.{i}.{side}"
            schema = arrow_schema(_analyse(spark, stream, sp.where, sp.select, path))
            inputs[f"{op.name}.{side}"] = (sp.where, sp.select)
            sides[f"{op.name}.{side}"] = schema
    ops = plan_operators(spec, stream_arrow, sides)
    try:
        flow = Dataflow(ops.views, layout=Layout(ops.names))
    except CircuitError as e:  # a column or type problem the engine's operator found
        at = [f"state.{i}" for i, op in enumerate(spec.state) if f"operator {op.name!r}" in str(e)]
        raise S.SpecError([(at[0] if at else "state", str(e))]) from None
    if SOURCE in ops.tables:
        inputs[SOURCE] = (None, ["*"])
    schemas.update(ops.tables)
    return flow


def _live(spec: S.PipelineSpec, sql: SqlPlan | None) -> dict[str, set[str]]:
    """Per SQL table, the columns its views need (`spindle_sql.liveness`); none when the spec has
    no SQL (nothing is pruned then)."""
    if sql is None:
        return {}
    read = {s.from_ for s in spec.sinks}
    live = live_columns(sql.views, read, {t: e.column for t, e in sql.event_time.items()})
    return {t: live.get(t, set()) for t in sql.tables}


def _read_live(
    source: S.InputSource, src: StructType, schema: pa.Schema, live: set[str]
) -> tuple[StructType, pa.Schema, pa.Schema | None]:
    """What Spark reads of a SQL table: the source schema, the rows' Arrow schema, and the
    whole schema to pad them to (None: Spark reads every column). JSON and Parquet files
    are read by column name, so Spark's readers parse and ship only the live columns; CSV
    lines are parsed by position, and the other sources' rows are made in the driver."""
    readable = source_kind(source).reads_by_name(source)
    keep = [f.name for f in schema if f.name in live] or schema.names[:1]
    if not readable or len(keep) == len(schema):
        return src, schema, None
    fields = StructType([f for f in src.fields if f.name in keep])
    return fields, pa.schema([schema.field(n) for n in keep]), schema


def _table_plan(
    spark: SparkSession,
    lane: S.PipelineSpec,
    where: str,
    schema: pa.Schema,
    run: DataflowRun | PartitionedRun,
    live: dict[str, set[str]],
) -> Plan:
    """A further input table's plan (`lane`: the spec as that table sees it, `where`: its
    field, `tables.<i>`): read as a one-source SQL pipeline's source is, its rows the
    dataflow input `table_input(table)`; `live`: the columns of each table its views need."""
    try:
        src = source_schema(spark, lane.source)
    except S.SpecError as e:
        raise S.SpecError([(where + p.removeprefix("source"), m) for p, m in e.errors]) from None
    if arrow_schema(src).names != schema.names:
        raise S.SpecError([(f"{where}.schema", f"Spark reads {arrow_schema(src).names}")])
    event_time = _event_time(lane, schema)
    read, rows, padded = _read_live(lane.source, src, schema, live[lane.source.table])
    return Plan(
        lane,
        read,
        rows,
        {SOURCE: (None, ["*"])},
        {SOURCE: rows},
        run,
        _options(lane.source, src),
        event_time,
        padded=padded,
    )


def _options(s: S.InputSource, src: StructType) -> dict[str, str]:
    """The source's options for its Spark data source (`sources.py`)."""
    return source_kind(s).spark_options(s, arrow_schema(src), ddl(src))


def _event_time(spec: S.PipelineSpec, stream: pa.Schema) -> str | None:
    """The transformed stream's event-time column: `transform.event_time` (checked: a column
    of the stream, a timestamp), else the first window aggregate's time column — except for
    datagen, whose `ts` is synthetic (2024-01-01 + i / rows_per_second, so that row i is a
    pure function of seed and i), not wall clock: no latency unless the spec names a column."""
    col = spec.transform.event_time
    table_time = spec.source.event_time
    real = source_kind(spec.source).wall_clock(spec.source)
    if col is None and table_time is not None and real:
        col = table_time.column  # a SQL table's (sql.spec checked it)
    if col is None:
        if not real:
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
