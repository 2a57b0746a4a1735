"""CSV files parsed in the driver (`workers.csv_lines`) against Spark's path (`FileBatches`'
lines, then `csv_fields`' `from_csv`: the reference) on real Spark and real files: over a
corpus of edge cases, the driver either gives exactly Spark's rows or leaves the file to
Spark; never a row Spark would not give, a dead letter's row, or a crash."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession

from workers.batch_jobs import csv_fields
from workers.csv_lines import parses_in_driver, read_csv_files
from workers.file_batches import FileBatches

DDL = "i bigint, n int, f double, s string, b boolean, t timestamp, h smallint"
SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("n", pa.int32()),
        ("f", pa.float64()),
        ("s", pa.string()),
        ("b", pa.bool_()),
        ("t", pa.timestamp("us", tz="UTC")),
        ("h", pa.int16()),
    ]
)
HEADER = b"i,n,f,s,b,t,h\n"

TIMESTAMPS = [
    "2024-01-01 10:00:00.123", "2024-01-01", "2024-01-01T10", "2024-01-01T10:00",
    "2024-01-01 10:00", "2024-01-01T10:00Z", "2024-01-01T10:00:00Z", "2024-01-01T10:00:00+01:00",
    "2024-01-01T10:00:00-08:30", "2024-01-01T10:00:00+0100", "2024-01-01T10:00:00+01",
    "2024-01-01T10:00:00-00:00", "2024-01-01T10:00:00.1234567", "2024-01-01T10:00:00.1",
    "2024-01-01T10:00:00.123456", "2024-01-01T10:00:00,5", "2024-01-01 10:00:00 UTC",
    " 2024-01-01 10:00:00", "2024-01-01 10:00:00 ", "2024-13-01 10:00:00", "2024-02-30",
    "2024-02-29", "2023-02-29", "2024-01-01T24:00:00", "2024-01-01T10:00:60", "+2024-01-01",
    "10000-01-01", "0001-01-01", "1969-12-31T23:59:59.999999", "2024-01-01t10:00:00z",
    "2024-1-1 10:00:00", "2024-01-01T10:00:00.123Z", "null", " NULL ",
]  # fmt: skip
DOUBLES = [
    "1e400", "-1e400", "1.5", "1", "1E2", "-0.0", "5e-324", "1e-400", "1.7976931348623157e308",
    "NaN", "Inf", "-Inf", "nan", "inf", "Infinity", "-Infinity", "+1.5", ".5", "5.", "1d",
    "0x1p3", " 1.5", "1.5 ", "00.5", "1e", "1.2.3", "-", "0.1", "123456789.123456789e-5",
]  # fmt: skip
INTS = [
    "9223372036854775807", "-9223372036854775808", "-0", "9223372036854775808", "1E2", "1.0",
    "+5", " 5", "5 ", "007", "null", "NULL", " null ", "  ", "abc", "\u0663",
]  # fmt: skip
STRINGS = ["a b", " x ", "null", "NULL", "\u00e9", "\U0001f600", "\t", "x;y", "#c", "  "]
BOOLS = ["true", "false", "TRUE", "True", "tRuE", "1", "0", "yes", " true", "null", ""]


def _line(**values: str) -> bytes:
    return ",".join(values.get(c, "") for c in SCHEMA.names).encode() + b"\n"


FILES = [
    *(HEADER + _line(t=t) for t in TIMESTAMPS),
    *(HEADER + _line(f=f) for f in DOUBLES),
    *(HEADER + _line(i=i) for i in INTS),
    *(HEADER + _line(n=n) for n in ("2147483648", "2147483647", "-5")),
    *(HEADER + _line(h=h) for h in ("32767", "32768", "-32769")),
    *(HEADER + _line(s=s) for s in STRINGS),
    *(HEADER + _line(b=b) for b in BOOLS),
    HEADER + b"1,2,3.5,x,true,2024-01-01 10:00:00,7\n" + _line(i="2") + _line(s="y"),
    HEADER + b"1,2,3.5,x,true,2024-01-01 10:00:00,7",  # no line end at the end
    HEADER + b"1,2\n",  # too few fields
    HEADER + b"1,2,3,4,true,,5,6\n",  # too many
    HEADER + b'1,2,3,"a,b",true,,5\n',  # quoted
    HEADER + b'1,2,3,"a",true,,5\n',
    HEADER + b"1,2,3,a\\,b,true,,5\n",
    HEADER + b"1,,,,,,\r\n2,,,,,,\r\n",
    HEADER + b"1,,,,,,\r2,,,,,,\r",
    HEADER + b"1,,,,,,\n\n2,,,,,,\n",
    HEADER + b"1,,,,,,\n  \n2,,,,,,\n",
    HEADER + b"1,,,,,,\n\x00,,,,,,\n",
    HEADER + b"1,,,,,,\n,,,\xff,,,\n",
    b"\xef\xbb\xbf" + HEADER + b"1,,,,,,\n",
    b"\n1,,,,,,\n2,,,,,,\n",  # a blank first line: Spark's header
    b"x,y\n1,,,,,,\n",  # the header is not checked
    HEADER,
    HEADER.rstrip(b"\n"),
    b"",
    b"\n",
]


def _spark_rows(spark: SparkSession, path: Path) -> list[dict[str, object]] | None:
    """What Spark's path gives for the file: its rows, or None if any line is bad."""
    batches = FileBatches(spark, "csv", DDL)
    try:
        batches.read([str(path)], 1)
        schema = spark.createDataFrame([], DDL).schema
        t = csv_fields(batches.rows(), schema, []).toArrow()
    finally:
        batches.close()
    if any(t.column("__bad").to_pylist()):
        return None
    return _comparable(t.select(SCHEMA.names).cast(SCHEMA))


def _comparable(t: pa.Table) -> list[dict[str, object]]:
    """The rows, timestamps as microseconds (Spark takes years Python cannot hold)."""
    return t.set_column(5, "t", t.column("t").cast(pa.int64())).to_pylist()


def test_the_driver_gives_sparks_rows_or_leaves_the_file_to_spark(
    tmp_path: Path, spark: SparkSession
) -> None:
    taken = 0
    for k, data in enumerate(FILES):
        path = tmp_path / f"case-{k:03d}.csv"
        path.write_bytes(data)
        got = read_csv_files([str(path)], SCHEMA)
        if got is None:
            continue
        taken += 1
        assert got.schema == SCHEMA
        # As text, where NaN equals NaN and -0.0 differs from 0.0.
        assert repr(_comparable(got)) == repr(_spark_rows(spark, path)), data
    # The canonical cases are taken (not everything left to Spark).
    assert taken >= 60


def test_several_files_are_read_in_order(tmp_path: Path) -> None:
    paths = []
    for k, data in enumerate([HEADER + _line(i="1") + _line(i="2"), HEADER, _line(i="3") * 2]):
        paths.append(str(tmp_path / f"{k}.csv"))
        Path(paths[-1]).write_bytes(data)
    got = read_csv_files(paths, SCHEMA)
    assert got is not None and got.column("i").to_pylist() == [1, 2, 3]
    assert read_csv_files([], SCHEMA) == SCHEMA.empty_table()
    Path(paths[1]).write_bytes(HEADER + _line(i="x"))
    assert read_csv_files(paths, SCHEMA) is None  # one file Spark must read: all are


def test_only_types_checked_against_spark_are_parsed_in_the_driver() -> None:
    assert parses_in_driver(SCHEMA)
    for t in (pa.float32(), pa.date32(), pa.decimal128(10, 2), pa.timestamp("us")):
        assert not parses_in_driver(pa.schema([("x", t)]))
