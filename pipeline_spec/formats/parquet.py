"""A `files` table's Parquet file read by Arrow, when that gives exactly the rows Spark's
Parquet reader would (`workers.runtime.file_batches`); otherwise nothing, and Spark reads the step.

Spark stays the reference. A step is taken here only when, in every file, each column the
table reads is there under exactly its name (Spark matches names regardless of case, so a
name present in two cases is left to it) with exactly the column's Arrow type, or a decimal
that widens into it as Spark 4's (vectorized) reader widens it: no smaller scale and no
fewer integral digits (decimal(15, 2) read as decimal(17, 4) or (38, 2); measured). Spark's
other conversions (an int32 column read as bigint, milliseconds as microseconds, INT96 or
zone-less timestamps, a column absent from a file read as nulls) are not repeated here. A
narrower decimal is refused by Spark's reader, naming only its scratch link to the file:
here it fails the step naming the file and the column (`NarrowerDecimal`).
A file Arrow cannot open or read goes to Spark too, which decides what that means.
tests/workers/runtime/test_parquet_files.py compares both readers over a corpus of such files.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq


class NarrowerDecimal(ValueError):
    """File `index` of a step has a decimal column that Spark's Parquet reader does not read
    as the table's decimal type (a larger scale or more integral digits)."""

    def __init__(
        self, index: int, file: str, column: str, found: pa.DataType, wanted: pa.DataType
    ) -> None:
        super().__init__(file, column, found, wanted)
        self.index, self.column, self.found, self.wanted = index, column, found, wanted
        self.file = file  # its path; a caller that fetched it names it as listed

    def __str__(self) -> str:
        f, w = self.found, self.wanted
        return (
            f"{self.file}: column {self.column!r} is decimal({f.precision},{f.scale}), the table "
            f"declares decimal({w.precision},{w.scale}): Spark's Parquet reader does not "
            "narrow a decimal; declare one with at least the file's scale and integral digits"
        )


def read(path: str, index: int, schema: pa.Schema) -> pa.Table | None:
    """The rows of Parquet file `path` (the `index`th of its step) as `schema`'s columns,
    or None if Spark must read it (see the module's docstring); NarrowerDecimal for a file
    Spark would fail on."""
    try:
        with pq.ParquetFile(path) as f:
            _check_decimals(index, path, f.schema_arrow, schema)
            if not _same_columns(f.schema_arrow, schema):
                return None
            table = f.read(columns=schema.names, use_threads=False)
    except (OSError, pa.ArrowException):
        return None
    return table.select(schema.names).cast(schema)  # decimals widened exactly


def _same_columns(found: pa.Schema, wanted: pa.Schema) -> bool:
    lowered = [n.lower() for n in found.names]
    for f in wanted:
        if found.names.count(f.name) != 1 or lowered.count(f.name.lower()) != 1:
            return False
        t = found.field(f.name).type
        if t != f.type and not _widens(t, f.type):
            return False
    return True


def _check_decimals(index: int, path: str, found: pa.Schema, wanted: pa.Schema) -> None:
    for f in wanted:
        if isinstance(f.type, pa.Decimal128Type) and f.name in found.names:
            t = found.field(f.name).type
            if pa.types.is_decimal(t) and t != f.type and not _widens(t, f.type):
                raise NarrowerDecimal(index, path, f.name, t, f.type)


def _widens(t: pa.DataType, to: pa.DataType) -> bool:
    """Whether Spark's Parquet reader reads decimal `t` as decimal `to`, exactly."""
    return (
        isinstance(t, pa.Decimal128Type)
        and isinstance(to, pa.Decimal128Type)
        and to.scale >= t.scale
        and to.precision - to.scale >= t.precision - t.scale
    )


__all__ = ["NarrowerDecimal", "read"]
