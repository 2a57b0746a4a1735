"""Spark SQL's type names and the Arrow types Spindle keeps them as (as Spark maps them to
Arrow: UTC microsecond timestamps, 32-bit dates)."""

from __future__ import annotations

import pyarrow as pa

TYPE_NAMES: dict[str, pa.DataType] = {
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

__all__ = ["TYPE_NAMES"]
