"""A step's Parquet files read in the driver, each by `pipeline_spec.formats.parquet`
(exactly Spark's rows, or None: Spark reads the step)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import pyarrow as pa

from pipeline_spec.formats import parquet
from pipeline_spec.formats.parquet import NarrowerDecimal

from .driver_files import MAX_FILE_BYTES


def read_parquet_files(paths: Sequence[str], schema: pa.Schema) -> pa.Table | None:
    """The rows of Parquet files (in order) as `schema`'s columns, or None if Spark must
    read them; NarrowerDecimal for a file Spark would fail on."""
    tables = []
    for i, path in enumerate(paths):
        try:
            if os.path.getsize(path) > MAX_FILE_BYTES:
                return None
        except OSError:
            return None
        table = parquet.read(path, i, schema)
        if table is None:
            return None
        tables.append(table)
    return pa.concat_tables(tables) if tables else schema.empty_table()


__all__ = ["NarrowerDecimal", "read_parquet_files"]
