"""Avro values decoded with a table's writer schema (`avro_schema`), after the Confluent
framing (magic byte 0, 4-byte schema id, not looked up) if `avro_framing` says so. A value
that does not decode, or does not decode to exactly its bytes, or whose fields do not
convert to the columns' types, does not parse. A decimal column takes an Avro decimal (at
the writer's scale), an int or long, or a numeric string, converted as Spark converts
decimal text (`decimals`: HALF_UP to the column's scale)."""

from __future__ import annotations

import io
from decimal import Decimal
from typing import Any

import pyarrow as pa

from .decimals import NotDecimal, spark_decimal


class AvroValues:
    def __init__(self, avro_schema: dict[str, Any], framing: str, schema: pa.Schema) -> None:
        import fastavro

        self._schema = fastavro.parse_schema(avro_schema)
        self._read = fastavro.schemaless_reader
        self._skip = 5 if framing == "confluent" else 0
        self.schema = schema
        self._decimals = {f.name: f.type for f in schema if pa.types.is_decimal(f.type)}

    def _datum(self, value: bytes | None) -> dict[str, Any] | None:
        if not value or (self._skip and (len(value) < self._skip or value[0] != 0)):
            return None
        buf = io.BytesIO(value[self._skip :])
        try:
            record = self._read(buf, self._schema, None)
        except Exception:  # fastavro raises what the bytes make it raise
            return None
        if not isinstance(record, dict) or buf.tell() != len(value) - self._skip:
            return None
        row = {c: record.get(c) for c in self.schema.names}
        for c, t in self._decimals.items():
            v = row[c]
            if v is None:
                continue
            # A decimal logical type's value (at the writer's scale) or an integer, by
            # Spark's rule for decimal text: HALF_UP to the column's scale; a string too.
            if isinstance(v, bool) or not isinstance(v, Decimal | int | str):
                return None
            try:
                row[c] = spark_decimal(v if isinstance(v, str) else str(v), t)
            except NotDecimal:
                return None
        return row

    def parse(self, values: list[bytes | None]) -> tuple[pa.Table, set[int]]:
        """The values that decode, as the schema's columns, and the indexes of those that
        do not."""
        decoded = [(i, self._datum(v)) for i, v in enumerate(values)]
        rows = [(i, r) for i, r in decoded if r is not None]
        bad = {i for i, r in decoded if r is None}
        try:
            return pa.Table.from_pylist([r for _, r in rows], schema=self.schema), bad
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass
        # Some field does not convert: find the records, one at a time.
        good = []
        for i, r in rows:
            try:
                good.append(pa.Table.from_pylist([r], schema=self.schema))
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                bad.add(i)
        return (pa.concat_tables(good) if good else self.schema.empty_table()), bad


__all__ = ["AvroValues"]
