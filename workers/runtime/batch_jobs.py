"""A run's Spark work per micro-batch (`BatchJobs`): the job that turns a batch's rows into
the dataflow's inputs.

A step is one Spark job that computes every dataflow input of every row (the transformed
stream, and each join side as its filter flag plus its columns), the dead letters and the
batch's end offset; the Arrow result is split into the inputs here. A files source's job is
built once and replanned per batch (`FileBatches`).
"""

from __future__ import annotations

import functools

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline_spec import model as S

from .connectors.source import Source
from .file_batches import CORRUPT
from .micro_batch import ArrowShape, JobTables, MicroBatch, min_event_us, padded_to
from .plan import Plan
from .sources import END, SOURCE


class BatchJobs:
    def __init__(self, spec: S.PipelineSpec, plan: Plan, source: Source) -> None:
        self.spec, self.plan, self.source = spec, plan, source
        self.files = source.batches
        # The first batch's table, computed while the run opened (`StepInput.read_ahead`).
        self.ready: JobTables | None = None
        self._made_in_driver = source.parses_in_driver
        self._has_lines = source.has_lines
        # A files batch's rows and the job over them (`_job_of`).
        self._job: tuple[DataFrame, DataFrame] | None = None

    @functools.cached_property
    def shape(self) -> ArrowShape:
        """The Arrow shape of the source's rows as the dataflow takes them; only a plan that
        reads the source as a dataflow input has one (see `skips_spark`)."""
        return ArrowShape(self.plan.input_schemas[SOURCE], self.plan.padded, self.plan.event_time)

    def skips_spark(self) -> bool:
        """Whether this step's rows, made in the driver (a log, datagen or Kafka source, or
        JSON, CSV or Parquet files that Arrow reads as Spark would: the source's
        `parses_in_driver`), go to the dataflow as they are (`arrow_batch`): the
        transform is the identity and only the stream is read (no join side), as in every
        SQL pipeline, whose views filter and project in the engine. Spark would only copy
        them."""
        t = self.spec.transform
        return (
            self._made_in_driver
            and t.where is None
            and [e.strip() for e in t.select] == ["*"]
            and list(self.plan.inputs) == [SOURCE]
        )

    def arrow_batch(self, rows: pa.Table, bad: pa.Table | None = None) -> MicroBatch:
        """A micro-batch of rows made in the driver (see `skips_spark`), with `__end`, and
        the records that did not parse (`bad`: dead letters)."""
        return self.shape.batch(rows, bad, SOURCE)

    def micro_batch(self, df: DataFrame) -> MicroBatch:
        """A step's Spark work in one job: every row-level dataflow input of every row (the
        transformed stream and each join side, `_job_of`), the dead letters and the end
        offset; its Arrow result split into the dataflow's inputs (`_split`). (Arrow, not
        collect(): row pickling has overflowed the stream thread's stack.)"""
        ready, self.ready = self.ready, None
        if ready is not None:
            return self._split(ready)
        return self._split(self.tables(df))

    def tables(self, df: DataFrame) -> JobTables:
        try:
            return self._job_of(df).toArrow()
        except Exception as e:
            # A CSV record too wide for the reader fails the job (`FileBatches.widen_columns`).
            if self.files is None or not self.files.widen_columns(e):
                raise
            return self._job_of(self.files.rows()).toArrow()

    def _job_of(self, df: DataFrame) -> DataFrame:
        """The rows job. A files source's is built once per DataFrame of its rows, and
        planned anew for each batch (`FileBatches`)."""
        if self.files is not None and self._job is not None and self._job[0] is df:
            job = self._job[1]
        else:
            job = self._build_job(df)
            if self.files is not None:
                self._job = (df, job)
        return job.select("*")

    def _build_job(self, df: DataFrame) -> DataFrame:
        t = self.spec.transform
        names = [f"`{f.name}`" for f in self.plan.source_schema.fields]
        select = [x for e in t.select for x in (names if e.strip() == "*" else [e])]
        keep = f"coalesce(({t.where}), false)" if t.where else "true"
        hidden = ["__keep", "__bad", "__file", "__lineno", "__line", END]
        stream_names = self.plan.stream_schema.names
        stream = self._flagged(df).selectExpr(*select, f"{keep} AS __keep", *hidden[1:])
        # Each input's columns in turn, a join side's preceded by its filter as a flag; the
        # expressions read the transformed stream's columns by name, as the spec writes them.
        stream = stream.toDF(*stream_names, *hidden)
        every = [f"`{n}`" for n in stream_names]
        cols: list[str] = []
        for name in self.plan.inputs:
            where, sel = self.plan.inputs[name]
            if name != SOURCE:
                cols.append(f"coalesce(({where}), false)" if where else "true")
            cols += [x for e in sel for x in (every if e.strip() == "*" else [e])]
        et = self.plan.event_time
        if et is not None and SOURCE not in self.plan.inputs:
            cols.append(f"`{et}`")  # for the latency metric
        letters = ["__file", "__lineno", "__line"]
        # Good rows' lines are not needed, and shipping them was a large part of a step.
        rows = stream.selectExpr(
            *cols,
            "__keep",
            "__bad",
            *(f"CASE WHEN coalesce(__bad, false) THEN {c} END" for c in letters),
            END,
        )
        return rows.toDF(*(f"__x{i}" for i in range(len(cols))), *hidden[:2], *letters, END)

    def _split(self, rows: JobTables) -> MicroBatch:
        """The job's Arrow result as the dataflow's inputs, dead letters and metrics."""
        if rows.num_rows == 0:
            return MicroBatch(None, 0, None, None)
        bad = pc.fill_null(rows.column("__bad"), False)
        good = pc.and_(pc.invert(bad), pc.fill_null(rows.column("__keep"), False))
        inputs: dict[str, pa.Table] = {}
        k = 0
        for name in self.plan.inputs:
            schema = self.plan.input_schemas[name]
            mask = good
            if name != SOURCE:
                mask, k = pc.and_(good, rows.column(k)), k + 1
            part = rows.filter(mask).select(list(range(k, k + len(schema))))
            inputs[name] = part.rename_columns(schema.names).cast(schema)
            k += len(schema)
        if self.plan.padded is not None and SOURCE in inputs:
            inputs[SOURCE] = padded_to(inputs[SOURCE], self.plan.padded)
        rows_in = sum(x.num_rows for x in inputs.values())
        et, oldest = self.plan.event_time, None
        if et is not None:
            times = inputs[SOURCE].column(et) if SOURCE in inputs else rows.filter(good).column(k)
            oldest = min_event_us(times)
        end = pc.max(rows.column(END)).as_py()
        letters = rows.filter(bad).select(["__file", "__lineno", "__line"])
        return MicroBatch(int(end), rows_in, oldest, letters, inputs)

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
