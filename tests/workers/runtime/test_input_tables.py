"""A SQL pipeline with several input tables, each its own source (`source` and `tables`):
orders from files and customers' regions pushed to an input log, joined and aggregated.
Each table advances by its own offsets; every checkpoint and offset log entry holds them
all; a second run resumes each table where the first stopped (redoing a logged step with
exactly its input); the integrated output equals DuckDB's batch query over all the input;
a bad record's dead letter names its table."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from pipeline_spec.model import SpecError, parse_spec
from storage_engine import StorageLocation
from storage_engine.input_log import InputLog
from workers.runtime.offset_log import OffsetLog
from workers.runtime.run_builder import open_runner

from ... import customers
from .test_sql_pipeline import integrated

SQL = """
CREATE VIEW spend AS
  SELECT r.region, count(*) AS n, sum(o.amount) AS total
  FROM orders o JOIN regions r ON o.customer = r.customer
  GROUP BY r.region;
CREATE VIEW unplaced AS
  SELECT o.customer, count(*) AS n
  FROM orders o LEFT JOIN regions r ON o.customer = r.customer
  WHERE r.region IS NULL GROUP BY o.customer
"""
REGIONS = pa.schema([("customer", pa.string()), ("region", pa.string())])


def spec(tmp: Path) -> dict[str, Any]:
    return {
        "name": "two-tables",
        "source": {
            "kind": "files",
            "table": "orders",
            "path": str(tmp / "in"),
            "format": "json",
            "schema": {"customer": "string", "amount": "bigint"},
            "max_files_per_step": 1,
        },
        "tables": [
            {
                "kind": "log",
                "table": "regions",
                "stream": "regions",
                "schema": {"customer": "string", "region": "string"},
                "max_records_per_step": 7,
            }
        ],
        "sql": SQL,
        "sinks": [
            {"name": v, "kind": "files", "from": v, "path": str(tmp / v), "format": "jsonl"}
            for v in ("spend", "unplaced")
        ],
        "checkpoint": {"every_steps": 2},
        "trigger": {"interval": "200ms"},
    }


def regions(first: int, last: int) -> pa.Table:
    rows = [{"customer": f"c{i}", "region": f"r{i % 3}"} for i in range(first, last)]
    return pa.Table.from_pylist(rows, schema=REGIONS)


def oracle(tmp: Path, pushed: pa.Table, view: str) -> Counter[tuple[Any, ...]]:
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE orders AS SELECT * FROM read_json("
        f"'{tmp / 'in'}/*', columns={{customer: 'VARCHAR', amount: 'BIGINT'}}, "
        "ignore_errors=true) WHERE customer IS NOT NULL"
    )
    con.register("pushed", pushed)
    con.execute("CREATE TABLE regions AS SELECT * FROM pushed")
    for statement in SQL.split(";"):
        con.execute(statement)
    return Counter(tuple(r) for r in con.execute(f"SELECT * FROM {view}").fetchall())


def test_each_table_advances_and_resumes_by_its_own_offsets(
    tmp_path: Path, spark: SparkSession
) -> None:
    customers.write_input(tmp_path / "in", 4, 150, customers=20, seed=3)
    with (tmp_path / "in" / "part-0001.json").open("a") as f:
        f.write("{not json\n")
    s = parse_spec(spec(tmp_path))
    state = tmp_path / "state"
    log = InputLog(str(state / "input-log" / "regions"), REGIONS)
    log.append(regions(0, 12))

    r = open_runner(s, str(state), base_dir=str(tmp_path), spark=spark)
    try:
        r.run(max_steps=3, stop_when_idle=2.0)
        first = dict(r.offsets)
    finally:
        r.close()
    # Three steps, each table at most its step's worth: 1 file, 7 records. The first is
    # read by the driver, both tables', before the query starts (a JSON file and a log).
    assert first["orders"] == 3 and first["regions"] == 12
    records = [json.loads(x) for x in (state / "metrics.jsonl").read_text().splitlines()]
    (started,) = [x for x in records if x.get("event") == "started"]
    assert "query_start" not in started["phases_ms"]
    assert next(x["rows_in"] for x in records if "step" in x) == 150 + 7
    logged = OffsetLog(str(state)).read(3)
    assert logged is not None and logged.keys() == {"orders", "regions"}

    # More input for both tables; the second run restores the checkpoint of step 2 and
    # redoes step 3 with the input it logged before it reads any new input.
    customers.write_input(tmp_path / "in2", 2, 150, customers=20, seed=4)
    for f in (tmp_path / "in2").iterdir():
        f.rename(tmp_path / "in" / f"part-9{f.name}")
    log.append(regions(12, 21))
    r = open_runner(s, str(state), base_dir=str(tmp_path), spark=spark)
    try:
        assert (r.step, r.offsets) == (2, {"orders": 2, "regions": 12})
        r.run(stop_when_idle=2.0)
        assert r.offsets == {"orders": 6, "regions": 21}
    finally:
        r.close()
    assert OffsetLog(str(state)).read(3) == logged
    loc = StorageLocation.open(str(state), checkpoint="none")
    try:
        meta = loc.checkpoint_metadata(loc.list_checkpoints()[-1].uuid)
        oldest = loc.checkpoint_metadata(loc.list_checkpoints()[0].uuid)
    finally:
        loc.close()

    pushed = regions(0, 21)
    assert integrated(tmp_path / "spend") == oracle(tmp_path, pushed, "spend")
    assert integrated(tmp_path / "unplaced") == oracle(tmp_path, pushed, "unplaced")
    # Retention kept each log only from the oldest checkpoint's offset of its table.
    assert 0 < log.start() <= oldest["source_offsets"]["regions"]
    assert meta["source_offsets"] == {"orders": 6, "regions": 21}
    assert "source_offset" not in meta  # the first table's again: written no more
    letters = [
        json.loads(line)
        for f in (state / "dead-letters").iterdir()
        for line in f.read_text().splitlines()
    ]
    assert [(d["table"], d["line"]) for d in letters] == [("orders", 151)]


def test_tables_are_checked_field_by_field(tmp_path: Path, spark: SparkSession) -> None:
    doc = spec(tmp_path)
    doc["tables"][0]["table"] = "orders"
    with pytest.raises(SpecError, match="table names must be unique"):
        parse_spec(doc)
    doc = spec(tmp_path)
    doc["tables"][0]["schema"] = {"customer": "string", "region": "interval"}
    with pytest.raises(SpecError) as e:
        parse_spec(doc)
    assert e.value.errors[0][0] == "tables.0.schema"
    doc = spec(tmp_path)
    doc["tables"].append({"kind": "files", "table": "x", "path": "p", "format": "csv"})
    with pytest.raises(SpecError) as e:
        open_runner(parse_spec(doc), str(tmp_path / "s"), spark=spark)
    assert e.value.errors == [("tables.1.schema", "give the columns and types of the input")]
    doc = spec(tmp_path)
    doc.pop("sql")
    doc["state"] = [{"name": "d", "kind": "distinct", "columns": ["customer"]}]
    with pytest.raises(SpecError, match="several input tables need sql"):
        parse_spec(doc)
