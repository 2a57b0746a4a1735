"""A `files` table's CSV file parsed with Arrow, when that gives exactly the rows Spark's CSV
reader gives (`workers.runtime.file_batches.CSV_OPTIONS`: RFC 4180 quoting, a header
record, records spanning lines); otherwise nothing, and Spark reads the step.

Spark stays the reference. A file is taken here only when its records are delimited the
way Arrow and Spark's parser (univocity) agree on:

- valid UTF-8 without NUL (a leading byte-order mark is skipped, as Spark skips it);
- one kind of line end, as univocity detects it from the first one: `\\n` (then a `\\r` is
  text to univocity, a line end to Arrow: only in a quoted value, where both keep it), or
  `\\r\\n` for every line end, or `\\r` and no `\\n`; univocity makes such a line end
  inside a quoted value `\\n`, and so does this parse;
- quoting as RFC 4180 writes it: a quote opens a field (right after a comma, a line end or
  the start), or closes it (right before a comma, a line end or the end), or is doubled
  inside a quoted field; none is left open. (Spark reads a stray quote, `ab"c`, `"a"b` or
  `"a" ,` in ways of its own.)

The first record (after empty lines) is the header, skipped unread, as Spark skips it.
Empty lines hold no record, in both; a line of spaces is a record. Every later record must
have one field per column, and every value must convert as Spark converts it
(`csv_values`), checked column by column on the whole file at once. Anything else sends
the step to Spark, which decides what is a dead letter. tests/workers/runtime/test_csv_lines.py
compares both over a corpus of edge cases.
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from . import csv_values

_BOM = b"\xef\xbb\xbf"
_QUOTE = ord('"')
_AROUND_QUOTES = np.array([ord(","), ord("\n"), _QUOTE], np.uint8)
# Univocity detects the line end from the first characters it reads; past these many bytes
# this parse does not rely on it having seen the first line end (a file without `\r` has
# `\n` either way).
_DETECTED_WITHIN = 1 << 16


def parses_exactly(schema: pa.Schema) -> bool:
    """Whether a CSV table of these columns can be read here (`parse`)."""
    return all(csv_values.converts(f.type) for f in schema)


def parse(data: bytes, schema: pa.Schema) -> pa.Table | None:
    """A CSV file's rows (its first record a header, skipped) as `schema`'s columns, or
    None if Spark must read it (see the module's docstring)."""
    if b"\x00" in data:
        return None
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    lines = _one_line_end(data.removeprefix(_BOM))
    body = None if lines is None else _after_header(lines)
    if body is None:
        return None
    if body.count(b"\n") == len(body):
        return schema.empty_table()  # empty lines only
    quoted = b'"' in body
    try:
        strings = pcsv.read_csv(
            io.BytesIO(body),
            read_options=pcsv.ReadOptions(column_names=schema.names),
            parse_options=pcsv.ParseOptions(
                quote_char='"' if quoted else False,
                double_quote=True,
                escape_char=False,
                newlines_in_values=quoted,
                ignore_empty_lines=True,
            ),
            convert_options=pcsv.ConvertOptions(
                column_types={n: pa.string() for n in schema.names},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
                null_values=[],
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None  # a record with too few or too many fields
    columns = []
    for f in schema:
        col = csv_values.convert(strings.column(f.name).combine_chunks(), f.type)
        if col is None:
            return None
        columns.append(col)
    return pa.table(columns, schema=schema)


def _one_line_end(data: bytes) -> bytes | None:
    """The file with its line ends as `\\n`, if it has one kind of them (see the module's
    docstring; a `\\r` left is text, for `_after_header` to check), else None."""
    cr = data.find(b"\r")
    lf = data.find(b"\n")
    if cr < 0 or 0 <= lf < cr:
        return data
    if cr > _DETECTED_WITHIN:
        return None
    if data[cr + 1 : cr + 2] == b"\n":
        crs = data.count(b"\r")
        if crs != data.count(b"\r\n") or crs != data.count(b"\n"):
            return None
        return data.replace(b"\r\n", b"\n")
    return None if lf >= 0 else data.replace(b"\r", b"\n")


def _after_header(data: bytes) -> bytes | None:
    """The records after the header (the first record after empty lines), if every quote of
    the file is where RFC 4180 puts one and every `\\r` is in a quoted value (see the
    module's docstring), else None."""
    start = len(data) - len(data.lstrip(b"\n"))
    if b'"' not in data:
        end = data.find(b"\n", start)
        return None if b"\r" in data else b"" if end < 0 else data[end + 1 :]
    buf = np.frombuffer(data, np.uint8)
    quotes = np.flatnonzero(buf == _QUOTE)
    if quotes.size % 2:
        return None  # a quoted field left open
    # Counted from the start, quotes alternate: an even one opens a field or is the second
    # of a doubled pair, an odd one closes a field or is the first of a pair.
    opening, closing = quotes[0::2], quotes[1::2]
    before = buf[np.maximum(opening - 1, 0)]
    after = buf[np.minimum(closing + 1, buf.size - 1)]
    if not (
        np.all((opening == 0) | np.isin(before, _AROUND_QUOTES))
        and np.all((closing == buf.size - 1) | np.isin(after, _AROUND_QUOTES))
    ):
        return None
    if b"\r" in data:
        inside = np.searchsorted(quotes, np.flatnonzero(buf == ord("\r"))) % 2
        if not np.all(inside):
            return None
    # The header ends at the first line end outside quotes (an even number of them before).
    end = data.find(b"\n", start)
    while end >= 0 and int(np.searchsorted(quotes, end)) % 2:
        end = data.find(b"\n", end + 1)
    return b"" if end < 0 else data[end + 1 :]


__all__ = ["parse", "parses_exactly"]
