"""A run's Spark work per micro-batch (`BatchJobs`): the jobs that turn a batch's rows into
the circuit's inputs, and whether the stream is pre-aggregated.

A step is one Spark job that computes every row-level circuit input of every row (the
transformed stream, and each join side as its filter flag plus its columns), the dead
letters and the batch's end offset; the Arrow result is split into the inputs here. When the
stream is pre-aggregated (`PreAggregation`), its aggregation is a second job. A files
source's jobs are built once and replanned per batch (`FileBatches`).
"""

from __future__ import annotations

from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline_spec import model as S

from .connectors.source import Source
from .file_batches import CORRUPT
from .plan import Plan
from .pre_aggregation import JobTables, MicroBatch, PreAggregation, min_event_us
from .sources import END, SOURCE

# See BatchJobs.pre_aggregation.
PreAggregate = Literal["auto", "always", "never"]
PRE_AGGREGATE_MIN_ROWS = 100_000


class BatchJobs:
    def __init__(
        self, spec: S.PipelineSpec, plan: Plan, source: Source, policy: PreAggregate
    ) -> None:
        self.spec, self.plan, self.policy = spec, plan, policy
        self.files = source.batches
        self.last_rows_in = 0  # the previous step's, for the `auto` policy
        # The first batch's tables, computed while the query started (`Runner._read_ahead`).
        self.ready: tuple[bool, JobTables] | None = None
        self._made_in_driver = source.parses_in_driver
        self._has_lines = source.has_lines
        # pre-aggregated? -> a files batch's rows and jobs over them (`_jobs_of`)
        self._jobs: dict[bool, tuple[DataFrame, tuple[DataFrame | None, DataFrame | None]]] = {}

    def pre_aggregation(self) -> PreAggregation | None:
        """This step's pre-aggregation, if the plan has one and the policy takes it: always,
        never, or `auto` — when an operator keeps min/max (its value multisets then grow by
        at most two values per group and step, not by every value), or when the previous
        step had at least PRE_AGGREGATE_MIN_ROWS rows. Below that, Spark's aggregation
        costs more than it saves (on 10 000-row steps: more Spark time, no measurable engine
        saving; docs/benchmarks.md). Either path
        continues from the other's state, so the choice is free at every step."""
        pre = self.plan.pre_aggregation
        if pre is None or self.policy == "never":
            return None
        if self.policy == "always" or pre.keeps_extremes:
            return pre
        return pre if self.last_rows_in >= PRE_AGGREGATE_MIN_ROWS else None

    def skips_spark(self) -> bool:
        """Whether this step's rows, made in the driver (a log, datagen or Kafka source, or
        JSON, CSV or Parquet files that Arrow reads as Spark would: the source's
        `parses_in_driver`), go to the circuit as they are (`arrow_batch`): the
        transform is the identity, only the stream is read (no join side) and it is not
        pre-aggregated, as in every SQL pipeline, whose views filter and project in the
        engine. Spark would only copy them."""
        t = self.spec.transform
        return (
            self._made_in_driver
            and t.where is None
            and [e.strip() for e in t.select] == ["*"]
            and list(self.plan.inputs) == [SOURCE]
            and self.pre_aggregation() is None
        )

    def arrow_batch(self, rows: pa.Table, bad: pa.Table | None = None) -> MicroBatch:
        """A micro-batch of rows made in the driver (see `skips_spark`), with `__end`, and
        the records that did not parse (`bad`: dead letters)."""
        if rows.num_rows == 0 and bad is None:
            return MicroBatch(None, 0, None, {}, None)
        schema = self.plan.input_schemas[SOURCE]
        table = rows.drop_columns([END]).rename_columns(schema.names).cast(schema)
        if self.plan.padded is not None:
            table = _padded(table, self.plan.padded)
        et = self.plan.event_time
        oldest = None if et is None else min_event_us(table.column(et))
        end = pc.max(rows.column(END)).as_py() if rows.num_rows else 0
        return MicroBatch(int(end), table.num_rows, oldest, {}, bad, {SOURCE: table})

    def micro_batch(self, df: DataFrame) -> MicroBatch:
        """A step's Spark work, in as few jobs as the plan allows: one computes every
        row-level circuit input of every row (the transformed stream and each join side,
        `_jobs_of`), the dead letters and the end offset; the stream's pre-aggregation, when
        taken (`_pre_aggregation`), is a second one. Then the Arrow results are split into
        the circuit's inputs (`_split`). (Arrow, not collect(): row pickling has overflowed
        the stream thread's stack.)"""
        pre = self.pre_aggregation()
        ready, self.ready = self.ready, None
        if ready is not None and ready[0] == (pre is not None):
            return self._split(ready[1], pre)
        return self._split(self.tables(df, pre), pre)

    def tables(self, df: DataFrame, pre: PreAggregation | None) -> JobTables:
        try:
            return self._run(df, pre)
        except Exception as e:
            # A CSV record too wide for the reader fails the job (`FileBatches.widen_columns`).
            if self.files is None or not self.files.widen_columns(e):
                raise
            return self._run(self.files.rows(), pre)

    def _run(self, df: DataFrame, pre: PreAggregation | None) -> JobTables:
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
        are built once per path (with or without pre-aggregation) and DataFrame of its
        rows, and planned anew for each batch (`FileBatches`)."""
        built = self._jobs.get(pre is not None) if self.files is not None else None
        if built is not None and built[0] is df:
            jobs = built[1]
        else:
            jobs = self._build_jobs(df, pre)
            if self.files is not None:
                self._jobs[pre is not None] = (df, jobs)
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
        # Good rows' lines are not needed, and shipping them was a large part of a step.
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
        if self.plan.padded is not None and SOURCE in inputs:
            inputs[SOURCE] = _padded(inputs[SOURCE], self.plan.padded)
        rows_in = sum(x.num_rows for x in inputs.values())
        if batch is not None:  # its dead letters, end and oldest event cover the batch
            return MicroBatch(
                batch.end, batch.rows_in + rows_in, batch.oldest, batch.partials, batch.bad, inputs
            )
        et, oldest = self.plan.event_time, None
        if et is not None:
            times = inputs[SOURCE].column(et) if SOURCE in inputs else rows.filter(good).column(k)
            oldest = min_event_us(times)
        end = pc.max(rows.column(END)).as_py()
        letters = rows.filter(bad).select(["__file", "__lineno", "__line"])
        return MicroBatch(int(end), rows_in, oldest, {}, letters, inputs)

    def _flagged(self, df: DataFrame) -> DataFrame:
        """The batch with the source's columns parsed, `__bad` marking unparseable rows, and
        `__file`, `__lineno`, `__line` for dead letters (nulls for sources without lines;
        line numbers of files are found later, for bad rows only: `FileBatches`). A JSON
        record is bad when Spark's JSON reader does not parse it: not an object (or an array
        of objects), malformed, or a present value that does not convert to its column's
        type (an empty string for a number included); a CSV record when Spark's CSV reader
        finds it malformed: the wrong number of fields, or a non-empty value that does not
        convert."""
        fields = self.plan.source_schema.fields
        columns = [F.col(f"`{f.name}`") for f in fields]
        if not self._has_lines:
            return df.select(
                *columns,
                F.lit(False).alias("__bad"),
                F.lit(None).cast("string").alias("__file"),
                F.lit(None).cast("bigint").alias("__lineno"),
                F.lit(None).cast("string").alias("__line"),
                F.col(END),
            )
        return df.select(
            *columns,
            F.col(CORRUPT).isNotNull().alias("__bad"),
            "__file",
            F.lit(None).cast("bigint").alias("__lineno"),
            F.col(CORRUPT).alias("__line"),
            F.col(END),
        )


def _padded(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """`rows` with every column of `schema`, those it lacks as nulls (`Plan.padded`)."""
    n = rows.num_rows
    have = set(rows.column_names)
    cols = [rows.column(f.name) if f.name in have else pa.nulls(n, f.type) for f in schema]
    return pa.table(cols, schema=schema)
