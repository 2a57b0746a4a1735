"""A step's JSON-lines files read in the driver, each parsed by
`pipeline_spec.formats.json_lines` (exactly Spark's rows, or None: Spark reads the step)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from pipeline_spec.formats import json_lines

from .driver_files import read_files

parses_in_driver = json_lines.parses_exactly


def read_json_lines(paths: Sequence[str], schema: pa.Schema) -> pa.Table | None:
    """The rows of JSON-lines files (in order) as `schema`'s columns, or None if Spark must
    read them."""
    return read_files(paths, schema, json_lines.parse)


__all__ = ["parses_in_driver", "read_json_lines"]
