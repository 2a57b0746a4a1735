"""A `files` source's micro-batch read by Spark's own readers (`workers.file_batches`), on
real Spark and real files, against a plain-Python reading of the same bytes: CSV lines and
their numbers, JSON records and the line numbers of bad ones, line endings, blank lines, CSV
headers, a BOM, invalid UTF-8, file names Hadoop paths cannot hold; whole runs of CSV and
Parquet pipelines against a Spark batch query over the input; and the first batch of a run,
read ahead while its query starts, used only for that batch."""

from __future__ import annotations

import json
import re
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
from workers.file_batches import CORRUPT, FileBatches
from workers.input_files import list_input_files
from workers.runner import Runner
from workers.sinks import FilesSink

# Names a Hadoop path cannot hold (a colon) or Spark would glob (brackets, braces, stars).
ODD_NAMES = ["events-12:00:00.json", "x [1] {a,b} *?.json", "data#1 %20 + é.json"]


def _expected(paths: list[str], header: bool) -> list[tuple[str, int, str]]:
    """What a batch of `paths` must read: every non-blank line with its 1-based number."""
    out = []
    for p in paths:
        text = Path(p).read_bytes().decode("utf-8", errors="replace")
        for n, line in enumerate(re.split(r"\r\n|\n|\r", text), start=1):
            if line.strip(" \t\v\f") and not (header and n == 1):
                out.append((p, n, line))
    return sorted(out)


def _read(batches: FileBatches, paths: list[str], end: int) -> list[tuple[str, int, str]]:
    batches.read(paths, end)
    t = batches.rows().select("*").toArrow()
    assert set(t.column("__end").to_pylist()) <= {end}
    rows = zip(*(t.column(c).to_pylist() for c in ("__file", "__lineno", "__line")), strict=True)
    return sorted((batches.path_of(f), n, line) for f, n, line in rows)


def test_csv_lines_and_names_match_a_python_reading(tmp_path: Path, spark: SparkSession) -> None:
    d = tmp_path / "in"
    d.mkdir()
    (d / ODD_NAMES[0]).write_bytes(b"u,a\r\nx,1\r\nx,2\r\n\r\n  \t \nx,\xff\n")
    (d / ODD_NAMES[1]).write_bytes(b"u,a\rx,3\rx,4\r\rx,5")  # old Mac line ends
    (d / ODD_NAMES[2]).write_bytes(b"u,a\n\n\nx,6\nx,\n")
    paths = [str(d / n) for n in list_input_files(str(d))]
    batches = FileBatches(spark, "csv", "u string, a bigint")
    try:
        got = _read(batches, paths, 3)
        assert got == _expected(paths, header=True)
        assert len(got) == 8 and any("\ufffd" in line for _, _, line in got)
        # The next batch replaces the last one's files.
        assert _read(batches, paths[1:2], 4) == _expected(paths[1:2], header=True)
    finally:
        batches.close()


def test_csv_header_lines_are_left_out(tmp_path: Path, spark: SparkSession) -> None:
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.csv").write_text("user,amount\nu1,1\n\nu2,2\n")
    (d / "b.csv").write_text("user,amount\r\nuser,amount\r\nu3,3\r\n")  # a data row like the header
    paths = [str(d / "a.csv"), str(d / "b.csv")]
    batches = FileBatches(spark, "csv", "user string, amount bigint")
    try:
        assert _read(batches, paths, 2) == _expected(paths, header=True)
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
    r = Runner(parse_spec(_doc(tmp, fmt)), str(tmp / "state"), base_dir=str(tmp), spark=spark)
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
    r = Runner(
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
    assert (result.last_step, result.source_offset) == ((2, 2) if arrives else (1, 1))
    assert _sink_rows(r) == _reference(spark, rows[0] + rows[1] if arrives else rows[0])
