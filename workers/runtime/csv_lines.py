"""A step's CSV files read in the driver, each parsed by `pipeline_spec.formats.csv_lines`
(exactly Spark's rows, or None: Spark reads the step)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from pipeline_spec.formats import csv_lines

from .driver_files import read_files

parses_in_driver = csv_lines.parses_exactly


def read_csv_files(paths: Sequence[str], schema: pa.Schema) -> pa.Table | None:
    """The rows of CSV files (in order; each file's first record a header, skipped) as
    `schema`'s columns, or None if Spark must read them."""
    return read_files(paths, schema, csv_lines.parse)


__all__ = ["parses_in_driver", "read_csv_files"]
