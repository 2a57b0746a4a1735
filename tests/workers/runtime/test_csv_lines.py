"""CSV files parsed in the driver (`workers.runtime.csv_lines`) against Spark's CSV reader as
docs/pipelines.md states it (the reference: header, multiLine, escape `"`, PERMISSIVE), on
real Spark and real files: over a corpus of edge cases (quoting as RFC 4180 writes it and
as it does not, line ends, headers, every column type's values), the RFC's own examples and
files DuckDB writes, the driver either gives exactly the reference's rows or leaves the file
to Spark; never a row the reference would not give, a malformed record's row, or a crash.
Spark's path in Spindle (`FileBatches`) gives the reference's rows and malformed records."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import duckdb
import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from workers.runtime.csv_lines import parses_in_driver, read_csv_files
from workers.runtime.file_batches import CORRUPT, FileBatches

DDL = (
    "i bigint, n int, f double, s string, b boolean, t timestamp, h smallint, "
    "d decimal(10,2), dt date"
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
        ("dt", pa.date32()),
    ]
)
HEADER = b"i,n,f,s,b,t,h,d,dt\n"

TIMESTAMPS = [
    "2024-01-01 10:00:00.123", "2024-01-01", "2024-01-01T10", "2024-01-01T10:00",
    "2024-01-01 10:00", "2024-01-01T10:00Z", "2024-01-01T10:00:00Z", "2024-01-01T10:00:00+01:00",
    "2024-01-01T10:00:00-08:30", "2024-01-01T10:00:00+0100", "2024-01-01T10:00:00+01",
    "2024-01-01T10:00:00-00:00", "2024-01-01T10:00:00.1234567", "2024-01-01T10:00:00.1",
    "2024-01-01T10:00:00.123456", "2024-01-01T10:00:00,5", "2024-01-01 10:00:00 UTC",
    " 2024-01-01 10:00:00", "2024-01-01 10:00:00 ", "2024-13-01 10:00:00", "2024-02-30",
    "2024-02-29", "2023-02-29", "2024-01-01T24:00:00", "2024-01-01T10:00:60", "+2024-01-01",
    "10000-01-01", "0001-01-01", "1969-12-31T23:59:59.999999", "2024-01-01t10:00:00z",
    "2024-1-1 10:00:00", "2024-01-01T10:00:00.123Z", "null", " NULL ", '"2024-01-01 10:00"',
]  # fmt: skip
DOUBLES = [
    "1e400", "-1e400", "1.5", "1", "1E2", "-0.0", "5e-324", "1e-400", "1.7976931348623157e308",
    "NaN", "Inf", "-Inf", "nan", "inf", "Infinity", "-Infinity", "+1.5", ".5", "5.", "1d",
    "0x1p3", " 1.5", "1.5 ", "00.5", "1e", "1.2.3", "-", "0.1", "123456789.123456789e-5",
    "1e+20", '"2.5"',
]  # fmt: skip
INTS = [
    "9223372036854775807", "-9223372036854775808", "-0", "9223372036854775808", "1E2", "1.0",
    "+5", " 5", "5 ", "007", "null", "NULL", " null ", "  ", "abc", "\u0663", '"7"', '""',
]  # fmt: skip
STRINGS = [
    "a b", " x ", "null", "NULL", "\u00e9", "\U0001f600", "\t", "x;y", "#c", "  ", '"a,b"',
    '"a ""b"" c"', '""', '""""', '"x\ny"', '"x\n\ny"', '" lead"', 'ab"c', '"ab"c', '"a" ',
    ' "a"', '"a\\"b"', '"a\\""b"', '"\\"', "a\\b", '"\u00e9,\U0001f600"',
]  # fmt: skip
BOOLS = ["true", "false", "TRUE", "True", "tRuE", "1", "0", "yes", " true", "null", "", '"true"']
DECIMALS = [
    "1.5", "1.234", "1.235", "1.225", "-1.235", "-0.005", "-0.004", "123456789.12",
    "12345678.12", "99999999.999", "99999999.994", "99999999.995", "1e3", "1E-2", "+1", "-0",
    ".5", "5.", "+.5", " 1.5", "1.5 ", '"1,000.5"', "NaN", "0x10", "1d", "\u0661\u0662",
    "00001.50", "null", "-", ".", "0", "12345678901", '"2.50"',
]  # fmt: skip
DATES = [
    "1996-03-13", "1996-3-13", "1996-03-13T00:00", "1996-03-13 10:00", "1996", "1996-03",
    " 1996-03-13", "1996-03-13 ", "1996-02-30", "2024-02-29", "2023-02-29", "+1996-03-13",
    "0000-01-01", "0001-01-01", "9999-12-31", "10000-01-01", "1996/03/13", "19960313", "null",
    "1582-10-10", '"1996-03-13"',
]  # fmt: skip


def _line(**values: str) -> bytes:
    return ",".join(values.get(c, "") for c in SCHEMA.names).encode() + b"\n"


FULL = b'1,2,3.5,"x, y",true,2024-01-01 10:00:00,7,1.25,1996-03-13\n'
FILES = [
    *(HEADER + _line(t=t) for t in TIMESTAMPS),
    *(HEADER + _line(f=f) for f in DOUBLES),
    *(HEADER + _line(i=i) for i in INTS),
    *(HEADER + _line(n=n) for n in ("2147483648", "2147483647", "-5")),
    *(HEADER + _line(h=h) for h in ("32767", "32768", "-32769")),
    *(HEADER + _line(s=s) for s in STRINGS),
    *(HEADER + _line(b=b) for b in BOOLS),
    *(HEADER + _line(d=d) for d in DECIMALS),
    *(HEADER + _line(dt=dt) for dt in DATES),
    HEADER + b"".join(_line(d=d) for d in ("1.5", "1.234", "-7.005", "", "123.4")),
    HEADER + FULL + _line(i="2") + _line(s="y"),
    HEADER + FULL.rstrip(b"\n"),  # no line end at the end
    HEADER + b"1,2\n",  # too few fields
    HEADER + b"1,2,3,4,true,,5,,,6\n",  # too many
    HEADER + b'1,2,3,"a,b,c,d,e,f",true,,5,,\n',  # the commas are in quotes
    HEADER + b"1,2,3,a\\,b,true,,5,,\n",
    HEADER + b'1,,,"multi\nline\nvalue",,,,,\n2,,,"",,,,,\n',
    HEADER + b'1,,,"a\n\n\nb",,,,,\n\n\n2,,,,,,,,\n',  # empty lines, in quotes and out
    HEADER + b'1,,,"ends in quote""",,,,,\n',
    HEADER + b'1,,,"""starts",,,,,\n',
    HEADER + b'1,,,"abc,,,,,\n2,,,,,,,,\n',  # an unterminated quote at the end of the file
    HEADER + b'1,,,x,,,,,"\n',
    HEADER + b'1,,,x,,,,,\n"',
    HEADER + b'1,,,"a"\n',
    HEADER.replace(b"\n", b"\r\n") + b"1,,,,,,,,\r\n2,,,,,,,,\r\n",
    HEADER.replace(b"\n", b"\r\n") + b'1,,,"crlf\r\nin quotes",,,,,\r\n2,,,,,,,,\r\n',
    HEADER.replace(b"\n", b"\r\n") + b'1,,,"lf\nin quotes",,,,,\r\n',
    HEADER.replace(b"\n", b"\r\n") + b"1,,,a\rb,,,,,\r\n",
    HEADER + b'1,,,"crlf\r\nin quotes",,,,,\n',
    HEADER + b"1,,,a\rb,,,,,\n",
    HEADER + b"1,,,,,,,,\r\n2,,,,,,,,\n",  # mixed line ends
    HEADER.replace(b"\n", b"\r") + b'1,,,,,,,,\r2,,,"cr\rin quotes",,,,,\r',
    HEADER.replace(b"\n", b"\r") + b'1,,,"lf\nin quotes",,,,,\r',
    HEADER + b"1,,,,,,,,\n\n2,,,,,,,,\n",
    HEADER + b"1,,,,,,,,\n  \n2,,,,,,,,\n",  # a line of spaces is a record
    HEADER + b"1,,,,,,,,\n\t\n",
    HEADER + b"1,,,,,,,,\n\x00,,,,,,,,\n",
    HEADER + b"1,,,,,,,,\n,,,\xff,,,,,\n",
    b"\xef\xbb\xbf" + HEADER + b"1,,,,,,,,\n",
    b'\xef\xbb\xbf"i","n",f,s,b,t,h,d,dt\n1,,,,,,,,\n',
    b'"i","n","f,x","s\nmore","b""q",t,h,d,dt\n1,,,,,,,,\n',  # a header with quotes
    b'"i,n,f\n\n,s",b,t,h,d,dt\r\n1,,,,,,,,\r\n',
    b'"unterminated header\n1,,,,,,,,\n',
    b"\n1,,,,,,,,\n2,,,,,,,,\n",  # empty lines first: the header is the first record
    b"\n\n" + HEADER + b"2,,,,,,,,\n",
    b"x,y\n1,,,,,,,,\n",  # the header is not checked
    HEADER,
    HEADER.rstrip(b"\n"),
    b"",
    b"\n",
    b"\n\n\n",
]

RFC_SCHEMA = pa.schema([("a", pa.string()), ("b", pa.string()), ("c", pa.string())])
RFC_HEADER = b"field_name,field_name,field_name\r\n"
# RFC 4180 section 2's examples, each after a header (3.), with its line breaks (CRLF).
RFC_FILES = [
    RFC_HEADER + b"aaa,bbb,ccc\r\nzzz,yyy,xxx\r\n",  # 1.
    RFC_HEADER + b"aaa,bbb,ccc\r\nzzz,yyy,xxx",  # 2.
    RFC_HEADER + b"aaa , bbb,ccc \r\n",  # 4. spaces are part of a field
    RFC_HEADER + b'"aaa","bbb","ccc"\r\nzzz,yyy,xxx\r\n',  # 5.
    RFC_HEADER + b'"aaa","b\r\nbb","ccc"\r\nzzz,yyy,xxx\r\n',  # 6.
    RFC_HEADER + b'"aaa","b""bb","ccc"\r\n',  # 7.
    RFC_HEADER + b'"a,a","b""\r\n""b","c\r\n\r\nc"\r\n"","",""\r\n',
]


def _reference(spark: SparkSession, ddl: str, directory: Path) -> dict[str, list[dict]]:
    """Spark's CSV reader's rows of every file of `directory`, by file name, each with its
    malformed record's text, if any, as `_corrupt`."""
    df = (
        spark.read.schema(f"{ddl}, _corrupt string")
        .option("header", True)
        .option("multiLine", True)
        .option("escape", '"')
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", "_corrupt")
        .csv(str(directory))
        .select("*", F.col("_metadata.file_name").alias("_file"))
    )
    out: dict[str, list[dict]] = defaultdict(list)
    for row in _comparable(df.toArrow()).to_pylist():
        out[row.pop("_file")].append(row)
    return out


def _comparable(t: pa.Table) -> pa.Table:
    """`t` with timestamps and dates as numbers (Spark takes years Python cannot hold)."""
    for i, f in enumerate(t.schema):
        if pa.types.is_timestamp(f.type) or pa.types.is_date32(f.type):
            number = pa.int64() if pa.types.is_timestamp(f.type) else pa.int32()
            t = t.set_column(i, f.name, t.column(i).cast(number))
    return t


def _compare(
    spark: SparkSession, directory: Path, ddl: str, schema: pa.Schema, files: list[bytes]
) -> set[str]:
    """Write `files`, check the driver against the reference on each and Spindle's Spark
    path on all; the names of the files the driver took."""
    directory.mkdir()
    names = []
    for k, data in enumerate(files):
        names.append(f"case-{k:03d}.csv")
        (directory / names[-1]).write_bytes(data)
    reference = _reference(spark, ddl, directory)
    taken = set()
    for name, data in zip(names, files, strict=True):
        got = read_csv_files([str(directory / name)], schema)
        if got is None:
            continue
        taken.add(name)
        assert got.schema == schema
        expected = reference.get(name, [])
        assert all(r.pop("_corrupt") is None for r in expected), data
        # As text, where NaN equals NaN and -0.0 differs from 0.0.
        assert repr(_comparable(got).to_pylist()) == repr(expected), data
    batches = FileBatches(spark, "csv", ddl)
    try:
        batches.read([str(directory / n) for n in names], 1)
        spindle: dict[str, list[dict]] = defaultdict(list)
        for row in _comparable(batches.rows().select("*").toArrow()).to_pylist():
            row["_corrupt"] = row.pop(CORRUPT)
            spindle[Path(batches.path_of(row.pop("__file"))).name].append(row)
            assert row.pop("__end") == 1
    finally:
        batches.close()
    assert repr(sorted(spindle.items())) == repr(sorted(_reference(spark, ddl, directory).items()))
    return taken


def test_the_driver_gives_sparks_rows_or_leaves_the_file_to_spark(
    tmp_path: Path, spark: SparkSession
) -> None:
    taken = _compare(spark, tmp_path / "corpus", DDL, SCHEMA, FILES)
    # The canonical cases are taken (not everything left to Spark).
    assert len(taken) >= 110


def test_the_rfcs_examples_are_read_in_the_driver_as_spark_reads_them(
    tmp_path: Path, spark: SparkSession
) -> None:
    taken = _compare(spark, tmp_path / "rfc", "a string, b string, c string", RFC_SCHEMA, RFC_FILES)
    assert len(taken) == len(RFC_FILES)


def test_files_duckdb_writes_are_read_in_the_driver_as_spark_and_duckdb_read_them(
    tmp_path: Path, spark: SparkSession
) -> None:
    """DuckDB quotes a field with a comma, a quote or a line end (RFC 4180) and writes NULL
    as nothing, an empty string as `""`; Spark reads both as NULL, and so does DuckDB."""
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t (id INTEGER, name VARCHAR, price DECIMAL(12,2), day DATE, score DOUBLE,"
        " ok BOOLEAN)"
    )
    names = [
        "plain", "eas hang ironic, silent packages", 'say "hi"', 'a ""double"" quote',
        "two\nlines", "crlf\r\ninside", "", None, "trailing space ", ",", '"', "\n",
        "\u00e9\u00e8 \U0001f600", "x,\"y\"\nz",
    ]  # fmt: skip
    for k, name in enumerate(names):
        price = None if k % 5 == 4 else (k * 1234567 - 5000000) / 100
        day = None if k % 7 == 6 else f"199{k % 10}-0{1 + k % 9}-{10 + k}"
        score = None if k % 6 == 5 else k / 8 - 1
        con.execute(
            "INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)",
            [k, name, price, day, score, None if k % 4 == 3 else k % 2 == 0],
        )
    lf = tmp_path / "duck.csv"
    con.execute(f"COPY t TO '{lf}' (HEADER, DELIMITER ',')")
    data = lf.read_bytes()
    assert b'"eas hang ironic, silent packages"' in data and b'"say ""hi"""' in data
    crlf = data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    ddl = "id int, name string, price decimal(12,2), day date, score double, ok boolean"
    schema = pa.schema(
        [
            ("id", pa.int32()),
            ("name", pa.string()),
            ("price", pa.decimal128(12, 2)),
            ("day", pa.date32()),
            ("score", pa.float64()),
            ("ok", pa.bool_()),
        ]
    )
    taken = _compare(spark, tmp_path / "duck", ddl, schema, [data, crlf])
    assert len(taken) == 2
    got = read_csv_files([str(lf)], schema)
    assert got is not None
    columns = (
        "{id: 'INTEGER', name: 'VARCHAR', price: 'DECIMAL(12,2)', day: 'DATE', "
        "score: 'DOUBLE', ok: 'BOOLEAN'}"
    )
    duck = con.execute(f"SELECT * FROM read_csv('{lf}', header = true, columns = {columns})")
    assert [tuple(r.values()) for r in got.to_pylist()] == duck.fetchall()


def test_several_files_are_read_in_order(tmp_path: Path) -> None:
    paths = []
    files = [HEADER + _line(i="1") + _line(i="2"), HEADER, _line(i="3") * 2, b'"h\n"\n4\n']
    for k, data in enumerate(files):
        paths.append(str(tmp_path / f"{k}.csv"))
        Path(paths[-1]).write_bytes(data)
    one = pa.schema([("i", pa.int64())])
    got = read_csv_files(paths[:3], SCHEMA)
    assert got is not None and got.column("i").to_pylist() == [1, 2, 3]
    assert read_csv_files(paths[3:], one) == pa.table({"i": [4]}, schema=one)
    assert read_csv_files([], SCHEMA) == SCHEMA.empty_table()
    Path(paths[1]).write_bytes(HEADER + _line(i="x"))
    assert read_csv_files(paths, SCHEMA) is None  # one file Spark must read: all are


def test_only_types_checked_against_spark_are_parsed_in_the_driver() -> None:
    assert parses_in_driver(SCHEMA)
    assert parses_in_driver(pa.schema([("x", pa.decimal128(38, 0))]))
    for t in (pa.float32(), pa.timestamp("us"), pa.binary(), pa.list_(pa.int64())):
        assert not parses_in_driver(pa.schema([("x", t)]))
