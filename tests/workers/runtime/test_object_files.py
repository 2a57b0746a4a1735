"""A SQL pipeline reading `files` tables from an object store (SeaweedFS): orders as JSON,
regions as CSV and tiers as Parquet, each under its own `s3://` prefix. Files are read in
name order, a step's downloaded first; a second run resumes at the checkpoint's file counts
and reads the files uploaded since; the integrated output equals DuckDB's batch query over
every file; bad lines are dead letters naming the object and the line. A missing bucket,
no object store configured and a prefix outside the object roots are clear errors before
anything runs."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from local_servers.seaweedfs import SeaweedS3
from pipeline_spec.model import SpecError, parse_spec
from workers.runtime.input_files import InputFilesError
from workers.runtime.run_builder import open_runner

from .test_sql_pipeline import integrated

SQL = """
CREATE VIEW spend AS
  SELECT r.region, count(*) AS n, sum(o.amount) AS total
  FROM orders o JOIN regions r ON o.customer = r.customer
  GROUP BY r.region;
CREATE VIEW per_tier AS
  SELECT t.tier, count(*) AS n, max(o.amount) AS top
  FROM orders o JOIN tiers t ON o.customer = t.customer
  GROUP BY t.tier
"""


@pytest.fixture
def lake(
    s3_server: SeaweedS3, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[SeaweedS3, str]:
    monkeypatch.setenv("SPINDLE_S3_ENDPOINT", s3_server.endpoint)
    monkeypatch.setenv("SPINDLE_S3_ACCESS_KEY", s3_server.access_key)
    monkeypatch.setenv("SPINDLE_S3_SECRET_KEY", s3_server.secret_key)
    return s3_server, s3_bucket


def spec(tmp: Path, bucket: str) -> dict[str, Any]:
    def files(table: str, fmt: str, schema: dict[str, str], per_step: int) -> dict[str, Any]:
        return {
            "kind": "files",
            "table": table,
            "path": f"s3://{bucket}/in/{table}",
            "format": fmt,
            "schema": schema,
            "max_files_per_step": per_step,
        }

    return {
        "name": "object-files",
        "source": files("orders", "json", {"customer": "string", "amount": "bigint"}, 1),
        "tables": [
            files("regions", "csv", {"customer": "string", "region": "string"}, 5),
            files("tiers", "parquet", {"customer": "string", "tier": "string"}, 5),
        ],
        "sql": SQL,
        "sinks": [
            {"name": v, "kind": "files", "from": v, "path": str(tmp / v), "format": "jsonl"}
            for v in ("spend", "per_tier")
        ],
        "checkpoint": {"every_steps": 2},
        "trigger": {"interval": "200ms"},
    }


def orders_only(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` with only its orders table, counted per customer to one sink."""
    sql = "CREATE VIEW spend AS SELECT customer, count(*) AS n FROM orders GROUP BY customer"
    return {**doc, "tables": [], "sql": sql, "sinks": doc["sinks"][:1]}


def put(server: SeaweedS3, bucket: str, key: str, data: bytes) -> None:
    server.client().put_object(bucket, key, io.BytesIO(data), len(data))


def orders_file(first: int, last: int) -> bytes:
    lines = [json.dumps({"customer": f"c{i % 7}", "amount": i}) for i in range(first, last)]
    return ("\n".join(lines) + "\n").encode()


def parquet(rows: list[tuple[str, str]]) -> bytes:
    sink = io.BytesIO()
    table = pa.table({"customer": [c for c, _ in rows], "tier": [t for _, t in rows]})
    pq.write_table(table, sink)
    return sink.getvalue()


def oracle(
    orders: list[tuple[str, int]],
    regions: list[tuple[str, str]],
    tiers: list[tuple[str, str]],
    view: str,
) -> Counter[tuple[Any, ...]]:
    con = duckdb.connect()
    for name, columns, rows in (
        ("orders", "customer VARCHAR, amount BIGINT", orders),
        ("regions", "customer VARCHAR, region VARCHAR", regions),
        ("tiers", "customer VARCHAR, tier VARCHAR", tiers),
    ):
        con.execute(f"CREATE TABLE {name} ({columns})")
        con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    for statement in SQL.split(";"):
        con.execute(statement)
    return Counter(tuple(r) for r in con.execute(f"SELECT * FROM {view}").fetchall())


def test_files_tables_on_an_object_store_resume_and_match_the_batch_query(
    tmp_path: Path, spark: SparkSession, lake: tuple[SeaweedS3, str]
) -> None:
    server, bucket = lake
    put(server, bucket, "in/orders/000.json", orders_file(0, 20))
    bad = b'{"customer": "c1", "amount": 5}\n{not json\n'
    put(server, bucket, "in/orders/001.json", bad)
    # Not the source's files: a subdirectory's, and one being written.
    put(server, bucket, "in/orders/old/000.json", orders_file(100, 120))
    put(server, bucket, "in/orders/_002.json.tmp", orders_file(200, 220))
    regions = [(f"c{i}", f"r{i % 3}") for i in range(7)]
    put(server, bucket, "in/regions/a.csv", b"customer,region\n" + b"c0,r0\nc1\n")
    put(server, bucket, "in/regions/b.csv", b"customer,region\n" + b"c1,r1\nc2,r2\nc3,r0\n")
    tiers = [(f"c{i}", "gold" if i < 3 else "basic") for i in range(7)]
    put(server, bucket, "in/tiers/t1.parquet", parquet(tiers[:4]))

    s = parse_spec(spec(tmp_path, bucket))
    state = tmp_path / "state"
    roots = [f"s3://{bucket}/in"]
    r = open_runner(s, str(state), base_dir=str(tmp_path), spark=spark, object_roots=roots)
    try:
        r.run(max_steps=3, stop_when_idle=2.0)
        assert r.offsets == {"orders": 2, "regions": 2, "tiers": 1}
    finally:
        r.close()

    # More files; the second run restores step 2 and reads on.
    put(server, bucket, "in/orders/002.json", orders_file(20, 50))
    put(server, bucket, "in/regions/c.csv", b"customer,region\nc4,r1\nc5,r2\nc6,r0\n")
    put(server, bucket, "in/tiers/t2.parquet", parquet(tiers[4:]))
    r = open_runner(s, str(state), base_dir=str(tmp_path), spark=spark, object_roots=roots)
    try:
        assert r.step == 2
        # Restored with the checkpoint: the sinks' last written steps up to step 2.
        assert r.written.steps == {"spend": 2, "per_tier": 2}
        r.run(stop_when_idle=2.0)
        assert r.offsets == {"orders": 3, "regions": 3, "tiers": 2}
    finally:
        r.close()

    orders = [(f"c{i % 7}", i) for i in range(50)] + [("c1", 5)]
    records = [json.loads(x) for x in (state / "metrics.jsonl").read_text().splitlines()]
    last = [x for x in records if "sinks" in x][-1]
    for view in ("spend", "per_tier"):
        assert integrated(tmp_path / view) == oracle(orders, regions, tiers, view), view
        # Each sink's last step that wrote rows (its newest file), in the step records.
        newest = max(int(f.stem.split("-")[1]) for f in (tmp_path / view).iterdir())
        assert last["sinks"][view]["last_step"] == newest
    letters = sorted(
        (d["file"], d["line"], d["record"])
        for f in (state / "dead-letters").iterdir()
        for d in map(json.loads, f.read_text().splitlines())
    )
    assert letters == [
        (f"s3://{bucket}/in/orders/001.json", 2, "{not json"),
        (f"s3://{bucket}/in/regions/a.csv", 3, "c1"),
    ]


def test_a_missing_bucket_or_a_prefix_outside_the_roots_is_a_clear_error(
    tmp_path: Path,
    spark: SparkSession,
    lake: tuple[SeaweedS3, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, bucket = lake
    doc = orders_only(spec(tmp_path, bucket))
    doc["source"]["path"] = "s3://no-such-bucket-here/in/orders"
    with pytest.raises(InputFilesError, match="bucket 'no-such-bucket-here' does not exist"):
        open_runner(parse_spec(doc), str(tmp_path / "s1"), base_dir=str(tmp_path), spark=spark)
    # No object store configured: the setting is named.
    with monkeypatch.context() as m:
        m.delenv("SPINDLE_S3_ENDPOINT")
        with pytest.raises(InputFilesError, match=r"table 'orders': .*SPINDLE_S3_ENDPOINT"):
            open_runner(parse_spec(doc), str(tmp_path / "s3"), base_dir=str(tmp_path), spark=spark)
    doc["source"]["path"] = f"s3://{bucket}/elsewhere"
    with pytest.raises(SpecError) as e:
        open_runner(
            parse_spec(doc),
            str(tmp_path / "s2"),
            base_dir=str(tmp_path),
            spark=spark,
            object_roots=[f"s3://{bucket}/in"],
        )
    assert e.value.errors[0][0] == "source.path"


def test_a_stopped_object_store_fails_the_run_and_a_new_run_loses_nothing(
    tmp_path: Path, spark: SparkSession, lake: tuple[SeaweedS3, str]
) -> None:
    server, bucket = lake
    doc = orders_only(spec(tmp_path, bucket))
    doc["checkpoint"] = {"every_steps": 1}
    for f in range(3):
        put(server, bucket, f"in/orders/{f:03}.json", orders_file(f * 10, f * 10 + 10))
    s, state = parse_spec(doc), str(tmp_path / "state")
    r = open_runner(s, state, base_dir=str(tmp_path), spark=spark)
    try:
        r.run(max_steps=1)
    finally:
        r.close()
    # The store goes away while the next run reads: the run fails naming the prefix (the
    # control plane's restart policy takes over), having written nothing it cannot redo.
    r = open_runner(s, state, base_dir=str(tmp_path), spark=spark)
    try:
        server.stop()
        with pytest.raises(Exception, match=f"table 'orders': s3://{bucket}/in/orders"):
            r.run(stop_when_idle=2.0)
    finally:
        server.start()
        r.close()
    r = open_runner(s, state, base_dir=str(tmp_path), spark=spark)
    try:
        r.run(stop_when_idle=2.0)
        assert r.offsets == {"orders": 3}
    finally:
        r.close()
    expected = Counter((f"c{c}", sum(1 for i in range(30) if i % 7 == c)) for c in range(7))
    assert integrated(tmp_path / "spend") == expected
