"""The `log` source: records pushed through the ingest API into the pipeline's input log
(`storage_engine.input_log`), one offset per record, a step at most
`max_records_per_step` of them. A step's records are one split, read in the driver."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource

from pipeline_spec import model as S
from pipeline_spec.offsets import Offset, count
from storage_engine.input_log import InputLog

from ..sources import END, LogSource, arrow_schema_option, log_batches
from .letters import line_letters
from .source import RangeSplit, Rows, SourceContext, Split, columns_ddl


class LogInput:
    batches = None
    reads_ahead = True
    parses_in_driver = True
    has_lines = False
    on_durable = None  # the log is trimmed when checkpoints go (`release_below`)

    def __init__(self, spec: S.LogSource, ctx: SourceContext) -> None:
        self.spec, self.table = spec, spec.table
        self.schema = ctx.schema
        self._options = ctx.options
        self._dir = spec.log_dir(ctx.storage)

    def input_log(self) -> InputLog:
        """The pipeline's log of this table, which checkpoints let go of below their
        offset."""
        return InputLog(self._dir, self.schema)

    def release_below(self, offset: Offset) -> None:
        """No run will read the log's records below `offset` again: they go."""
        self.input_log().truncate_below(count(offset))

    def first_offset(self, restored: Offset) -> Offset:
        return restored

    def step_end(self, start: Offset) -> Offset:
        return min(self.input_log().end(), count(start) + self.spec.max_records_per_step)

    def driver_step_end(self, start: Offset) -> int | None:
        end = count(self.step_end(start))
        return end if end > count(start) else None

    def splits(self, start: Offset, end: Offset) -> list[Split]:
        return [RangeSplit(count(start), count(end), count(end))]

    def to_batches(self, splits: list[Split]) -> None:
        pass  # read in the driver

    def read(self, splits: list[Split]) -> Rows:
        return self.split_reader().read(splits)

    def split_reader(self) -> LogReader:
        return LogReader(self._dir, self.schema)

    def spark_query(
        self, start: Offset, ends: Callable[[], str]
    ) -> tuple[type[DataSource], dict[str, str]]:
        return LogSource, {**self._options, "start": str(count(start)), "path": self._dir}

    def waiting(self, offset: Offset) -> bool:
        return self.input_log().end() > count(offset)

    def lag(self, offset: Offset) -> dict[str, Any]:
        return {"lag": max(0, self.input_log().end() - count(offset))}

    def dead_letters(self, table: str, bad: pa.Table) -> list[dict[str, Any]]:
        return line_letters(table, bad, "log", None)

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class LogReader:
    """Ranges of a table's input log read in any process that sees its directory (the
    run's storage: an executor on the driver's host, or a shared disk)."""

    directory: str
    schema: pa.Schema

    def read(self, splits: list[Split]) -> Rows:
        log = InputLog(self.directory, self.schema)
        batches = [
            b
            for s in splits
            if isinstance(s, RangeSplit)
            for b in log_batches(log, s.start, s.stop)
        ]
        schema = pa.schema([*self.schema, pa.field(END, pa.int64())])
        return pa.Table.from_batches(batches, schema=batches[0].schema if batches else schema), None


class LogKind:
    def columns(self, spec: S.LogSource) -> str:
        return columns_ddl(spec.columns())  # an upserted table's op column too

    def spark_options(self, spec: S.LogSource, schema: pa.Schema, ddl: str) -> dict[str, str]:
        return {
            "stream": spec.stream,
            "schema": ddl,
            "arrow_schema": arrow_schema_option(schema),
            "max_records_per_step": str(spec.max_records_per_step),
        }

    def line_records(self, spec: S.LogSource) -> bool:
        return False  # records are parsed when pushed (`pipeline_spec.formats.bodies`)

    def reads_by_name(self, spec: S.LogSource) -> bool:
        return False  # the driver reads the log

    def wall_clock(self, spec: S.LogSource) -> bool:
        return True

    def open(self, spec: S.LogSource, ctx: SourceContext) -> LogInput:
        return LogInput(spec, ctx)


KIND = LogKind()

__all__ = ["KIND", "LogInput"]
