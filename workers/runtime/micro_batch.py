"""What Spark (or the driver) hands the dataflow per micro-batch (`MicroBatch`), with what
the step's metrics need."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from .sources import END

# A step's Spark result as Arrow: the rows job's (every row-level dataflow input).
JobTables = pa.Table


def min_event_us(column: pa.ChunkedArray | pa.Array) -> int | None:
    """The oldest event time in a timestamp column, as UTC microseconds (None if no value)."""
    t = column.type
    assert isinstance(t, pa.TimestampType)
    us = pc.cast(column, pa.timestamp("us", tz=t.tz)).cast(pa.int64())
    v = pc.min(us).as_py()
    return None if v is None else int(v)


@dataclass
class MicroBatch:
    """One micro-batch as the dataflow gets it, with what the step's metrics need."""

    end: int | None  # the batch's end offset (None: an empty batch)
    rows_in: int  # rows fed to the dataflow: parsed, passed the filter (and a side's)
    oldest: int | None  # their oldest event time (UTC microseconds), if known
    bad: pa.Table | None  # dead letters: __file, __lineno, __line
    tables: dict[str, pa.Table] = field(default_factory=dict)  # dataflow input -> rows


@dataclass(frozen=True)
class ArrowShape:
    """How rows a source read as Arrow (its columns, then `__end`) become a micro-batch of
    the dataflow's `source` input: renamed and cast to `schema`, padded with the columns
    the source lacks (`padded`, as nulls), with the oldest `event_time`. Plain data, so an
    executor that read the rows shapes them as the driver would."""

    schema: pa.Schema
    padded: pa.Schema | None
    event_time: str | None

    def batch(self, rows: pa.Table, bad: pa.Table | None, name: str) -> MicroBatch:
        """The micro-batch of these rows as dataflow input `name` (None if none and no
        bad record)."""
        if rows.num_rows == 0 and bad is None:
            return MicroBatch(None, 0, None, None)
        table = rows.drop_columns([END]).rename_columns(self.schema.names).cast(self.schema)
        if self.padded is not None:
            table = padded_to(table, self.padded)
        et = self.event_time
        oldest = None if et is None else min_event_us(table.column(et))
        end = pc.max(rows.column(END)).as_py() if rows.num_rows else 0
        return MicroBatch(int(end), table.num_rows, oldest, bad, {name: table})


def padded_to(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """`rows` with every column of `schema`, those it lacks as nulls (`Plan.padded`)."""
    n = rows.num_rows
    have = set(rows.column_names)
    cols = [rows.column(f.name) if f.name in have else pa.nulls(n, f.type) for f in schema]
    return pa.table(cols, schema=schema)
