"""A `files` table's CSV files parsed in the driver with Arrow, when that gives exactly the
rows Spark's path would (`FileBatches`' lines, then `csv_fields`' `from_csv`); otherwise
nothing, and Spark reads the step.

Spark stays the reference. A step is taken here only when every file is plain CSV: valid
UTF-8, no quote, backslash or NUL (so no quoting or escaping rules come into play), and
every line after the header (blank lines left out, as Spark does) with exactly one field
per column. Then every value must be one Spark converts the same way, checked column by
column on the whole file at once:

- a string is itself, `""` is NULL;
- a number, boolean or timestamp that is empty, or `null` in any case, spaces around, is
  NULL (Spark's `from_csv` gives NULL and the line is not a dead letter);
- an integer is `-?[0-9]+` in range (Java takes a `+` too, Arrow does not: left to Spark);
- a double is a plain decimal (`1`, `-1.5`, `.5`, `1e-3`), or `NaN`, `Inf`, `-Inf` (Spark's
  names for them);
- a boolean is `true` or `false` in any case;
- a timestamp is `yyyy-mm-dd[Thh:mm[:ss[.ffffff]]]` (UTC, the session's zone), or
  `yyyy-mm-ddThh:mm:ss[.ffffff]` then `Z` or `+hh:mm`/`-hh:mm`; a space may stand for `T`.

Any other value, even one Spark would take, sends the step to Spark, which decides what is a
dead letter. tests/workers/test_csv_lines.py compares both paths over a corpus of edge cases.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from .driver_files import read_files

_TS = pa.timestamp("us", tz="UTC")
_INTS = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
_TYPES = (*_INTS, pa.float64(), pa.bool_(), pa.string(), _TS)
_INT = r"^-?[0-9]+$"
_DOUBLE = r"^-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"
_SPECIAL = {"NaN": "nan", "Inf": "inf", "-Inf": "-inf"}
_DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
_SECONDS = r":[0-9]{2}(\.[0-9]{1,6})?"
_LOCAL = f"^{_DATE}([T ][0-9]{{2}}:[0-9]{{2}}({_SECONDS})?)?$"
_ZONED = f"^{_DATE}[T ][0-9]{{2}}:[0-9]{{2}}{_SECONDS}(Z|[+-][0-9]{{2}}:[0-9]{{2}})$"
_BLANK = b" \t\x0b\x0c"  # what a line may hold and still be blank (as `file_batches`)
_BLANK_LINE = re.compile(rb"^[ \t\x0b\x0c]*$", re.M)


def parses_in_driver(schema: pa.Schema) -> bool:
    """Whether a CSV table of these columns can be read here (`read_csv_files`)."""
    return all(f.type in _TYPES for f in schema)


def read_csv_files(paths: Sequence[str], schema: pa.Schema) -> pa.Table | None:
    """The rows of CSV files (in order; each file's first line a header, skipped) as
    `schema`'s columns, or None if Spark must read them (see the module's docstring)."""
    return read_files(paths, schema, _parse)


def _parse(data: bytes, schema: pa.Schema) -> pa.Table | None:
    if any(c in data for c in (b'"', b"\\", b"\x00")):
        return None
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    # Spark's lines end at \r\n, \n or \r; the first is the header, and blank ones are
    # left out (they hold no record).
    data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    body = data.partition(b"\n")[2].removesuffix(b"\n")
    if _BLANK_LINE.search(body):
        body = b"\n".join(x for x in body.split(b"\n") if x.strip(_BLANK))
    if not body:
        return schema.empty_table()
    try:
        strings = pcsv.read_csv(
            io.BytesIO(body),
            read_options=pcsv.ReadOptions(column_names=schema.names),
            parse_options=pcsv.ParseOptions(
                quote_char=False, escape_char=False, ignore_empty_lines=False
            ),
            convert_options=pcsv.ConvertOptions(
                column_types={n: pa.string() for n in schema.names},
                strings_can_be_null=False,
                null_values=[],
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None  # a line with too few or too many fields
    if strings.num_rows != body.count(b"\n") + 1:
        return None
    columns = []
    for f in schema:
        col = _convert(strings.column(f.name).combine_chunks(), f.type)
        if col is None:
            return None
        columns.append(col)
    return pa.table(columns, schema=schema)


def _convert(s: pa.Array, t: pa.DataType) -> pa.Array | None:
    """Column `s`'s values as type `t`, as Spark converts them, or None if one of them may
    convert otherwise (see the module's docstring)."""
    if t == pa.string():
        return pc.if_else(pc.equal(s, ""), pa.scalar(None, pa.string()), s)
    trimmed = pc.utf8_trim(s, " ")
    null = pc.or_(pc.equal(trimmed, ""), pc.equal(pc.utf8_lower(trimmed), "null"))
    values = pc.if_else(null, pa.scalar(None, pa.string()), s)
    try:
        if t in _INTS:
            return pc.cast(values, t) if _valid(values, _matches(values, _INT)) else None
        if t == pa.float64():
            named = pc.is_in(values, pa.array(list(_SPECIAL)))
            if not _valid(values, pc.or_kleene(_matches(values, _DOUBLE), named)):
                return None
            for name, arrow in _SPECIAL.items():
                values = pc.if_else(pc.equal(values, name), arrow, values)
            return pc.cast(values, t)
        if t == pa.bool_():
            lower = pc.utf8_lower(values)
            ok = pc.is_in(lower, pa.array(["true", "false"]))
            return pc.equal(lower, "true") if _valid(values, ok) else None
        return _timestamps(values)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # out of the type's range


def _matches(values: pa.Array, pattern: str) -> pa.Array:
    return pc.match_substring_regex(values, pattern)


def _valid(values: pa.Array, ok: pa.Array) -> bool:
    """Whether `ok` holds for every non-NULL value."""
    return bool(pc.all(pc.or_kleene(pc.is_null(values), ok)).as_py())


def _timestamps(values: pa.Array) -> pa.Array | None:
    local = _matches(values, _LOCAL)
    if not _valid(values, pc.or_kleene(local, _matches(values, _ZONED))):
        return None
    date_only = pc.equal(pc.utf8_length(values), 10)
    # Arrow reads a zone only with a time; Spark's date alone is its midnight, UTC.
    values = pc.if_else(date_only, pc.binary_join_element_wise(values, "T00:00", ""), values)
    with_zone = pc.if_else(local, pc.binary_join_element_wise(values, "Z", ""), values)
    return pc.cast(with_zone, _TS)


__all__ = ["parses_in_driver", "read_csv_files"]
