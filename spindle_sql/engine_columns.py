"""The columns the engine's stateful operators see, made fit for matching rows:

- -0.0 as 0.0. SQL compares them equal (so GROUP BY, DISTINCT, join keys and partitions
  take them as one, as Spark and DuckDB do), but the operators hash and encode a double's
  bits, which differ. Adding 0.0 makes -0.0 0.0 and changes nothing else (NaN stays NaN);
  no view can tell the two apart otherwise: a double is never cast to a string, and a
  division by either zero fails.
- A column of NULL's own type (`GROUP BY NULL`, `SELECT DISTINCT NULL AS x`) as a boolean
  column of NULLs: the engine's kernels compare, sort and encode typed values only. The
  operator's output has it back as NULL's type, which the plan gave it."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def engine_type(t: pa.DataType) -> pa.DataType:
    """The type an operator's column of type `t` has."""
    return pa.bool_() if pa.types.is_null(t) else t


def to_engine(table: pa.Table) -> pa.Table:
    """`table` as an operator takes it: -0.0 as 0.0, NULL-typed columns as booleans."""
    for i, f in enumerate(table.schema):
        if pa.types.is_floating(f.type):
            table = table.set_column(i, f, pc.add(table.column(i), pa.scalar(0.0, f.type)))
        elif pa.types.is_null(f.type):
            table = table.set_column(i, f.with_type(pa.bool_()), pa.nulls(len(table), pa.bool_()))
    return table


def from_engine(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """An operator's output with the columns that `schema` types as NULL's back as such."""
    for i, f in enumerate(schema):
        if pa.types.is_null(f.type):
            table = table.set_column(i, table.field(i).with_type(f.type), pa.nulls(len(table)))
    return table


__all__ = ["engine_type", "from_engine", "to_engine"]
