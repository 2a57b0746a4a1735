"""A body of records pushed to a pipeline (the ingest API): NDJSON or CSV with a header,
parsed with the stream's declared schema, all or nothing: a bad record rejects the whole
body, naming the problem (`BadBody`).

Decimal columns take what Spark's JSON and CSV readers take, as they convert it
(`decimals`: a JSON number from its own digits, never a double, or a string; rounded
HALF_UP to the scale); a value with too many digits before the point rejects the body."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from .records import ARROW_ERRORS, read_records


class BadBody(ValueError):
    """A body that does not parse: why, and where (`details`: its line, record, field)."""

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


def parse_body(body: bytes, fmt: str, schema: pa.Schema) -> pa.Table:
    """`body`'s records (`fmt`: `csv`, else NDJSON) as `schema`'s columns; BadBody if any
    record does not parse."""
    if not body.strip():
        raise BadBody("empty body: send NDJSON (one JSON object per line) or CSV")
    text = _utf8(body)
    lines = [] if fmt == "csv" else _check_records(text, schema)
    try:
        table, bad = read_records(body, fmt, schema, header=True)
    except (*ARROW_ERRORS, KeyError) as e:
        raise BadBody(
            f"records do not parse as {fmt} with the stream's schema: {e}",
            details={"schema": {f.name: str(f.type) for f in schema}},
        ) from None
    if bad:
        i = min(bad)
        field, _, why = bad[i].partition(": ")
        if fmt == "csv":
            raise BadBody(
                f"record {i + 1} (after the header), field {field!r}: {why}",
                details={"record": i + 1, "field": field},
            )
        raise BadBody(
            f"line {lines[i]}, field {field!r}: {why}",
            details={"line": lines[i], "field": field},
        )
    return table


def _utf8(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        line = body.count(b"\n", 0, e.start) + 1
        raise BadBody(
            f"line {line}: not valid UTF-8 (byte {body[e.start]:#04x} at offset {e.start})",
            details={"line": line},
        ) from None


def _check_records(text: str, schema: pa.Schema) -> list[int]:
    """Every non-blank line is one JSON object with only the schema's fields, checked in
    Python before Arrow's reader sees the body: that reader takes the process down on some
    malformed input (a bare `null` line) instead of raising. The records' line numbers."""
    names = set(schema.names)
    lines = []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        lines.append(n)
        try:
            record = json.loads(line)
        except ValueError as e:
            raise BadBody(f"line {n}: not JSON: {e}", details={"line": n}) from None
        if not isinstance(record, dict):
            raise BadBody(
                f"line {n}: a record must be a JSON object, not {type(record).__name__}",
                details={"line": n},
            )
        unknown = record.keys() - names
        if unknown:
            raise BadBody(
                f"line {n}: unknown field {min(unknown)!r}; the stream's fields are "
                f"{', '.join(schema.names)}",
                details={"line": n, "field": min(unknown)},
            )
    return lines


__all__ = ["BadBody", "parse_body"]
