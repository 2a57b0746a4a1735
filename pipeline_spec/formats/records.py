"""Newline-delimited records (JSON objects, or CSV records) parsed by Arrow's readers into a
schema, decimal columns converted by Spark's rule from their own text (`decimals`: Arrow's
decimal parsing rounds and wraps otherwise). Shared by the ingest API's bodies and Kafka's
values, which differ only in what they do with a record that does not convert."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson

from .decimals import decimal_array, json_decimals

# What Arrow's readers raise on input that does not parse into the schema.
ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError)


def read_records(
    body: bytes, fmt: str, schema: pa.Schema, *, header: bool
) -> tuple[pa.Table, dict[int, str]]:
    """`body`'s records as `schema`'s columns, and the records (by position) whose decimal
    value does not convert, with why (`"<column>: <why>"`; NULL in the table). `header`: a
    CSV body's first record names its columns. Raises one of ARROW_ERRORS, or KeyError for
    a CSV header without a schema's column."""
    decimals = {f.name: f.type for f in schema if isinstance(f.type, pa.Decimal128Type)}
    if fmt == "csv":
        # Decimal columns as text: Spark's rule converts them below.
        as_text = pa.schema([f.with_type(pa.string()) if f.name in decimals else f for f in schema])
        table = pcsv.read_csv(
            io.BytesIO(body),
            read_options=pcsv.ReadOptions(column_names=None if header else schema.names),
            convert_options=pcsv.ConvertOptions(
                column_types=as_text, include_columns=schema.names, strings_can_be_null=True
            ),
        )
        arrays: dict[str, pa.Array] = {}
        bad: dict[int, str] = {}
        for c, t in decimals.items():
            arrays[c], wrong = decimal_array(table.column(c).to_pylist(), t)
            for i, why in wrong.items():
                bad.setdefault(i, f"{c}: {why}")
    else:
        table = pjson.read_json(
            io.BytesIO(body),
            parse_options=pjson.ParseOptions(
                explicit_schema=pa.schema([f for f in schema if f.name not in decimals]),
                unexpected_field_behavior="ignore",
            ),
        )
        lines = [line for line in body.split(b"\n") if line.strip()]
        arrays, bad = json_decimals(lines, decimals) if decimals else ({}, {})
    for c, a in arrays.items():
        table = table.drop_columns([c]) if c in table.column_names else table
        table = table.append_column(c, a)
    return table.select(schema.names).cast(schema), bad


__all__ = ["ARROW_ERRORS", "read_records"]
