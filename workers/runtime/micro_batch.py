"""What Spark (or the driver) hands the dataflow per micro-batch (`MicroBatch`), with what
the step's metrics need."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

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
