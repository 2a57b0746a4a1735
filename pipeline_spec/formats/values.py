"""Record values that arrive one by one (a Kafka record's value) parsed into a schema: JSON
objects, CSV records without a header, or Avro (`avro`). A value that does not parse is a
dead letter, not a failure: `ValueParser.parse` says which."""

from __future__ import annotations

import base64
from typing import Any

import pyarrow as pa

from .avro import AvroValues
from .records import ARROW_ERRORS, read_records


class ValueParser:
    """Values of format `fmt` (`json`, `csv`, `avro`) as `schema`'s columns; an Avro value
    is decoded with `avro_schema`, after `avro_framing`."""

    def __init__(
        self,
        fmt: str,
        schema: pa.Schema,
        avro_schema: dict[str, Any] | None = None,
        avro_framing: str = "none",
    ) -> None:
        self.format = fmt
        self.schema = schema
        self._avro = None if avro_schema is None else AvroValues(avro_schema, avro_framing, schema)

    def parse(self, values: list[bytes | None]) -> tuple[pa.Table, set[int]]:
        """The values that parse, as the schema's columns, and the indexes of those that do
        not. Arrow parses them all at once; only when that fails, one at a time."""
        if self._avro is not None:
            return self._avro.parse(values)
        bad = {i for i, v in enumerate(values) if not v or not _plausible(v, self.format)}
        good = [v for i, v in enumerate(values) if i not in bad]
        try:
            table = self._arrow(good)
            if table.num_rows == len(good):
                return table, bad
        except ARROW_ERRORS:
            pass
        tables = []
        for i, v in enumerate(values):
            if i in bad:
                continue
            try:
                one = self._arrow([v])
            except ARROW_ERRORS:
                one = None
            if one is None or one.num_rows != 1:
                bad.add(i)
            else:
                tables.append(one)
        return (pa.concat_tables(tables) if tables else self.schema.empty_table()), bad

    def letter(self, value: bytes | None) -> str | None:
        """A dead letter's record: the value as text, an Avro value (binary) in base64."""
        if value is not None and self._avro is not None:
            return base64.b64encode(value).decode()
        return None if value is None else value.decode("utf-8", errors="replace")

    def _arrow(self, values: list[Any]) -> pa.Table:
        """The values parsed by Arrow (`records`); ArrowInvalid if a decimal does not
        convert."""
        if not values:
            return self.schema.empty_table()
        # A record per line: a JSON value's own line breaks are whitespace.
        body = b"\n".join(v.replace(b"\n", b" ").replace(b"\r", b" ") for v in values)
        table, wrong = read_records(body, self.format, self.schema, header=False)
        if wrong:
            raise pa.ArrowInvalid(f"records {sorted(wrong)} do not convert to a decimal column")
        return table


def _plausible(value: bytes, fmt: str) -> bool:
    """Checked before Arrow's reader sees the value: that reader takes the process down on
    a record that is not an object (a bare `null`) instead of raising. One that looks like an
    object but does not parse makes it raise, and is found by parsing one at a time."""
    if fmt == "csv":
        return b"\n" not in value.rstrip(b"\r\n")
    v = value.strip()
    return v[:1] == b"{" and v[-1:] == b"}"


__all__ = ["ValueParser"]
