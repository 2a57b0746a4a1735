"""Where a step's rows come from: a files source's files, read by Spark's own readers
(`FileBatches`), or a log, datagen or Kafka source's rows, read here in the driver and handed
to Spark or the circuit as Arrow (no Python worker); and the run's first batch, read ahead
while its query starts (`read_ahead`)."""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from pipeline_spec import model as S
from pipeline_spec.offsets import Offset, count, total
from storage_engine.input_log import InputLog

from .csv_lines import read_csv_files
from .file_batches import FileBatches
from .input_files import open_input_files
from .json_lines import read_json_lines
from .kafka_source import KafkaTable
from .micro_batch import JobTables
from .parquet_files import NarrowerDecimal, read_parquet_files
from .plan import Plan, arrow_schema, ddl
from .progress import ReadAhead
from .sources import END, datagen_batches, log_batches
from .step_ends import StepEndServer

log = logging.getLogger("spindle.runner")
# A files table's reader in the driver, by format: its rows, or None when Spark must read.
_READERS = {"json": read_json_lines, "csv": read_csv_files, "parquet": read_parquet_files}


class StepInput:
    """The rows of a run's source between two offsets. `roots`: where a files source's
    local files must resolve (os.pathsep-joined; "": anywhere); `storage`: the run's storage
    location, which holds a log source's input log."""

    def __init__(
        self, spark: SparkSession, spec: S.PipelineSpec, plan: Plan, storage: str, roots: str
    ) -> None:
        self.spark, self.source, self.plan = spark, spec.source, plan
        self.storage = storage
        src = self.source
        self.files = (
            FileBatches(spark, src.format, ddl(plan.source_schema))
            if isinstance(src, S.FilesSource)
            else None
        )
        self.listing = (
            open_input_files(src.path, src.table, roots) if isinstance(src, S.FilesSource) else None
        )
        self._names: list[str] = []  # the files source's last listing
        self._fetched: tuple[list[str], list[str]] | None = None  # names, local paths
        self.kafka = KafkaTable(src) if isinstance(src, S.KafkaSource) else None
        # The query's trigger asks the driver where steps end (`step_ends.py`); the answers
        # come on a thread of their own, through a Kafka consumer of their own.
        self._ends: StepEndServer | None = None
        self._ends_kafka: KafkaTable | None = None

    def first_offset(self, restored: Offset) -> Offset:
        """Where the run starts: the restored offset, or a Kafka table's first run's (the
        spec's `start`, resolved now)."""
        if self.kafka is not None and not restored:
            return self.kafka.first_offsets()
        return restored

    def rows(self, start: int, end: int) -> DataFrame | None:
        """The rows of offsets [start, end) (None if there are none): a files source's
        files read by Spark (`FileBatches`), or a log or datagen source's rows read in the
        driver (`driver_frame`). Reading the query's own DataFrame instead would run a
        Spark job through a Python worker per batch."""
        if end <= start:
            return None
        if self.files is None:
            return self.driver_frame(start, end)
        self._read_files(self._file_names(end)[start:end], end)
        return self.files.rows()

    def _file_names(self, at_least: int | None = None) -> list[str]:
        """The files in offset order: listed now, or, given `at_least`, the last listing if
        it holds that many (files are immutable and new ones sort after the old, so a
        listing's first files never change; a step's files were listed by its trigger)."""
        assert self.listing is not None
        if at_least is None or len(self._names) < at_least:
            self._names = self.listing.names()
        return self._names

    def _read_files(self, names: list[str], end: int) -> None:
        """Point `files` at these files (of the step ending at `end`), fetched if remote."""
        assert self.listing is not None and self.files is not None
        shown = [self.listing.url(n) for n in names]
        self.files.read(self._fetch(names), end, shown)

    def _fetch(self, names: list[str]) -> list[str]:
        """Local paths of these files, fetched if remote (again only if they are not the
        last ones fetched: a step the driver did not parse goes to Spark)."""
        assert self.listing is not None
        if self._fetched is None or self._fetched[0] != names:
            self._fetched = (names, self.listing.fetch(names))
        return self._fetched[1]

    def step_end_socket(self) -> str:
        """Where the query's trigger asks for a files or Kafka table's step ends
        (`step_end`), served from now until `close()`."""
        if self._ends is None:
            self._ends = StepEndServer(self.step_end, self.source.table)
        return self._ends.path

    def step_end(self, start: Offset) -> Offset:
        """Where a step from `start` ends: at the input's end now, at most a step's worth
        (`max_files_per_step`; Kafka's `max_records_per_step`, `KafkaTable.step_end`)."""
        src = self.source
        if isinstance(src, S.KafkaSource):
            assert isinstance(start, dict)
            if self._ends_kafka is None:
                self._ends_kafka = KafkaTable(src)
            return self._ends_kafka.step_end(start)
        assert isinstance(src, S.FilesSource)
        at = count(start)
        return max(at, min(len(self._file_names()), at + src.max_files_per_step))

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
        result is that batch's. None for a datagen source, or when there is nothing to read
        yet."""
        src = self.source
        if isinstance(src, S.LogSource):
            end = self.driver_step_end(start) if end is None else end
            if end is None or end <= start:
                return None  # the query waits for records
            frame: list[DataFrame] = []

            def log_job() -> JobTables:
                frame.append(self.driver_frame(start, end))
                return tables(frame[0])

            return ReadAhead(end, log_job, lambda: frame[0])
        if not isinstance(src, S.FilesSource) or self.files is None:
            return None
        stop = start + src.max_files_per_step if end is None else end
        names = self._file_names(end)[start:stop]
        if not names:
            return None
        last = start + len(names)
        files = self.files

        def files_job() -> JobTables:
            self._read_files(names, last)
            return tables(files.rows())

        return ReadAhead(last, files_job, files.rows)

    def driver_frame(self, start: int, end: int) -> DataFrame:
        """A log or datagen source's rows [start, end) (`arrow`) as a Spark DataFrame."""
        schema = StructType([*self.plan.source_schema.fields, StructField(END, LongType())])
        made = self.arrow(start, end)
        assert made is not None  # a log or datagen source's rows
        _collect_frames()
        return self.spark.createDataFrame(made[0], schema=schema)

    def arrow(self, start: Offset, end: Offset) -> tuple[pa.Table, pa.Table | None] | None:
        """A log, datagen or Kafka source's rows [start, end), as its reader gives them (the
        log's records, `log_batches`; generated rows, `datagen_batches`; `KafkaTable.read`),
        or a JSON, CSV or Parquet files source's (`read_json_lines`, `read_csv_files`,
        `read_parquet_files`), made in the driver, with `__end`; and the records that did
        not parse (Kafka's). None: Spark must read these files (`rows`)."""
        if self.kafka is not None:
            assert isinstance(start, dict) and isinstance(end, dict)
            return self.kafka.read(start, end)
        start, end = count(start), count(end)
        if self.listing is not None:
            names = self._file_names(end)[start:end]
            paths = self._fetch(names)
            assert isinstance(self.source, S.FilesSource)
            read = _READERS[self.source.format]
            try:
                rows = read(paths, arrow_schema(self.plan.source_schema))
            except NarrowerDecimal as e:  # named as listed, not as fetched
                e.file = self.listing.url(names[e.index])
                raise
            if rows is None:
                return None
            return rows.append_column(END, pa.array([end] * rows.num_rows, pa.int64())), None
        if isinstance(self.source, S.LogSource):
            batches = list(log_batches(self.input_log(), start, end))
        else:
            batches = list(datagen_batches(self.plan.spark_options, start, end, end))
        return pa.Table.from_batches(batches, schema=batches[0].schema), None

    def driver_step_end(self, start: Offset) -> int | None:
        """Where a step from `start` that the driver reads before the query starts ends: a
        log source's records in the log now, or a files source's files, as many as a step
        takes (None: no input yet, or another source)."""
        src = self.source
        if not isinstance(start, int):
            return None  # a Kafka table's: the query reads it
        if isinstance(src, S.FilesSource):
            end = count(self.step_end(start))
        elif isinstance(src, S.LogSource):
            end = min(self.input_log().end(), start + src.max_records_per_step)
        else:
            return None
        return end if end > start else None

    def waiting(self, offset: Offset) -> bool:
        """Whether the source has input beyond `offset`."""
        if self.kafka is not None:
            assert isinstance(offset, dict)
            return self.kafka.waiting(offset)
        offset = count(offset)
        src = self.source
        assert not isinstance(src, S.KafkaSource)
        if isinstance(src, S.FilesSource):
            return len(self._file_names()) > offset
        if isinstance(src, S.LogSource):
            return self.input_log().end() > offset
        return src.limit is None or offset < src.limit

    def figures(self, offset: Offset) -> dict[str, Any]:
        """A step's record of the table: its offset as one number and its `lag` (None when
        the source cannot say now)."""
        try:
            return {"offset": total(offset), **self.lag(offset)}
        except Exception as e:  # a broker briefly away: the next step asks again
            log.warning("input lag of table %s: %s", self.source.table, e)
            return {"offset": total(offset), "lag": None}

    def checkpoint_durable(self, offset: Offset) -> None:
        """A checkpoint with this table at `offset` is durable: a Kafka table commits it to
        its `commit_to_group`, if any (a failure is logged: it is for monitoring only)."""
        if self.kafka is None or not isinstance(offset, dict):
            return
        try:
            self.kafka.commit_to_group(offset)
        except Exception as e:
            log.warning("%s", e)

    def lag(self, offset: Offset) -> dict[str, Any]:
        """What waits beyond `offset`: `lag`, the records (log), files (files) or Kafka
        records (its partitions' end offsets minus `offset`, also per partition in
        `partitions`) not read yet; None for a datagen source, which has no end."""
        if self.kafka is not None:
            assert isinstance(offset, dict)
            ends = self.kafka.end_offsets()
            partitions = {p: max(0, e - offset.get(p, 0)) for p, e in ends.items()}
            return {"lag": sum(partitions.values()), "partitions": partitions}
        src, at = self.source, count(offset)
        if isinstance(src, S.FilesSource):
            return {"lag": max(0, len(self._file_names()) - at)}
        if isinstance(src, S.LogSource):
            return {"lag": max(0, self.input_log().end() - at)}
        return {"lag": None}

    def input_log(self) -> InputLog:
        src = self.source
        assert isinstance(src, S.LogSource)
        return InputLog(src.log_dir(self.storage), arrow_schema(self.plan.source_schema))

    def close(self) -> None:
        if self._ends is not None:
            self._ends.close()
        for part in (self.files, self.listing, self.kafka, self._ends_kafka):
            if part is not None:
                part.close()


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
