"""Parquet files read in the driver (`workers.runtime.parquet_files`) against Spark's Parquet reader
(`FileBatches`, the reference) on real Spark and real files: over a corpus of files whose
columns differ from the table's in name, case, type, encoding or presence, or that are
not Parquet at all, the driver either gives exactly Spark's rows or leaves the file to
Spark."""

from __future__ import annotations

import datetime as dt
from decimal import ROUND_DOWN, Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from workers.runtime.file_batches import FileBatches
from workers.runtime.parquet_files import NarrowerDecimal, read_parquet_files

DDL = (
    "i bigint, n int, f double, r float, s string, b boolean, t timestamp, d date, m decimal(10,2)"
)
SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("n", pa.int32()),
        ("f", pa.float64()),
        ("r", pa.float32()),
        ("s", pa.string()),
        ("b", pa.bool_()),
        ("t", pa.timestamp("us", tz="UTC")),
        ("d", pa.date32()),
        ("m", pa.decimal128(10, 2)),
    ]
)
T = dt.datetime(2024, 1, 1, 10, 0, 0, 123456, tzinfo=dt.UTC)
ROWS: list[dict[str, Any]] = [
    {"i": 1, "n": 2, "f": 1.5, "r": 0.25, "s": "a", "b": True, "t": T, "d": T.date(),
     "m": Decimal("12.34")},
    {"i": -(2**63), "n": 2**31 - 1, "f": float("nan"), "r": -0.0, "s": "é😀\x00", "b": False,
     "t": dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
     "d": dt.date(1, 1, 1), "m": Decimal("-99999999.99")},
    {k: None for k in SCHEMA.names},
    {"i": 2**63 - 1, "n": -5, "f": -0.0, "r": float("inf"), "s": "", "b": None, "t": None,
     "d": dt.date(9999, 12, 31), "m": Decimal("0.00")},
]  # fmt: skip


def _table(schema: pa.Schema = SCHEMA, rows: list[dict[str, Any]] = ROWS) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA).cast(schema)


def _with(name: str, typ: pa.DataType) -> pa.Schema:
    return pa.schema([pa.field(f.name, typ) if f.name == name else f for f in SCHEMA])


def _renamed(old: str, new: str) -> pa.Table:
    t = _table()
    return t.rename_columns([new if n == old else n for n in t.column_names])


# A decimal narrower than the column's: Spark's reader fails, and so does the driver.
REFUSED = "refused"
# (name, how the file is written, whether the driver reads it)
CASES: list[tuple[str, Any, bool | str]] = [
    ("exact", lambda p: pq.write_table(_table(), p), True),
    ("row groups", lambda p: pq.write_table(_table(), p, row_group_size=1), True),
    ("no dictionary", lambda p: pq.write_table(_table(), p, use_dictionary=False), True),
    ("zstd", lambda p: pq.write_table(_table(), p, compression="zstd"), True),
    ("extra and reordered", lambda p: pq.write_table(
        _table().append_column("x", pa.array([1, 2, 3, 4])).select(["x", *SCHEMA.names[::-1]]),
        p), True),
    ("no rows", lambda p: pq.write_table(_table(rows=[]), p), True),
    ("int32 for bigint", lambda p: pq.write_table(
        _table(_with("i", pa.int32()), [{**r, "i": 7} for r in ROWS]), p), False),
    ("milliseconds", lambda p: pq.write_table(
        _table(_with("t", pa.timestamp("ms", tz="UTC")), [{**r, "t": None} for r in ROWS]),
        p), False),
    ("zone-less", lambda p: pq.write_table(_table(_with("t", pa.timestamp("us"))), p), False),
    ("int96", lambda p: pq.write_table(_table(), p, use_deprecated_int96_timestamps=True),
     False),
    ("large string", lambda p: pq.write_table(_table(_with("s", pa.large_string())), p),
     False),
    ("other decimal", lambda p: pq.write_table(_table(_with("m", pa.decimal128(12, 2))), p),
     REFUSED),
    ("decimal as int64", lambda p: pq.write_table(_table(), p, store_decimal_as_integer=True),
     True),
    ("narrower decimal", lambda p: pq.write_table(_table(_with("m", pa.decimal128(9, 1)),
        [{**r, "m": r["m"] and r["m"].quantize(Decimal("0.1"), ROUND_DOWN)} for r in ROWS]), p),
     True),
    ("narrower decimal as int32", lambda p: pq.write_table(_table(
        _with("m", pa.decimal128(5, 0)), [{**r, "m": r["m"] and Decimal(-99999)} for r in ROWS]),
        p, store_decimal_as_integer=True), True),
    ("decimal of a larger scale", lambda p: pq.write_table(
        _table(_with("m", pa.decimal128(10, 3)), [{**r, "m": None} for r in ROWS]), p), REFUSED),
    ("decimal of more integral digits", lambda p: pq.write_table(
        _table(_with("m", pa.decimal128(10, 1)), [{**r, "m": None} for r in ROWS]), p), REFUSED),
    ("double for float", lambda p: pq.write_table(_table(_with("r", pa.float64())), p), False),
    ("upper case", lambda p: pq.write_table(_renamed("s", "S"), p), False),
    ("two cases", lambda p: pq.write_table(
        _table().append_column("S", pa.array(["x"] * 4)), p), False),
    ("missing column", lambda p: pq.write_table(_table().drop_columns(["b"]), p), False),
    ("not parquet", lambda p: Path(p).write_bytes(b"PAR1 not really PAR1"), False),
    ("truncated", lambda p: (pq.write_table(_table(), p),
                             Path(p).write_bytes(Path(p).read_bytes()[:-30])), False),
    ("empty file", lambda p: Path(p).write_bytes(b""), False),
]  # fmt: skip


def _spark_rows(spark: SparkSession, path: Path) -> list[dict[str, object]]:
    batches = FileBatches(spark, "parquet", DDL)
    try:
        batches.read([str(path)], 1)
        t = batches.rows().toArrow()
    finally:
        batches.close()
    return t.select(SCHEMA.names).cast(SCHEMA).to_pylist()


def test_the_driver_gives_sparks_rows_or_leaves_the_file_to_spark(
    tmp_path: Path, spark: SparkSession
) -> None:
    taken = []
    for name, write, expected in CASES:
        path = tmp_path / f"{name.replace(' ', '-')}.parquet"
        write(str(path))
        if expected == REFUSED:
            with pytest.raises(NarrowerDecimal, match=rf"^{path}: column 'm' is decimal"):
                read_parquet_files([str(path)], SCHEMA)
            with pytest.raises(Exception, match="PARQUET_COLUMN_DATA_TYPE_MISMATCH"):
                _spark_rows(spark, path)
            continue
        got = read_parquet_files([str(path)], SCHEMA)
        assert (got is not None) == expected, name
        if got is None:
            continue
        taken.append(name)
        assert got.schema == SCHEMA
        # As text, where NaN equals NaN and -0.0 differs from 0.0.
        assert repr(got.to_pylist()) == repr(_spark_rows(spark, path)), name
    assert len(taken) == 9


def test_several_files_are_read_in_order(tmp_path: Path) -> None:
    paths = []
    for k, rows in enumerate([ROWS[:2], [], ROWS[2:]]):
        paths.append(str(tmp_path / f"{k}.parquet"))
        pq.write_table(_table(rows=rows), paths[-1])
    got = read_parquet_files(paths, SCHEMA)
    assert got is not None and got.column("i").to_pylist() == [r["i"] for r in ROWS]
    assert read_parquet_files([], SCHEMA) == SCHEMA.empty_table()
    pq.write_table(_renamed("s", "S"), paths[1])
    assert read_parquet_files(paths, SCHEMA) is None  # one file Spark must read: all are
    # Only the columns asked for are read (a SQL table's live ones).
    pq.write_table(_table(rows=ROWS[:1]), paths[1])
    live = pa.schema([SCHEMA.field("s"), SCHEMA.field("i")])
    got = read_parquet_files(paths[1:2], live)
    assert got is not None and got.to_pylist() == [{"s": "a", "i": 1}]
