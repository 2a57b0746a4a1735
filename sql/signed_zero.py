"""-0.0 and 0.0 as one value where rows are matched: SQL compares them equal (so GROUP BY,
DISTINCT, join keys and partitions take them as one, as Spark and DuckDB do), but the
engine's operators hash and encode a double's bits, which differ. Every floating-point
column an operator sees is made 0.0 where it is -0.0 (adding 0.0 does, and nothing else:
NaN stays NaN), which no view can tell apart otherwise: a double is never cast to a string,
and a division by either zero fails."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def positive_zeros(table: pa.Table) -> pa.Table:
    """`table` with -0.0 as 0.0 in its floating-point columns."""
    for i, f in enumerate(table.schema):
        if pa.types.is_floating(f.type):
            table = table.set_column(i, f, pc.add(table.column(i), pa.scalar(0.0, f.type)))
    return table


__all__ = ["positive_zeros"]
