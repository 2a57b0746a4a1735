"""A `files` source's micro-batch read by Spark's own readers (`workers.runtime.file_batches`), on
real Spark and real files, against a plain-Python reading of the same bytes: CSV and JSON
records and the (first) line numbers of bad ones, records spanning lines, line endings,
blank lines, CSV headers, a BOM, invalid UTF-8, a CSV record too wide for the reader, file
names Hadoop paths cannot hold; whole runs of CSV and Parquet pipelines against a Spark
batch query over the input; and the first batch of a run, read ahead while its query
starts, used only for that batch."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipeline_spec.model import parse_spec
from storage_engine.schema import WEIGHT
from workers.runtime.connectors.files_sink import FilesSink
from workers.runtime.file_batches import CORRUPT, FileBatches
from workers.runtime.input_files import list_input_files
from workers.runtime.run_builder import open_runner
from workers.runtime.runner import Runner

# Names a Hadoop path cannot hold (a colon) or Spark would glob (brackets, braces, stars).
ODD_NAMES = ["events-12:00:00.json", "x [1] {a,b} *?.json", "data#1 %20 + é.json"]


# CSV records of `u string, a bigint` as written (`{n}`: the file's line end) and the row each
# gives, or None if Spark's reader finds it malformed.
CSV_RECORDS: list[tuple[bytes, tuple[str | None, int | None] | None]] = [
    (b"x,1", ("x", 1)),
    (b'"a,b",2', ("a,b", 2)),
    (b'"say ""hi""",3', ('say "hi"', 3)),
    (b'"two{n}lines",4', ("two\nlines", 4)),  # a line end in quotes reads as \n
    (b"x,", ("x", None)),
    (b",5", (None, 5)),
    (b'"",6', (None, 6)),
    (b"x,not-a-number", None),
    (b'"bad{n}{n}record",zz', None),  # three lines
    (b"x", None),  # too few fields
    (b"x,1,2", None),  # too many
    (b"   ", None),  # a line of spaces is a record
    (b"\xff,x", None),  # invalid UTF-8: U+FFFD
    (b'"x,1{n}y",1,', None),
]


def _csv_file(path: Path, sep: bytes, order: list[int]) -> list[tuple[int, int]]:
    """Write the records `order` indexes (after a header, with empty lines between) to
    `path` with line end `sep`; each record's index and first line."""
    parts, where, line = [b"u,a"], [], 2
    for k in order:
        text = CSV_RECORDS[k][0].replace(b"{n}", sep)
        where.append((k, line))
        parts.append(text)
        line += text.count(sep) + 1
        if k % 3 == 0:
            parts.append(b"")  # an empty line: no record
            line += 1
    path.write_bytes(sep.join(parts) + sep)
    return where


def test_csv_records_and_bad_records_lines_match_a_python_reading(
    tmp_path: Path, spark: SparkSession
) -> None:
    """Good records as Spark's CSV reader parses them (quoted commas, quotes and line ends,
    empty values); every malformed record's text and first line, in files with every kind
    of line end, odd names and each bad record twice."""
    d = tmp_path / "in"
    d.mkdir()
    good: list[tuple[str, str | None, int | None]] = []
    bad: list[tuple[str, int, str]] = []
    for f, (name, sep) in enumerate(zip(ODD_NAMES, [b"\n", b"\r\n", b"\r"], strict=True)):
        n = len(CSV_RECORDS)
        order = [*range(f, n), *range(n), *range(f)]
        path = d / name.replace(".json", ".csv")
        for k, line in _csv_file(path, sep, order):
            text, row = CSV_RECORDS[k]
            if row is None:
                written = text.replace(b"{n}", sep).decode("utf-8", errors="replace")
                bad.append((str(path), line, written))
            else:
                good.append((str(path), *row))
    paths = [str(d / n) for n in list_input_files(str(d))]
    batches = FileBatches(spark, "csv", "u string, a bigint")
    try:
        for end, batch in ((3, paths), (4, paths[1:2])):  # a batch replaces the one before
            batches.read(batch, end)
            rows = batches.rows().select("*").toArrow().to_pylist()
            assert {r["__end"] for r in rows} == {end}
            ok = [(batches.path_of(r["__file"]), r["u"], r["a"]) for r in rows if not r[CORRUPT]]
            assert Counter(ok) == Counter(g for g in good if g[0] in batch)
            broken = [(r["__file"], r[CORRUPT]) for r in rows if r[CORRUPT] is not None]
            numbers = batches.bad_line_numbers(broken)
            got = [(batches.path_of(f), n, t) for (f, t), n in zip(broken, numbers, strict=True)]
            assert sorted(got) == sorted(b for b in bad if b[0] in batch)
    finally:
        batches.close()


def test_a_record_wider_than_the_csv_reader_is_read_again_with_room_for_it(
    tmp_path: Path, spark: SparkSession
) -> None:
    """Univocity fails the task on a record of more than 20 480 fields; the batch is read
    again with room for them and the record is malformed; the next batch reads as before."""
    wide, plain = tmp_path / "a.csv", tmp_path / "b.csv"
    wide.write_bytes(b"u,a\nx,1\n" + b"," * 30000 + b"\ny,2\n")
    plain.write_bytes(b"u,a\nz,3\n")
    batches = FileBatches(spark, "csv", "u string, a bigint")
    try:
        batches.read([str(wide), str(plain)], 2)
        with pytest.raises(Exception) as failed:
            batches.rows().select("*").toArrow()
        assert batches.widen_columns(failed.value)
        assert not batches.widen_columns(failed.value)  # once
        rows = batches.rows().select("u", "a", CORRUPT).toArrow().to_pylist()
        assert Counter(r[CORRUPT] for r in rows) == {None: 3, "," * 30000: 1}
        assert sorted((r["u"], r["a"]) for r in rows if not r[CORRUPT]) == [
            ("x", 1),
            ("y", 2),
            ("z", 3),
        ]
        assert not batches.widen_columns(RuntimeError("another failure"))
        before = batches.rows()
        batches.read([str(plain)], 3)
        assert batches.rows() is not before  # the default reader again
        assert batches.rows().select("u").toArrow().column(0).to_pylist() == ["z"]
    finally:
        batches.close()


def test_the_index_error_without_its_message_widens_only_for_a_wide_file(
    tmp_path: Path, spark: SparkSession
) -> None:
    """HotSpot throws a hot exception without its message (the suite's JVM had, once: the
    reader's index error as "ArrayIndexOutOfBoundsException - null"); the files decide."""
    error = RuntimeError(
        "com.univocity.parsers.common.TextParsingException: "
        "java.lang.ArrayIndexOutOfBoundsException - null"
    )
    wide, plain = tmp_path / "a.csv", tmp_path / "b.csv"
    wide.write_bytes(b"u,a\n" + b"," * 30000 + b"\n")
    plain.write_bytes(b"u,a\nz,3\n")
    batches = FileBatches(spark, "csv", "u string, a bigint")
    try:
        batches.read([str(plain)], 1)
        assert not batches.widen_columns(error)
        batches.read([str(wide), str(plain)], 3)
        assert batches.widen_columns(error)
        rows = batches.rows().select("u", CORRUPT).toArrow().to_pylist()
        assert Counter(r[CORRUPT] for r in rows) == {None: 1, "," * 30000: 1}
    finally:
        batches.close()


# (line text, good rows' `a`, bad records it gives): what Spark's JSON reader makes of a line.
JSON_LINES: list[tuple[bytes, list[int | None], int]] = [
    (b'{"a": 1}', [1], 0),
    (b'[{"a": 2}, {"a": 3}]', [2, 3], 0),  # an array of objects: a row each
    (b'{"a": "x"}', [], 1),
    (b"[1, 2]", [], 1),
    (b"7", [], 1),
    (b'{"a": ""}', [], 1),
    (b'[{"a": "x"}, {"a": "y"}]', [], 2),  # one line, two bad records
    (b'{"a": "\xff\xfe\xc3"}', [], 1),  # invalid UTF-8
    (b'  {"a": 1.5}  ', [], 1),
    (b'{"a": ', [], 1),
    (b"{}", [None], 0),
    (b"", [], 0),
    (b" \t ", [], 0),
]


def test_json_records_and_bad_line_numbers_match_a_python_reading(
    tmp_path: Path, spark: SparkSession
) -> None:
    """Good records as Spark's JSON reader parses them; every bad record's text and line
    number, in files with a BOM, every kind of line end and bad lines repeated."""
    d = tmp_path / "in"
    d.mkdir()
    good: list[tuple[str, int | None]] = []
    bad: list[tuple[str, int, str]] = []
    for f, (name, sep) in enumerate(zip(ODD_NAMES, [b"\n", b"\r\n", b"\r"], strict=True)):
        order = JSON_LINES[f:] + JSON_LINES + JSON_LINES[:f]  # every bad line twice per file
        lines = [line for line, _, _ in order]
        data = (b"\xef\xbb\xbf" if f == 2 else b"") + sep.join(lines) + (sep if f else b"")
        (d / name).write_bytes(data)
        path = str(d / name)
        for n, (line, values, errors) in enumerate(order, start=1):
            good += [(path, a) for a in values]
            text = line.decode("utf-8", errors="replace")
            bad += [(path, n, text)] * errors
    paths = [str(d / n) for n in list_input_files(str(d))]
    batches = FileBatches(spark, "json", "a bigint")
    try:
        batches.read(paths, 3)
        t = batches.rows().select("*").toArrow()
        assert set(t.column("__end").to_pylist()) == {3}
        rows = t.to_pylist()
        ok = [r for r in rows if r[CORRUPT] is None]
        assert Counter((batches.path_of(r["__file"]), r["a"]) for r in ok) == Counter(good)
        broken = [(r["__file"], r[CORRUPT]) for r in rows if r[CORRUPT] is not None]
        numbers = batches.bad_line_numbers(broken)
        got = [(batches.path_of(f), n, text) for (f, text), n in zip(broken, numbers, strict=True)]
        assert sorted(got, key=str) == sorted(bad, key=str)
    finally:
        batches.close()


def _doc(tmp: Path, fmt: str) -> dict[str, Any]:
    return {
        "name": f"files-{fmt}",
        "source": {
            "kind": "files",
            "path": str(tmp / "in"),
            "format": fmt,
            "schema": {"user": "string", "amount": "bigint"},
            "max_files_per_step": 2,
        },
        "state": [
            {
                "name": "per_user",
                "kind": "aggregate",
                "group_by": ["user"],
                "aggregates": [
                    {"name": "n", "func": "count"},
                    {"name": "total", "func": "sum", "column": "amount"},
                ],
            }
        ],
        "sinks": [{"name": "out", "kind": "files", "from": "per_user", "path": "out"}],
        "trigger": {"interval": "50ms"},
        "checkpoint": {"every_steps": 1},
    }


def _run(tmp: Path, spark: SparkSession, fmt: str, steps: int) -> Counter[tuple[Any, ...]]:
    r = open_runner(parse_spec(_doc(tmp, fmt)), str(tmp / "state"), base_dir=str(tmp), spark=spark)
    try:
        r.run(max_steps=steps)
    finally:
        r.close()
    return _sink_rows(r)


def _sink_rows(r: Runner) -> Counter[tuple[Any, ...]]:
    sink = r.sinks["out"]
    assert isinstance(sink, FilesSink)
    t = sink.read_all()
    assert t is not None
    out: Counter[tuple[Any, ...]] = Counter()
    for row in t.to_pylist():
        out[(row["user"], row["n"], row["total"])] += row[WEIGHT]
    return +out


def _reference(spark: SparkSession, good: list[tuple[str, int | None]]) -> Counter[Any]:
    df = spark.createDataFrame(good, "user string, amount bigint")
    agg = df.groupBy("user").agg(F.count("*"), F.sum("amount")).collect()
    return Counter(tuple(r) for r in agg)


def test_a_csv_pipeline_equals_a_batch_query_and_names_its_dead_letters(
    tmp_path: Path, spark: SparkSession
) -> None:
    d = tmp_path / "in"
    d.mkdir()
    good: list[tuple[str, int | None]] = []
    bad: list[tuple[str, int, str]] = []
    for f, name in enumerate([*ODD_NAMES, "z.csv"]):
        lines = ["user,amount"]
        for i in range(40):
            if i % 13 == 5:
                line = ["u1,not-a-number", "u2", "u3,4,5"][i % 3]
                bad.append((str(d / name), len(lines) + 1, line))
            else:
                user, amount = f"u{(f * 40 + i) % 7}", None if i % 11 == 0 else i
                line = f"{user},{'' if amount is None else amount}"
                good.append((user, amount))
            lines.append(line)
        lines.append(f'"q,{f}\r\n""{f}""",{f}')  # quoted: a comma, a line end, quotes
        good.append((f'q,{f}\n"{f}"', f))
        if name == "z.csv":  # too wide for Spark's CSV reader at first, then malformed
            bad.append((str(d / name), len(lines) + 2, "," * 30000))
            lines.append("," * 30000)
        (d / name).write_text("\r\n".join(lines) + "\r\n")
    assert _run(tmp_path, spark, "csv", steps=2) == _reference(spark, good)
    letters = [
        json.loads(x)
        for p in sorted((tmp_path / "state" / "dead-letters").iterdir())
        for x in p.read_text().splitlines()
    ]
    assert sorted((x["file"], x["line"], x["record"]) for x in letters) == sorted(bad)


def test_a_parquet_pipeline_equals_a_batch_query(tmp_path: Path, spark: SparkSession) -> None:
    d = tmp_path / "in"
    d.mkdir()
    good: list[tuple[str, int | None]] = []
    for f, name in enumerate(ODD_NAMES):
        rows = [(f"u{(f * 50 + i) % 5}", None if i % 9 == 0 else i) for i in range(50)]
        good += rows
        users, amounts = zip(*rows, strict=True)
        table = pa.table({"user": list(users), "amount": pa.array(amounts, pa.int64())})
        pq.write_table(table, d / name.replace(".json", ".parquet"))
    assert _run(tmp_path, spark, "parquet", steps=2) == _reference(spark, good)


@pytest.mark.parametrize("arrives", [False, True])
def test_the_first_step_is_the_batch_read_ahead_and_the_query_starts_after_it(
    tmp_path: Path, spark: SparkSession, arrives: bool
) -> None:
    """A run reads its first batch while its query starts: the files present then, up to
    max_files_per_step (2). Its first step is that batch, with no Spark job of its own; the
    query starts at the batch's end, so a file that arrived meanwhile is the next step's.
    (A `where` keeps the steps in Spark: files the driver reads skip Spark, and the read-ahead
    with it.)"""
    d = tmp_path / "in"
    d.mkdir()
    rows = [[(f"u{(f + i) % 3}", f * 100 + i) for i in range(20)] for f in range(2)]

    def write(f: int) -> None:
        lines = ["user,amount", *(f"{u},{a}" for u, a in rows[f])]
        (d / f"part-{f}.csv").write_text("\n".join(lines) + "\n")

    write(0)
    doc = {**_doc(tmp_path, "csv"), "transform": {"where": "amount >= 0"}}
    r = open_runner(
        parse_spec(doc),
        str(tmp_path / "state"),
        base_dir=str(tmp_path),
        spark=spark,
    )
    try:
        assert r._ahead is not None and r._ahead.end == 1
        r._ahead.wait()
        if arrives:
            write(1)
        jobs = 0
        tables = r.jobs.tables

        def counted(*args: Any) -> Any:
            nonlocal jobs
            jobs += 1
            return tables(*args)

        r.jobs.tables = counted  # type: ignore[method-assign]
        result = r.run(max_steps=2 if arrives else 1)
    finally:
        r.close()
    assert jobs == (1 if arrives else 0)
    assert (result.last_step, result.source_offsets) == (
        (2, {"input": 2}) if arrives else (1, {"input": 1})
    )
    assert _sink_rows(r) == _reference(spark, rows[0] + rows[1] if arrives else rows[0])
