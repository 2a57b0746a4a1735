"""The TPC-H queries of docs/examples/tpch/tpch.yaml run by DuckDB as batch queries: the
oracle that tests/spindle_sql/test_tpch.py and tests/workers/runtime/test_tpch_pipeline.py compare
Spindle's views with.

DuckDB runs each query's own text, as the pipeline's `sql` holds it (the specification's
text, which DuckDB reads as it is: comma joins, `interval`, `extract`, subqueries, the
column lists of q13 and q15), not a translation and not Spindle's parser. It reads the
same files as the pipeline, with DuckDB's own Parquet and CSV readers. Where DuckDB's
types differ from Spark's (the average of a DECIMAL is a double in DuckDB, a DECIMAL(p+4,
s+4) in Spark; so is a DECIMAL divided by a DECIMAL), values are compared normalised
(`oracles.nexmark.norm`: numbers to 6 decimals).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import duckdb

from .nexmark import Rows, rows_of

Format = Literal["parquet", "csv"]

_STATEMENT_END = re.compile(r";\s*\n")
_QUERY_VIEW = re.compile(r"^\s*create\s+view\s+(q\d+)\b", re.IGNORECASE | re.MULTILINE)


def queries(sql: str) -> dict[str, str]:
    """Each query's text by its name (`q1` ... `q22`): its view's statement, after the
    statements of the views it alone reads (q15's `revenue0`), with the comment before it.
    Statements end at a semicolon that ends a line: the queries have none elsewhere."""
    out: dict[str, str] = {}
    pending: list[str] = []
    for statement in _STATEMENT_END.split(sql.strip()):
        pending.append(statement)
        m = _QUERY_VIEW.search(statement)
        if m:
            out[m.group(1)] = ";\n".join(pending).strip() + "\n"
            pending = []
    if "".join(pending).strip():
        raise ValueError(f"statements after the last query: {pending}")
    return out


def duckdb_type(spark_type: str) -> str:
    """A column type of the tables (Spark's name) as DuckDB names it."""
    names = {"string": "VARCHAR", "int": "INTEGER"}
    return names.get(spark_type, spark_type.upper())


def oracle(
    name: str,
    text: str,
    tables: dict[str, tuple[dict[str, str], Sequence[Path]]],
    fmt: Format,
) -> Rows:
    """Query `name`'s rows, its text (`queries`) run by DuckDB over `tables`: per table, its
    columns (name -> Spark type) and the files read so far (none: an empty table), Parquet
    or CSV with a header line."""
    con = duckdb.connect()
    for table, (columns, files) in tables.items():
        typed = ", ".join(f"{c} {duckdb_type(t)}" for c, t in columns.items())
        con.execute(f"CREATE TABLE {table} ({typed})")
        if files:
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {_reader(columns, files, fmt)}")
    for statement in _STATEMENT_END.split(text.strip()):
        con.execute(statement)
    return rows_of(con.execute(f"SELECT * FROM {name}").fetchall())


def _reader(columns: dict[str, str], files: Sequence[Path], fmt: Format) -> str:
    paths = "[" + ", ".join(f"'{p}'" for p in files) + "]"
    if fmt == "parquet":
        return f"read_parquet({paths})"
    types = "{" + ", ".join(f"'{c}': '{duckdb_type(t)}'" for c, t in columns.items()) + "}"
    return f"read_csv({paths}, header = true, quote = '\"', escape = '\"', columns = {types})"
