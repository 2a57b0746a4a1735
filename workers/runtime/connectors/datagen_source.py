"""The `datagen` source: generated rows (clicks, Nexmark), row i a pure function of the
seed and i; the query's own reader decides where steps end (wall clock, `rows_per_second`).
A step's rows are one split, generated in the driver."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource

from pipeline_spec import model as S
from pipeline_spec.offsets import Offset, count

from ..sources import CLICKS_SCHEMA, NEXMARK_SCHEMA, DatagenSource, datagen_batches
from .letters import line_letters
from .source import RangeSplit, Rows, SourceContext, Split


class DatagenInput:
    batches = None
    reads_ahead = False
    parses_in_driver = True
    has_lines = False
    input_log = None
    release_below = None
    on_durable = None

    def __init__(self, spec: S.DatagenSource, ctx: SourceContext) -> None:
        self.spec, self.table = spec, spec.table
        self.schema = ctx.schema
        self._options = ctx.options

    def first_offset(self, restored: Offset) -> Offset:
        return restored

    def step_end(self, start: Offset) -> Offset:
        # Steps end where the query's reader says (wall clock); asked, at most a step's rows.
        at = count(start) + self.spec.max_rows_per_step
        return at if self.spec.limit is None else min(at, self.spec.limit)

    def driver_step_end(self, start: Offset) -> int | None:
        return None  # the query's reader paces the rows

    def splits(self, start: Offset, end: Offset) -> list[Split]:
        return [RangeSplit(count(start), count(end), count(end))]

    def to_batches(self, splits: list[Split]) -> None:
        pass  # generated in the driver

    def read(self, splits: list[Split]) -> Rows:
        return self.split_reader().read(splits)

    def split_reader(self) -> DatagenReader:
        return DatagenReader(dict(self._options))

    def spark_query(
        self, start: Offset, ends: Callable[[], str]
    ) -> tuple[type[DataSource], dict[str, str]]:
        return DatagenSource, {**self._options, "start": str(count(start))}

    def waiting(self, offset: Offset) -> bool:
        return self.spec.limit is None or count(offset) < self.spec.limit

    def lag(self, offset: Offset) -> dict[str, Any]:
        return {"lag": None}  # no end

    def dead_letters(self, table: str, bad: pa.Table) -> list[dict[str, Any]]:
        return line_letters(table, bad, "datagen", None)

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class DatagenReader:
    """Ranges of generated rows, made in any process (row i depends on the seed and i)."""

    options: dict[str, str]

    def read(self, splits: list[Split]) -> Rows:
        batches = [
            b
            for s in splits
            if isinstance(s, RangeSplit)
            for b in datagen_batches(self.options, s.start, s.stop, s.end)
        ]
        return pa.Table.from_batches(batches, schema=batches[0].schema), None


class DatagenKind:
    def columns(self, spec: S.DatagenSource) -> str:
        return NEXMARK_SCHEMA if spec.generator == "nexmark" else CLICKS_SCHEMA

    def spark_options(self, spec: S.DatagenSource, schema: pa.Schema, ddl: str) -> dict[str, str]:
        return {
            "generator": spec.generator,
            "seed": str(spec.seed),
            "rows_per_second": str(spec.rows_per_second),
            "max_rows_per_step": str(spec.max_rows_per_step),
            "users": str(spec.users),
            **({"limit": str(spec.limit)} if spec.limit else {}),
        }

    def line_records(self, spec: S.DatagenSource) -> bool:
        return False

    def reads_by_name(self, spec: S.DatagenSource) -> bool:
        return False  # generated in the driver

    def wall_clock(self, spec: S.DatagenSource) -> bool:
        # `ts` is synthetic (2024-01-01 + i / rows_per_second, so that row i is a pure
        # function of seed and i): no latency against it.
        return False

    def open(self, spec: S.DatagenSource, ctx: SourceContext) -> DatagenInput:
        return DatagenInput(spec, ctx)


KIND = DatagenKind()

__all__ = ["KIND", "DatagenInput"]
