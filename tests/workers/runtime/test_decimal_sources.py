"""Decimal values read without Spark (Kafka values as JSON, CSV and Avro; the ingest API's
NDJSON and CSV) against Spark's own readers over a corpus of edge cases: each value is taken
with exactly Spark's value, or refused (a dead letter, a rejected body) where Spark's reader
makes the record bad."""

from __future__ import annotations

import io
from decimal import Decimal
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from backend.errors import InvalidInput
from backend.services import ingest
from pipeline_spec.kafka import KafkaSource
from workers.runtime.connectors.kafka_source import KafkaTable

from .test_json_lines import DECIMALS

TYPES = {"d": "decimal(10,2)", "z": "decimal(5,5)", "w": "decimal(38,2)"}
CSV_FIELDS = [
    "0.1", "1e-3", "1.005", "-1.005", "0.125", "12345678901234567.89", "99999999.995",
    "123456789012", "1E+2", "10.50", " 1.5", "1.5 ", "+1.5", ".5", "5.", '"1,000.5"', '"1,0"',
    "abc", "1e+-3", "\u0661\u0662.5", "1_000", "0x10", "-0", "2E48", "0e50", "1.",
]  # fmt: skip
# What Arrow's CSV reader (Kafka, ingest) reads as NULL, as it does for every column type;
# Spark's CSV reader takes only the empty field as NULL.
ARROW_NULLS = {"", "NULL", "null", "NaN", "nan", "NA", "N/A", "n/a", "#N/A", "-nan", "-NaN"}


def _spark(spark: SparkSession, fmt: str, lines: list[str], column: str) -> list[Any]:
    """Spark's reader over `lines` (PERMISSIVE): each line's value, or "bad"."""
    rdd = spark.sparkContext.parallelize(lines, 1)
    reader = (
        spark.read.schema(f"{column} {TYPES[column]}, __bad string")
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", "__bad")
    )
    rows = (reader.json(rdd) if fmt == "json" else reader.csv(rdd)).collect()
    assert len(rows) == len(lines)
    return ["bad" if r["__bad"] is not None else r[column] for r in rows]


def _kafka(fmt: str, column: str) -> KafkaTable:
    src = KafkaSource.model_validate(
        {
            "kind": "kafka",
            "table": "t",
            "bootstrap_servers": "127.0.0.1:9",  # never reached: only values are parsed
            "topics": ["t"],
            "format": fmt,
            "schema": {column: TYPES[column]},
        }
    )
    return KafkaTable(src)


def _ours_kafka(table: KafkaTable, values: list[bytes], column: str) -> list[Any]:
    parsed, bad = table._parse(values)
    it = iter(parsed.column(column).to_pylist())
    return ["bad" if i in bad else next(it) for i in range(len(values))]


def _ours_ingest(body: bytes, fmt: str, column: str) -> Any:
    schema = pa.schema([(column, pa.decimal128(*_p_s(TYPES[column])))])
    try:
        return ingest.parse(body, fmt, schema).column(column)[0].as_py()
    except InvalidInput:
        return "bad"


def _p_s(t: str) -> tuple[int, int]:
    p, s = t.removeprefix("decimal(").removesuffix(")").split(",")
    return int(p), int(s)


@pytest.mark.parametrize("column", sorted(TYPES))
def test_json_values_are_sparks(spark: SparkSession, column: str) -> None:
    lines = [f'{{"{column}":{v}}}' for v in DECIMALS]
    want = _spark(spark, "json", lines, column)
    table = _kafka("json", column)
    try:
        assert _ours_kafka(table, [line.encode() for line in lines], column) == want
        for line, v in zip(lines, want, strict=True):  # one at a time too
            assert _ours_kafka(table, [line.encode()], column) == [v], line
    finally:
        table.close()
    for line, v in zip(lines, want, strict=True):
        got = _ours_ingest(line.encode() + b"\n", "json", column)
        # The ingest API takes a JSON null as NULL; a record Spark reads as bad is refused.
        assert got == v, line
    assert sum(v != "bad" for v in want) >= 10


@pytest.mark.parametrize("column", ["d", "z"])
def test_csv_values_are_sparks(spark: SparkSession, column: str) -> None:
    lines = [f for f in CSV_FIELDS if f.strip('"') not in ARROW_NULLS]
    want = _spark(spark, "csv", lines, column)
    table = _kafka("csv", column)
    try:
        assert _ours_kafka(table, [line.encode() for line in lines], column) == want
    finally:
        table.close()
    for line, v in zip(lines, want, strict=True):
        assert _ours_ingest(f"{column}\n{line}\n".encode(), "csv", column) == v, line
    assert sum(v != "bad" for v in want) >= 5


AVRO = {
    "type": "record",
    "name": "Money",
    "fields": [
        {
            "name": "price",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 4},
                "long",
                "string",
                "double",
            ],
        }
    ],
}


def test_avro_values_by_sparks_rule() -> None:
    """An Avro decimal (here scale 4) into a decimal(10, 2) column: rounded HALF_UP to the
    column's scale, as Spark rounds decimal text; too many digits, a double, or a string
    that is no number: a dead letter. A long and a numeric string convert exactly."""
    src = KafkaSource.model_validate(
        {
            "kind": "kafka",
            "table": "t",
            "bootstrap_servers": "127.0.0.1:9",
            "topics": ["t"],
            "format": "avro",
            "avro_schema": AVRO,
            "avro_framing": "none",
            "schema": {"price": "decimal(10,2)"},
        }
    )
    cases: list[tuple[Any, Any]] = [
        (Decimal("1.0050"), Decimal("1.01")),
        (Decimal("-1.0050"), Decimal("-1.01")),
        (Decimal("1.0049"), Decimal("1.00")),
        (Decimal("99999999.9949"), Decimal("99999999.99")),
        (Decimal("99999999.9950"), "bad"),
        (Decimal("12345678.1234"), Decimal("12345678.12")),
        (None, None),
        (42, Decimal("42.00")),
        (10**8, "bad"),
        ("1,000.5", Decimal("1000.50")),
        ("abc", "bad"),
        (1.5, "bad"),
    ]
    table = KafkaTable(src)
    try:
        values = []
        for v, _ in cases:
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, fastavro.parse_schema(AVRO), {"price": v})
            values.append(buf.getvalue())
        assert _ours_kafka(table, values, "price") == [want for _, want in cases]
    finally:
        table.close()
