"""A step's files read in the driver, each whole, by a format's parser (`json_lines`,
`csv_lines`); None as soon as one file must go to Spark, which then reads the step."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import pyarrow as pa

# The driver holds a file's bytes and its rows at once, where Spark streams them.
MAX_FILE_BYTES = 256 << 20


def read_files(
    paths: Sequence[str], schema: pa.Schema, parse: Callable[[bytes, pa.Schema], pa.Table | None]
) -> pa.Table | None:
    """The rows `parse` gives for each file's bytes, in order, or None if it gives None
    for any (or a file is larger than MAX_FILE_BYTES)."""
    tables = []
    for path in paths:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size > MAX_FILE_BYTES:
                return None
            data = f.read()
        table = parse(data, schema)
        if table is None:
            return None
        tables.append(table)
    return pa.concat_tables(tables) if tables else schema.empty_table()


__all__ = ["MAX_FILE_BYTES", "read_files"]
