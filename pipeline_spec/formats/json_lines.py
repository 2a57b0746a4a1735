"""A `files` table's JSON-lines file parsed by Arrow's JSON reader, when that gives exactly
the rows Spark's JSON reader would (`workers.runtime.file_batches`); otherwise nothing, and Spark
reads the step.

Spark stays the reference: a step is taken here only when every file is canonical JSON
lines — each line one object, alone (its first byte `{`, its last `}`), lines ending at
`\\n` or `\\r\\n`, no blank line, valid UTF-8 (a leading BOM dropped, as Spark does) — and
Arrow parses every line into the schema's types, one row per line. Anything else goes to
Spark, which decides what is a dead letter: a value that does not convert, a line Arrow
reads otherwise (Spark reads only a line's first object; Arrow would read them all), a
number Spark takes and Arrow does not (`1e400`). Arrow's reader also crashes the process on
a first value `null`, which the line check keeps from it. tests/workers/runtime/test_json_lines.py
compares both readers over a corpus of edge cases.

Decimal columns are read from each line's text by Python's JSON parser and Spark's rule
(`decimals.json_decimals`: a number's own digits, never a double); Arrow reads the other
columns. A value that does not convert leaves the file to Spark, which makes its record a
dead letter.
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.json as pjson

from .decimals import json_decimals

_BOM = b"\xef\xbb\xbf"
# Column types whose JSON values Arrow converts exactly as Spark does, or refuses (a 32-bit
# float is left out: Arrow rounds through a double, Spark rounds once).
_TYPES = (
    pa.bool_(),
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.float64(),
    pa.string(),
    pa.timestamp("us", tz="UTC"),
)


def parses_exactly(schema: pa.Schema) -> bool:
    """Whether a JSON table of these columns can be read here (`parse`)."""
    return all(f.type in _TYPES or isinstance(f.type, pa.Decimal128Type) for f in schema)


def parse(data: bytes, schema: pa.Schema) -> pa.Table | None:
    """A JSON-lines file's rows as `schema`'s columns, or None if Spark must read it (see
    the module's docstring)."""
    data = data.removeprefix(_BOM)
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")
        if b"\r" in data:
            return None  # Spark ends lines at a lone \r too
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    lines = _object_lines(data)
    if lines is None:
        return None
    if lines == 0:
        return schema.empty_table()
    decimals = {f.name: f.type for f in schema if isinstance(f.type, pa.Decimal128Type)}
    rest = pa.schema([f for f in schema if f.name not in decimals])
    try:
        table = pjson.read_json(
            io.BytesIO(data),
            parse_options=pjson.ParseOptions(
                explicit_schema=rest, unexpected_field_behavior="ignore"
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    # Each line begins with an object, so it gave at least one row: as many rows as lines
    # means each line is that object alone.
    if table.num_rows != lines:
        return None
    if decimals:
        values, bad = json_decimals(data.split(b"\n")[:lines], decimals)
        if bad:
            return None
        for name, column in values.items():
            table = table.append_column(name, column)
    return table.select(schema.names)


def _object_lines(data: bytes) -> int | None:
    """The number of lines if every line begins with `{` and ends with `}` (lines end at
    `\\n`; the last may not), else None."""
    n = len(data) - 1 if data.endswith(b"\n") else len(data)
    if n <= 0:
        return 0 if n == 0 else None
    if data[:1] != b"{" or data[n - 1 : n] != b"}":
        return None
    ends = []
    i = data.find(b"\n", 0, n)
    while i >= 0:
        ends.append(i)
        i = data.find(b"\n", i + 1, n)
    if ends:
        at = np.array(ends)
        raw = np.frombuffer(data, np.uint8)
        if not ((raw[at - 1] == ord("}")).all() and (raw[at + 1] == ord("{")).all()):
            return None
    return len(ends) + 1


__all__ = ["parse", "parses_exactly"]
