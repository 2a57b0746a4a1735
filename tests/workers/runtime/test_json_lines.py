"""JSON-lines files parsed in the driver (`workers.runtime.json_lines`) against Spark's JSON reader
(`FileBatches`, the reference) on real Spark and real files: over a corpus of edge cases,
the driver either gives exactly Spark's rows or leaves the file to Spark; never a row Spark
would not give, a dead letter's row, or a crash."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from workers.runtime.file_batches import CORRUPT, FileBatches
from workers.runtime.json_lines import parses_in_driver, read_json_lines

DDL = (
    "i bigint, n int, f double, s string, b boolean, t timestamp, h smallint, "
    "d decimal(10,2), z decimal(5,5), w decimal(38,2)"
)
SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("n", pa.int32()),
        ("f", pa.float64()),
        ("s", pa.string()),
        ("b", pa.bool_()),
        ("t", pa.timestamp("us", tz="UTC")),
        ("h", pa.int16()),
        ("d", pa.decimal128(10, 2)),
        ("z", pa.decimal128(5, 5)),
        ("w", pa.decimal128(38, 2)),
    ]
)

TIMESTAMPS = [
    "2024-01-01 10:00:00.123", "2024-01-01", "2024-01-01T10", "2024-01-01T10:00",
    "2024-01-01T10:00:00Z", "2024-01-01T10:00:00+01:00", "2024-01-01T10:00:00+0100",
    "2024-01-01T10:00:00+01", "2024-01-01T10:00:00-00:00", "2024-01-01T10:00:00.1234567",
    "2024-01-01T10:00:00.123456", "2024-01-01T10:00:00,5", "2024-01-01 10:00:00 UTC",
    " 2024-01-01 10:00:00", "2024-01-01 10:00:00 ", "2024-13-01 10:00:00", "2024-02-30",
    "2024-01-01T24:00:00", "2024-01-01T10:00:60", "+2024-01-01", "10000-01-01", "0001-01-01",
    "1969-12-31T23:59:59.999999", "2024-01-01t10:00:00z", "", "2024-1-1 10:00:00",
]  # fmt: skip
# Decimals as numbers and as strings: rounded HALF_UP to the scale, too many digits, commas
# (Spark drops them), blanks, exponents, Unicode digits, what Java's BigDecimal refuses.
DECIMALS = [
    "0.1",
    "1e-3",
    "1.005",
    "-1.005",
    "1.0049",
    "0.125",
    "-0.125",
    "12345678901234567.89",
    "99999999.994",
    "99999999.995",
    "123456789012",
    "1E+2",
    "10.50",
    "0",
    "-0",
    "0.000",
    "1e-50",
    "0e50",
    "1.5e400",
    "100000000",
    "99999999.99",
    "-99999999.99",
    "0.1234567890123456789012345678901234567891",
    "true",
    "null",
    "NaN",
    "-Infinity",
    "01.5",
    "1.",
    ".5",
    "+1",
    "[1]",
    '{"a":1}',
    "2E48",
    "1e2147483648",
    '"1.5"',
    '"1,000.5"',
    '"1,0,0"',
    '" 1.5"',
    '"1.5 "',
    '"+1.5"',
    '".5"',
    '"5."',
    '"1e2"',
    '"1e+-3"',
    '"abc"',
    '""',
    '"NaN"',
    '"0x10"',
    '"1_000"',
    '"\\u0661\\u0662"',
    '"\u0661\u0662.5"',
    '","',
    '"-"',
    '"1e"',
    '"1.2.3"',
    '"\\u0031.5"',
    '"8e0xE"',
    '"2E48"',
]
RECORDS = [
    b'{"d":1.5,"d":2.5}', b'{"d":1.5,"z":0.5,"w":1e30,"i":7}', b'{"d":"1,5","s":"x"}',
    *(b'{"t":"%s"}' % t.encode() for t in TIMESTAMPS),
    *(b'{"f":%s}' % v for v in (b"1e400", b"-1e400", b"1.5", b"1", b"1E2", b"-0.0", b"5e-324")),
    *(b'{"f":%s}' % v for v in (b"1.7976931348623157e308", b"NaN", b'"NaN"', b"Infinity")),
    *(b'{"i":%s}' % v for v in (b"9223372036854775807", b"-9223372036854775808", b"-0")),
    *(b'{"i":%s}' % v for v in (b"9223372036854775808", b"1E2", b"1.0", b'"5"', b"true")),
    *(b'{"n":%s}' % v for v in (b"2147483648", b"2147483647", b"-5")),
    *(b'{"h":%s}' % v for v in (b"32767", b"32768", b"-32769")),
    *(b'{"b":%s}' % v for v in (b"true", b"false", b"null", b'"true"', b"1")),
    *(b'{"s":%s}' % v for v in (b'"a\\u00e9b"', b'"\\ud83d\\ude00"', b'"\\ud800"', b"5")),
    *(b'{"s":%s}' % v for v in (b'"\\udc00x"', b'"\\/"', b'"\xc3\xa9"', b'"\\u0000"', b'"\xff"')),
    *(b'{"s":%s}' % v for v in (b'"a\tb"', b'"\x01"', b'{"x":1}', b"[1]", b"null")),
    b'{"S":"case"}', b'{"s":"x","extra":{"a":[1,2]}}', b'{"s":"x","extra":[1,{"b":2}]}',
    b'{}', b'{"i":null,"s":null}', b'{"i":1}  ', b'  {"i":1}', b'{"i":1}\t',
    b'{ "i" : 1 , "s" : "y" }', b"{'i':1}", b"{i:1}", b'{"i":1,}', b'{"i":01}', b'{"i":+1}',
    b'{"f":.5}', b'{"f":5.}', b'{"i":1} // c', b'{"i":1,"i":2}', b'{"i":1} {"i":2}',
    b'{"i":1}{"i":2}', b'{"i":1} null', b"null", b"[]", b"5", b'"x"', b"true",
    b'[{"i":1},{"i":2}]', b'{"i":1} 5', b'{"i":1} x', b'{"i":1} }', b'{"i":1', b"",
]  # fmt: skip
FILES = [
    *(r + b"\n" for r in RECORDS),
    b'{"i":1}\n{"i":2}',  # no line end at the end
    b'{"i":1}\r\n{"i":2}\r\n',
    b'{"i":1}\r{"i":2}\r',
    b'{"i":1}\n\n{"i":2}\n',
    b'{"i":1}\n  \n{"i":2}\n',
    b'\xef\xbb\xbf{"i":1}\n{"i":2}\n',
    b'{"i":1}\n\xef\xbb\xbf{"i":2}\n',
    b'{"i":1}\nnull\n',
    b"\n",
    b"",
]


def _spark_table(spark: SparkSession, path: Path) -> pa.Table:
    """What Spark's reader gives for the file: a row per record, `CORRUPT` if bad."""
    batches = FileBatches(spark, "json", DDL)
    try:
        batches.read([str(path)], 1)
        return batches.rows().select("*").toArrow()
    finally:
        batches.close()


def _spark_rows(spark: SparkSession, path: Path) -> list[dict[str, object]] | None:
    """What Spark's reader gives for the file: its rows, or None if any record is bad."""
    t = _spark_table(spark, path)
    if t.column(CORRUPT).null_count != t.num_rows:
        return None
    return t.select(SCHEMA.names).cast(SCHEMA).to_pylist()


def test_the_driver_gives_sparks_rows_or_leaves_the_file_to_spark(
    tmp_path: Path, spark: SparkSession
) -> None:
    taken = 0
    for k, data in enumerate(FILES):
        path = tmp_path / f"case-{k:03d}.json"
        path.write_bytes(data)
        got = read_json_lines([str(path)], SCHEMA)
        if got is None:
            continue
        taken += 1
        assert got.schema == SCHEMA
        # As text, where NaN equals NaN and -0.0 differs from 0.0.
        assert repr(got.to_pylist()) == repr(_spark_rows(spark, path)), data
    # The canonical cases are taken (not everything left to Spark).
    assert taken >= 40


def test_decimals_are_read_as_spark_reads_them(tmp_path: Path, spark: SparkSession) -> None:
    """Each decimal record alone in a file: the driver takes exactly the records Spark's
    reader takes, with Spark's values (one Spark read of all of them, row by row)."""
    records = [b'{"%s":%s}' % (c, v.encode()) for v in DECIMALS for c in (b"d", b"z", b"w")]
    ours = []
    for k, record in enumerate(records):
        path = tmp_path / f"decimal-{k:03d}.json"
        path.write_bytes(record + b"\n")
        got = read_json_lines([str(path)], SCHEMA)
        ours.append(None if got is None else got.to_pylist()[0])
    path = tmp_path / "all.json"
    path.write_bytes(b"\n".join(records) + b"\n")
    rows = _spark_table(spark, path)
    bad = rows.column(CORRUPT).is_null().to_pylist()
    theirs = rows.select(SCHEMA.names).cast(SCHEMA).to_pylist()
    for record, mine, good, spark_row in zip(records, ours, bad, theirs, strict=True):
        assert repr(mine) == repr(spark_row if good else None), record
    assert sum(r is not None for r in ours) >= 60


def test_several_files_are_read_in_order(tmp_path: Path) -> None:
    paths = []
    for k, data in enumerate([b'{"i":1}\n{"i":2}\n', b"", b'{"i":3}']):
        paths.append(str(tmp_path / f"{k}.json"))
        Path(paths[-1]).write_bytes(data)
    got = read_json_lines(paths, SCHEMA)
    assert got is not None and got.column("i").to_pylist() == [1, 2, 3]
    assert read_json_lines([], SCHEMA) == SCHEMA.empty_table()
    Path(paths[1]).write_bytes(b"5\n")
    assert read_json_lines(paths, SCHEMA) is None  # one file Spark must read: all are


@pytest.mark.parametrize("data", [b"null\n", b' null\n{"i":1}\n', b'{"i":1}\nnull\n'])
def test_a_null_record_does_not_reach_arrows_reader(tmp_path: Path, data: bytes) -> None:
    """Arrow's reader crashes the process when the first value is `null`: in a process of
    its own, the driver's reading must end normally, leaving the file to Spark."""
    path = tmp_path / "null.json"
    path.write_bytes(data)
    code = (
        "import sys, pyarrow as pa; from workers.runtime.json_lines import read_json_lines; "
        "sys.exit(read_json_lines([sys.argv[1]], pa.schema([('i', pa.int64())])) is not None)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path)], timeout=60)
    assert proc.returncode == 0


def test_only_types_arrow_converts_as_spark_does_are_parsed_in_the_driver() -> None:
    assert parses_in_driver(SCHEMA)  # decimals included: `pipeline_spec.formats.decimals`
    for t in (pa.float32(), pa.date32(), pa.decimal256(40, 2), pa.timestamp("us")):
        assert not parses_in_driver(pa.schema([("x", t)]))
