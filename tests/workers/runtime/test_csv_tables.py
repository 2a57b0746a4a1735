"""A SQL pipeline over CSV tables as DuckDB writes them (RFC 4180: fields with commas,
quotes and line ends quoted; TPC-H-like customers and orders), in several files per table
advancing independently, one of them with CRLF line ends and one with a malformed record.
Each view's integrated output equals DuckDB's answer over the same files (`read_csv`), also
when the run stops and a second run resumes from its checkpoint, redoing a logged step; the
malformed record is a dead letter naming its file and first line, whichever path (the
driver's Arrow parse or Spark's CSV reader) read each step."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
from pyspark.sql import SparkSession

from pipeline_spec.model import parse_spec

from .test_sql_pipeline import integrated, run_and_resume

SQL = """
CREATE VIEW per_segment AS
  SELECT c_mktsegment, count(*) AS n, count(c_comment) AS commented, max(c_name) AS last_name
  FROM customer GROUP BY c_mktsegment;
CREATE VIEW quoted AS
  SELECT c_custkey, c_name, c_address FROM customer
  WHERE c_comment LIKE '%,%' OR c_comment LIKE '%"%' OR c_address LIKE '%,%';
CREATE VIEW open_orders AS
  SELECT c.c_mktsegment, o.o_orderstatus, count(*) AS n, sum(o.o_quantity) AS quantity,
    max(o.o_comment) AS top_comment, min(o.o_orderdate) AS first_day
  FROM orders o JOIN customer c ON o.o_custkey = c.c_custkey
  WHERE o.o_orderdate < DATE '1995-03-15'
  GROUP BY c.c_mktsegment, o.o_orderstatus
"""
VIEWS = ("per_segment", "quoted", "open_orders")
CUSTOMER = {
    "c_custkey": "bigint",
    "c_name": "string",
    "c_address": "string",
    "c_mktsegment": "string",
    "c_comment": "string",
}
ORDERS = {
    "o_orderkey": "bigint",
    "o_custkey": "bigint",
    "o_orderstatus": "string",
    "o_quantity": "bigint",
    "o_orderdate": "date",
    "o_comment": "string",
}
WORDS = ["ironic", "packages", "slyly", "final", "requests", "special", "blithely", "quick"]
ODD = [", ", '"', '""', "\n", "\r\n", ",\n", "", "\u00e9", " "]  # what DuckDB quotes, and not


def _text(rng: random.Random) -> str | None:
    if rng.random() < 0.05:
        return None
    parts = [rng.choice(WORDS) for _ in range(rng.randint(0, 4))]
    for _ in range(rng.randint(0, 2)):
        parts.insert(rng.randint(0, len(parts)), rng.choice(ODD))
    return " ".join(parts)


def _write(con: duckdb.DuckDBPyConnection, table: str, rows: list[tuple], path: Path) -> None:
    con.execute(f"DELETE FROM {table}")
    con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    con.execute(f"COPY {table} TO '{path}' (HEADER, DELIMITER ',')")


def _write_input(tmp: Path) -> tuple[Path, int]:
    """Four customer files and five order files, DuckDB-written; the third orders file
    with CRLF line ends, the fourth with a malformed record: its path and first line."""
    rng = random.Random(48)
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE customer (c_custkey BIGINT, c_name VARCHAR, c_address VARCHAR,"
        " c_mktsegment VARCHAR, c_comment VARCHAR)"
    )
    con.execute(
        "CREATE TABLE orders (o_orderkey BIGINT, o_custkey BIGINT, o_orderstatus VARCHAR,"
        " o_quantity BIGINT, o_orderdate DATE, o_comment VARCHAR)"
    )
    (tmp / "customer").mkdir()
    (tmp / "orders").mkdir()
    segments = ["BUILDING", "AUTO,MOBILE", 'MACHIN"ERY', "HOUSE\nHOLD", None]
    for f in range(4):
        rows = [
            (k, f"Customer#{k:09d}", _text(rng), rng.choice(segments), _text(rng))
            for k in range(f * 30, f * 30 + 30)
        ]
        _write(con, "customer", rows, tmp / "customer" / f"part-{f}.csv")
    for f in range(5):
        rows = [
            (
                k,
                rng.randrange(130),  # some customers never arrive: the join drops them
                rng.choice("OFP"),
                None if rng.random() < 0.05 else rng.randint(1, 50),
                f"199{rng.randint(2, 8)}-0{rng.randint(1, 9)}-{rng.randint(10, 28)}",
                _text(rng),
            )
            for k in range(f * 40, f * 40 + 40)
        ]
        _write(con, "orders", rows, tmp / "orders" / f"part-{f}.csv")
    crlf = tmp / "orders" / "part-2.csv"
    crlf.write_bytes(crlf.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
    bad = tmp / "orders" / "part-3.csv"
    lines = bad.read_bytes().count(b"\n")
    with bad.open("ab") as out:
        out.write(b'999,1,O,"not, a number",1994-01-01,"a\nbad record"\n')
    return bad, lines + 1


def _spec(tmp: Path) -> dict[str, Any]:
    def table(name: str, schema: dict[str, str], per_step: int) -> dict[str, Any]:
        return {
            "kind": "files",
            "table": name,
            "path": str(tmp / name),
            "format": "csv",
            "schema": schema,
            "max_files_per_step": per_step,
        }

    return {
        "name": "tpch-csv",
        "source": table("orders", ORDERS, 1),
        "tables": [table("customer", CUSTOMER, 2)],
        "sql": SQL,
        "sinks": [
            {"name": v, "kind": "files", "from": v, "path": str(tmp / v), "format": "jsonl"}
            for v in VIEWS
        ],
        "checkpoint": {"every_steps": 2},
        "trigger": {"interval": "200ms"},
    }


def _oracle(tmp: Path, view: str) -> Counter[tuple[Any, ...]]:
    con = duckdb.connect()
    types = {"bigint": "BIGINT", "string": "VARCHAR", "date": "DATE"}
    for name, schema in (("customer", CUSTOMER), ("orders", ORDERS)):
        columns = ", ".join(f"{c}: '{types[t]}'" for c, t in schema.items())
        # File by file: DuckDB takes the first file's line ends for every file of a glob.
        con.execute(
            f"CREATE TABLE {name} AS "
            + " UNION ALL ".join(
                f"SELECT * FROM read_csv('{path}', header = true, columns = {{{columns}}},"
                " ignore_errors = true)"
                for path in sorted((tmp / name).iterdir())
            )
        )
    for statement in SQL.split(";"):
        con.execute(statement)
    out: Counter[tuple[Any, ...]] = Counter()
    for row in con.execute(f"SELECT * FROM {view}").fetchall():
        out[tuple(v.isoformat() if hasattr(v, "isoformat") else v for v in row)] += 1
    return out


def test_views_over_quoted_csv_tables_equal_duckdb_across_a_resume(
    tmp_path: Path, spark: SparkSession
) -> None:
    bad, line = _write_input(tmp_path)
    s = parse_spec(_spec(tmp_path))
    run_and_resume(s, tmp_path, spark)
    for view in VIEWS:
        expected = _oracle(tmp_path, view)
        assert len(expected) > 3, view
        assert integrated(tmp_path / view) == expected, view
    letters = [
        json.loads(x)
        for p in (tmp_path / "state" / "dead-letters").iterdir()
        for x in p.read_text().splitlines()
    ]
    assert [(x["table"], x["file"], x["line"]) for x in letters] == [("orders", str(bad), line)]
    assert letters[0]["record"] == '999,1,O,"not, a number",1994-01-01,"a\nbad record"'
