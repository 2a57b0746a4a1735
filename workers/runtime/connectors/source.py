"""What every source does (`Source`), what opening one is given (`SourceContext`), and the
splits a step's reads are planned as.

A source's offset is Spindle's (`pipeline_spec.offsets`): a count (files listed, log
records, generated rows) or a Kafka table's next offset per partition. A step reads from
one offset to another; the source plans that read as splits (`splits`): a file, a log's
or a generator's range of records, a Kafka partition's offset range. A split is plain,
picklable data naming what to read, so the driver can read it (`read`) or hand it to an
executor. What a source cannot parse exactly as Spark would, Spark reads (`batches`: a
files table's Spark reader)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource

from pipeline_spec.offsets import Offset
from storage_engine.input_log import InputLog

if TYPE_CHECKING:
    from ..file_batches import FileBatches


@dataclass(frozen=True)
class FileSplit:
    """File `name` of a files table's listing, the `index`th of the step ending at `end`."""

    name: str
    index: int
    end: int


@dataclass(frozen=True)
class RangeSplit:
    """Records [start, stop) of a log or a generator, of the step ending at `end`."""

    start: int
    stop: int
    end: int


@dataclass(frozen=True)
class PartitionSplit:
    """Offsets [start, end) of one Kafka partition (`<topic>:<partition>`)."""

    partition: str
    start: int
    end: int


Split = FileSplit | RangeSplit | PartitionSplit


def spread(splits: list[Split], tasks: int) -> list[list[Split]]:
    """The splits shared among `tasks` readers, a pure function of both (a re-run task
    reads what it read before): a range of records (a log's, a generator's, a Kafka
    partition's) cut in `tasks` ranges, files dealt round-robin."""
    out: list[list[Split]] = [[] for _ in range(tasks)]
    dealt = 0
    for split in splits:
        if isinstance(split, FileSplit):
            out[dealt % tasks].append(split)
            dealt += 1
            continue
        lo, hi = (
            (split.start, split.stop) if isinstance(split, RangeSplit) else (split.start, split.end)
        )
        for t in range(tasks):
            a, b = lo + (hi - lo) * t // tasks, lo + (hi - lo) * (t + 1) // tasks
            if b > a:
                out[t].append(
                    RangeSplit(a, b, split.end)
                    if isinstance(split, RangeSplit)
                    else PartitionSplit(split.partition, a, b)
                )
    return out


def columns_ddl(columns: dict[str, str]) -> str:
    """Declared columns (name -> Spark SQL type) as Spark DDL."""
    return ", ".join(f"`{k}` {v}" for k, v in columns.items())


# What a read gives: the rows (the table's columns, then `__end`), and the records that did
# not parse (`__file`, `__lineno`, `__line`; None: none).
Rows = tuple[pa.Table, pa.Table | None]


class SplitReader(Protocol):
    """A source's splits read in any process of the run (a Spark executor's Python worker):
    plain, picklable data (settings, never a client or a session), which opens what it
    reads with."""

    def read(self, splits: list[Split]) -> Rows | None:
        """The rows of these splits; None if only Spark's reader can read them exactly."""
        ...


@dataclass(frozen=True)
class SourceContext:
    """What a source is opened with besides its spec: the Spark session, the table's
    columns as planned (Arrow, and Spark's DDL), its Spark data source's options
    (`SourceKind.spark_options`), the run's storage location (a log's directory) and where
    local files must resolve (os.pathsep-joined; "": anywhere)."""

    spark: SparkSession
    schema: pa.Schema
    ddl: str
    options: dict[str, str]
    storage: str
    roots: str


class SourceKind(Protocol):
    """What planning knows of a kind of source from its spec alone, and how to open one."""

    def columns(self, spec: Any) -> str:
        """The columns it reads, as Spark DDL; SpecError if the spec lacks them."""

    def spark_options(self, spec: Any, schema: pa.Schema, ddl: str) -> dict[str, str]:
        """Its Spark data source's options (`sources.py`), the table's columns given."""

    def line_records(self, spec: Any) -> bool:
        """Whether its records are lines of text (a bad one's text is a dead letter's)."""

    def reads_by_name(self, spec: Any) -> bool:
        """Whether Spark's reader parses only the columns a query reads (by name)."""

    def wall_clock(self, spec: Any) -> bool:
        """Whether its rows' times are real (datagen's are synthetic: no latency)."""

    def open(self, spec: Any, ctx: SourceContext) -> Source:
        """The source, opened for a run."""


class Source(Protocol):
    table: str
    schema: pa.Schema  # the rows' columns, without `__end`

    @property
    def batches(self) -> FileBatches | None:
        """A files table's reader through Spark, for the steps the driver cannot parse
        exactly as Spark would (None: the driver reads every step)."""

    @property
    def reads_ahead(self) -> bool:
        """Whether a step's input is known before the query asks (files listed, records
        logged, both immutable), so a run's first batch can be read while its query
        starts."""

    @property
    def parses_in_driver(self) -> bool:
        """Whether the driver makes every step's rows (then Spark only copies them)."""

    @property
    def has_lines(self) -> bool:
        """Whether bad records come with their text (`__line`) for Spark's reader to flag."""

    @property
    def input_log(self) -> Callable[[], InputLog] | None:
        """The log the source reads, which checkpoints let go of below their offset (None:
        the input is not the pipeline's to trim)."""

    @property
    def release_below(self) -> Callable[[Offset], None] | None:
        """Told, after checkpoints were deleted, the table's offset in the oldest one a run
        may restore (or the live offset, with none left): the input below it is never read
        again (a log's records are deleted, a replication slot advanced; None: nothing to
        let go)."""

    @property
    def on_durable(self) -> Callable[[Offset], None] | None:
        """Told the table's offset in each durable checkpoint (None: nothing to tell)."""

    def first_offset(self, restored: Offset) -> Offset:
        """Where a run starts: the restored offset, or a first run's (resolved now)."""

    def step_end(self, start: Offset) -> Offset:
        """Where a step from `start` ends: at the input's end now, at most a step's worth."""

    def driver_step_end(self, start: Offset) -> int | None:
        """Where a step the driver reads before the query starts ends (None: no input
        yet, or the query decides)."""

    def splits(self, start: Offset, end: Offset) -> list[Split]:
        """The reads of the step [start, end)."""

    def read(self, splits: list[Split]) -> Rows | None:
        """The rows of these splits, read in the driver; None if Spark must read them
        (`batches`)."""

    def split_reader(self) -> SplitReader | None:
        """A reader of its splits for another process (None: only the driver reads them)."""

    def to_batches(self, splits: list[Split]) -> None:
        """Point `batches` at these splits (nothing for a source without `batches`)."""

    def spark_query(
        self, start: Offset, ends: Callable[[], str]
    ) -> tuple[type[DataSource], dict[str, str]]:
        """The Spark data source whose micro-batches trigger steps from `start`, and its
        options (`ends`: the socket where the driver answers `step_end`, for a source
        whose step ends the driver decides)."""

    def waiting(self, offset: Offset) -> bool:
        """Whether there is input beyond `offset`."""

    def lag(self, offset: Offset) -> dict[str, Any]:
        """What waits beyond `offset`: `lag` (None: no end), and per part if it has parts."""

    def dead_letters(self, table: str, bad: pa.Table) -> list[dict[str, Any]]:
        """Records for the dead-letter file of a step's bad records (`__file`,
        `__lineno`, `__line`)."""

    def close(self) -> None: ...


__all__ = [
    "FileSplit",
    "PartitionSplit",
    "RangeSplit",
    "Rows",
    "Source",
    "SourceContext",
    "SourceKind",
    "Split",
    "SplitReader",
    "columns_ddl",
    "spread",
]
