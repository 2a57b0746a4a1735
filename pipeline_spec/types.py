"""Spark SQL's column type names and the Arrow types Spindle keeps them as (as Spark maps
them to Arrow: UTC microsecond timestamps, 32-bit dates, 128-bit decimals). One table for
every place a type is named: SQL tables' schemas, log and Kafka streams, and CAST."""

from __future__ import annotations

import re

import pyarrow as pa

SIMPLE_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "varchar": pa.string(),
    "boolean": pa.bool_(),
    "tinyint": pa.int8(),
    "byte": pa.int8(),
    "smallint": pa.int16(),
    "short": pa.int16(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "long": pa.int64(),
    "float": pa.float32(),
    "real": pa.float32(),
    "double": pa.float64(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}
MAX_PRECISION = 38
# Spark's DECIMAL, DEC and NUMERIC, with an optional (precision[, scale]); bare: (10, 0).
_DECIMAL = re.compile(r"^(?:decimal|dec|numeric)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?$")
TYPE_NAMES_DOC = f"{', '.join(SIMPLE_TYPES)}, decimal(p, s)"


def arrow_type(name: str) -> pa.DataType:
    """The Arrow type of a Spark SQL type name (case and surrounding blanks ignored);
    ValueError saying why for any other name, or a decimal Spark does not take."""
    text = name.strip().lower()
    simple = SIMPLE_TYPES.get(text)
    if simple is not None:
        return simple
    m = _DECIMAL.match(text)
    if m is None:
        raise ValueError(f"type {name!r} is not one of {TYPE_NAMES_DOC}")
    precision = int(m.group(1)) if m.group(1) is not None else 10
    scale = int(m.group(2)) if m.group(2) is not None else 0
    if not 1 <= precision <= MAX_PRECISION:
        raise ValueError(f"type {name!r}: a decimal's precision is 1 to {MAX_PRECISION}")
    if scale > precision:
        raise ValueError(f"type {name!r}: a decimal's scale is at most its precision")
    return pa.decimal128(precision, scale)


def check_types(columns: dict[str, str]) -> dict[str, str]:
    """`columns` (column -> type name) if every type is one `arrow_type` takes; ValueError
    naming the first column that is not."""
    for col, t in columns.items():
        try:
            arrow_type(t)
        except ValueError as e:
            raise ValueError(f"{col}: {e}") from None
    return columns


def arrow_schema(columns: dict[str, str]) -> pa.Schema:
    """The Arrow schema of `columns` (column -> type name, all valid)."""
    return pa.schema([(c, arrow_type(t)) for c, t in columns.items()])


__all__ = [
    "MAX_PRECISION",
    "SIMPLE_TYPES",
    "TYPE_NAMES_DOC",
    "arrow_schema",
    "arrow_type",
    "check_types",
]
