"""Where a step's rows come from: the table's source connector (`connectors`), read in the
driver and handed to Spark or the circuit as Arrow (no Python worker), or, for files the
driver cannot parse exactly as Spark would, read by Spark's own readers (the source's
`batches`); and the run's first batch, read ahead while its query starts (`read_ahead`)."""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from pipeline_spec import model as S
from pipeline_spec.offsets import Offset, total
from storage_engine.input_log import InputLog

from .connectors.registry import open_source
from .connectors.source import Source, SourceContext
from .micro_batch import JobTables
from .plan import Plan, arrow_schema, ddl
from .progress import ReadAhead
from .sources import END
from .step_ends import StepEndServer

log = logging.getLogger("spindle.runner")


class StepInput:
    """The rows of a run's source between two offsets. `roots`: where a files source's
    local files must resolve (os.pathsep-joined; "": anywhere); `storage`: the run's storage
    location, which holds a log source's input log."""

    def __init__(
        self, spark: SparkSession, spec: S.PipelineSpec, plan: Plan, storage: str, roots: str
    ) -> None:
        self.spark, self.source, self.plan = spark, spec.source, plan
        self.storage = storage
        read = plan.source_schema
        ctx = SourceContext(
            spark, arrow_schema(read), ddl(read), plan.spark_options, storage, roots
        )
        self.connector: Source = open_source(spec.source, ctx)
        # The query's trigger asks the driver where steps end (`step_ends.py`), for the
        # sources whose ends the driver decides.
        self._ends: StepEndServer | None = None

    def first_offset(self, restored: Offset) -> Offset:
        """Where the run starts: the restored offset, or a first run's (a Kafka table's
        spec's `start`, resolved now)."""
        return self.connector.first_offset(restored)

    def rows(self, start: int, end: int) -> DataFrame | None:
        """The rows of offsets [start, end) (None if there are none): files read by Spark
        (the source's `batches`), or rows read in the driver (`driver_frame`). Reading the
        query's own DataFrame instead would run a Spark job through a Python worker per
        batch."""
        if end <= start:
            return None
        batches = self.connector.batches
        if batches is None:
            return self.driver_frame(start, end)
        self.connector.to_batches(self.connector.splits(start, end))
        return batches.rows()

    def step_end_socket(self) -> str:
        """Where the query's trigger asks for the table's step ends (`step_end`), served
        from now until `close()`."""
        if self._ends is None:
            self._ends = StepEndServer(self.step_end, self.source.table)
        return self._ends.path

    def step_end(self, start: Offset) -> Offset:
        """Where a step from `start` ends: at the input's end now, at most a step's worth
        (`max_files_per_step`; Kafka's `max_records_per_step`)."""
        return self.connector.step_end(start)

    def spark_query(self, start: Offset) -> tuple[Any, dict[str, str]]:
        """The Spark data source whose micro-batches trigger the table's steps from
        `start`, and its options."""
        return self.connector.spark_query(start, self.step_end_socket)

    def read_ahead(
        self,
        start: int,
        tables: Callable[[DataFrame], JobTables],
        end: int | None = None,
    ) -> ReadAhead | None:
        """Start reading the batch a step from `start` would take (a files source's files,
        as many as a step takes; a log source's records, as many as a step takes of those
        in the log now; up to `end` if given: a logged step's), and computing its tables
        (`tables`, on the rows' DataFrame). Files and log records are immutable, so the
        result is that batch's. None for a source the query paces (datagen, Kafka), or
        when there is nothing to read yet."""
        source = self.connector
        if not source.reads_ahead:
            return None
        batches = source.batches
        if batches is not None:
            stop = end if end is not None else source.driver_step_end(start)
            splits = source.splits(start, stop) if stop is not None else []
            if not splits:
                return None

            def files_job() -> JobTables:
                source.to_batches(splits)
                return tables(batches.rows())

            return ReadAhead(splits[0].end, files_job, batches.rows)
        end = source.driver_step_end(start) if end is None else end
        if end is None or end <= start:
            return None  # the query waits for records
        frame: list[DataFrame] = []

        def driver_job() -> JobTables:
            assert end is not None
            frame.append(self.driver_frame(start, end))
            return tables(frame[0])

        return ReadAhead(end, driver_job, lambda: frame[0])

    def driver_frame(self, start: int, end: int) -> DataFrame:
        """Rows [start, end) read in the driver (`arrow`) as a Spark DataFrame."""
        schema = StructType([*self.plan.source_schema.fields, StructField(END, LongType())])
        made = self.arrow(start, end)
        assert made is not None  # a source whose `batches` are None reads every step
        _collect_frames()
        return self.spark.createDataFrame(made[0], schema=schema)

    def arrow(self, start: Offset, end: Offset) -> tuple[pa.Table, pa.Table | None] | None:
        """The rows [start, end), read in the driver from the step's splits, with `__end`;
        and the records that did not parse (Kafka's). None: Spark must read these files
        (`rows`)."""
        return self.connector.read(self.connector.splits(start, end))

    def driver_step_end(self, start: Offset) -> int | None:
        """Where a step from `start` that the driver reads before the query starts ends: a
        log source's records in the log now, or a files source's files, as many as a step
        takes (None: no input yet, or the query decides)."""
        if not isinstance(start, int):
            return None  # a Kafka table's: the query reads it
        return self.connector.driver_step_end(start)

    def waiting(self, offset: Offset) -> bool:
        """Whether the source has input beyond `offset`."""
        return self.connector.waiting(offset)

    def figures(self, offset: Offset) -> dict[str, Any]:
        """A step's record of the table: its offset as one number and its `lag` (None when
        the source cannot say now)."""
        try:
            return {"offset": total(offset), **self.lag(offset)}
        except Exception as e:  # a broker briefly away: the next step asks again
            log.warning("input lag of table %s: %s", self.source.table, e)
            return {"offset": total(offset), "lag": None}

    def lag(self, offset: Offset) -> dict[str, Any]:
        """What waits beyond `offset`: `lag`, the records (log), files (files) or Kafka
        records (also per partition in `partitions`) not read yet; None for a datagen
        source, which has no end."""
        return self.connector.lag(offset)

    def input_log(self) -> InputLog:
        """The input log the table reads (a `log` source's)."""
        opened = self.connector.input_log
        if opened is None:
            raise LookupError(f"table {self.source.table!r} reads no input log")
        return opened()

    def close(self) -> None:
        if self._ends is not None:
            self._ends.close()
        self.connector.close()


def _collect_frames() -> None:
    """Free the DataFrames of the steps before, and with them their rows in the JVM.

    A DataFrame made from the driver's rows holds them in its plan (a LocalRelation), and
    Py4J caches each method called on a Java object on the object itself, with a
    reference back: a cycle, so the JVM keeps the Dataset until Python's cyclic collector
    runs, which, in a long-lived process, it seldom does. The JVM's heap then fills with
    earlier steps' rows until it spends its time in GC and fails. A collection before each
    such frame frees them; the objects that exist when the first one is made (the run's
    modules, its Spark session and plan) are frozen first, so later collections only look
    at what the steps made.
    """
    gc.collect()
    if not gc.get_freeze_count():
        gc.freeze()


__all__ = ["StepInput"]
