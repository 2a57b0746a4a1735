"""A SQL pipeline reading two Kafka tables from a real broker (Tansu): orders as JSON from a
topic of three partitions (with metadata columns), regions as CSV. Each checkpoint holds
every partition's next offset; a second run resumes there (redoing a logged step with
exactly its records) and picks up records produced since; the integrated output equals
DuckDB's batch query over every record produced; records that do not parse are dead letters
naming topic, partition and offset."""

from __future__ import annotations

import base64
import io
import json
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import fastavro
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.sql import SparkSession

from local_servers.kafka import KafkaBroker
from pipeline_spec.model import SpecError, parse_spec
from storage_engine import StorageLocation
from workers.runtime.connectors import kafka_source
from workers.runtime.connectors.kafka_source import KafkaSourceError
from workers.runtime.offset_log import OffsetLog
from workers.runtime.run_builder import open_runner

from .test_sql_pipeline import integrated

SQL = """
CREATE VIEW spend AS
  SELECT r.region, count(*) AS n, sum(o.amount) AS total, max(o.part) AS top_partition
  FROM orders o JOIN regions r ON o.customer = r.customer
  GROUP BY r.region;
CREATE VIEW per_key AS
  SELECT k, h, count(*) AS n, min(off) AS first_offset FROM orders GROUP BY k, h
"""


def spec(tmp: Path, broker: KafkaBroker, orders: str, regions: str) -> dict[str, Any]:
    return {
        "name": "kafka-tables",
        "source": {
            "kind": "kafka",
            "table": "orders",
            "bootstrap_servers": broker.bootstrap,
            "topics": [orders],
            "schema": {"customer": "string", "amount": "bigint"},
            "metadata": {"k": "key", "part": "partition", "off": "offset", "h": "headers"},
            "max_records_per_step": 10,
            "commit_to_group": f"lag-{orders}",
        },
        "tables": [
            {
                "kind": "kafka",
                "table": "regions",
                "bootstrap_servers": broker.bootstrap,
                "topics": [regions],
                "format": "csv",
                "schema": {"customer": "string", "region": "string"},
            }
        ],
        "sql": SQL,
        "sinks": [
            {"name": v, "kind": "files", "from": v, "path": str(tmp / v), "format": "jsonl"}
            for v in ("spend", "per_key")
        ],
        "checkpoint": {"every_steps": 2},
        "trigger": {"interval": "200ms"},
    }


def producer(broker: KafkaBroker) -> Producer:
    # One record per produce request: Tansu 0.6 answers a partition's end offset as its last
    # batch's first offset + 1, which is right only for batches of one record.
    return Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1}
    )


def produce(
    broker: KafkaBroker, topic: str, records: list[tuple[int, str | None, bytes | None]]
) -> None:
    p = producer(broker)
    for partition, key, value in records:
        headers = [("src", key.encode())] if key is not None else None
        p.produce(topic, value=value, key=key, partition=partition, headers=headers)
        p.flush()


def orders(first: int, last: int) -> list[tuple[int, str | None, bytes | None]]:
    return [
        (i % 3, f"k{i % 4}", json.dumps({"customer": f"c{i % 7}", "amount": i}).encode())
        for i in range(first, last)
    ]


def last_inputs(state: Path) -> dict[str, Any]:
    """The newest step record's input figures, from the run's metrics file."""
    records = [json.loads(line) for line in (state / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if "inputs" in r][-1]["inputs"]


def oracle(
    produced: list[dict[str, Any]], regions: list[tuple[str, str]], view: str
) -> Counter[tuple[Any, ...]]:
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE orders "
        "(customer VARCHAR, amount BIGINT, k VARCHAR, part INT, off BIGINT, h VARCHAR)"
    )
    con.executemany(
        "INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?)",
        [(r["customer"], r["amount"], r["k"], r["part"], r["off"], r["h"]) for r in produced],
    )
    con.execute("CREATE TABLE regions (customer VARCHAR, region VARCHAR)")
    con.executemany("INSERT INTO regions VALUES (?, ?)", regions)
    for statement in SQL.split(";"):
        con.execute(statement)
    return Counter(tuple(r) for r in con.execute(f"SELECT * FROM {view}").fetchall())


def test_kafka_tables_resume_from_partition_offsets(
    tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker
) -> None:
    o, g = f"orders-{uuid.uuid4().hex[:8]}", f"regions-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(o, 3)
    kafka_broker.create_topic(g, 1)
    regions = [(f"c{i}", f"r{i % 3}") for i in range(7)]
    produce(kafka_broker, g, [(0, None, f"{c},{r}".encode()) for c, r in regions[:4]])
    first = orders(0, 30)
    bad = [(1, "k9", b"{not json"), (2, None, b"null"), (0, "k9", None)]
    produce(kafka_broker, o, first + bad)

    s = parse_spec(spec(tmp_path, kafka_broker, o, g))
    state = tmp_path / "state"
    r = open_runner(s, str(state), base_dir=str(tmp_path), spark=spark)
    try:
        r.run(max_steps=3, stop_when_idle=2.0)
        after_first = dict(r.offsets)
    finally:
        r.close()
    # Three steps of at most 10 orders, shared by the three partitions.
    assert sum(after_first["orders"].values()) == 30
    assert after_first["regions"] == {f"{g}:0": 4}
    logged = OffsetLog(str(state)).read(3)
    assert logged is not None and isinstance(logged["orders"][1], dict)
    # Each step's record has every table's input lag: the three bad records wait.
    inputs = last_inputs(state)
    assert inputs["orders"]["offset"] == 30 and inputs["orders"]["lag"] == 3
    assert sum(inputs["orders"]["partitions"].values()) == 3
    assert inputs["regions"]["lag"] == 0

    # More records; the second run restores the checkpoint of step 2, redoes step 3 with
    # the records it logged, then reads on.
    more = orders(30, 50)
    produce(kafka_broker, o, more)
    produce(kafka_broker, g, [(0, None, f"{c},{r}".encode()) for c, r in regions[4:]])
    r = open_runner(s, str(state), base_dir=str(tmp_path), spark=spark)
    try:
        assert r.step == 2
        r.run(stop_when_idle=2.0)
        final = dict(r.offsets)
    finally:
        r.close()
    assert OffsetLog(str(state)).read(3) == logged
    inputs = last_inputs(state)
    assert inputs["orders"]["lag"] == 0 and inputs["orders"]["offset"] == 53
    assert final["orders"] == {f"{o}:{p}": n for p, n in ((0, 18), (1, 18), (2, 17))}
    loc = StorageLocation.open(str(state), checkpoint="none")
    try:
        meta = loc.checkpoint_metadata(loc.list_checkpoints()[-1].uuid)
        held = [loc.checkpoint_metadata(c.uuid)["source_offsets"] for c in loc.list_checkpoints()]
    finally:
        loc.close()
    assert meta["source_offsets"] == final
    # The group `commit_to_group` names has a durable checkpoint's offsets (the newest one a
    # step has seen: the last is reported by the next step).
    group = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": f"lag-{o}"})
    parts = [TopicPartition(o, p) for p in range(3)]
    committed = {f"{o}:{tp.partition}": tp.offset for tp in group.committed(parts, timeout=10)}
    group.close()
    assert committed in [h["orders"] for h in held] and sum(committed.values()) > 30

    # Offsets per partition as the broker gave them (bad records take offsets too).
    produced, at = [], {0: 0, 1: 0, 2: 0}
    for p, key, value in first + bad + more:
        if value is not None and value.startswith(b'{"'):
            h = json.dumps({"src": key} if key is not None else {})  # the headers column
            produced.append({**json.loads(value), "k": key, "part": p, "off": at[p], "h": h})
        at[p] += 1
    for view in ("spend", "per_key"):
        assert integrated(tmp_path / view) == oracle(produced, regions, view), view
    letters = sorted(
        (d["table"], d["topic"], d["partition"], d["offset"], d["record"])
        for f in (state / "dead-letters").iterdir()
        for d in map(json.loads, f.read_text().splitlines())
    )
    assert letters == [
        ("orders", o, 0, 10, None),
        ("orders", o, 1, 10, "{not json"),
        ("orders", o, 2, 10, "null"),
    ]


def test_a_missing_topic_or_broker_is_a_clear_error(
    tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = spec(tmp_path, kafka_broker, "no-such-topic", "regions-none")
    with pytest.raises(KafkaSourceError, match="topic 'no-such-topic' does not exist"):
        open_runner(parse_spec(doc), str(tmp_path / "s1"), base_dir=str(tmp_path), spark=spark)
    # No broker where the spec points: the run fails once the broker timeout (30 s; 2 s
    # here) has passed, naming the table and the address.
    monkeypatch.setattr(kafka_source, "TIMEOUT_S", 2.0)
    doc["source"]["bootstrap_servers"] = "127.0.0.1:1"
    with pytest.raises(KafkaSourceError, match=r"table 'orders' \(127.0.0.1:1\): broker"):
        open_runner(parse_spec(doc), str(tmp_path / "s2"), base_dir=str(tmp_path), spark=spark)
    doc["source"]["properties"] = {"socket.timeout.ms": "100"}
    with pytest.raises(SpecError) as e:
        parse_spec(doc)
    assert e.value.errors[0][0] == "source.properties"
    del doc["source"]["properties"]
    doc["state"], doc["sql"], doc["tables"] = (
        [{"name": "d", "kind": "distinct", "columns": ["customer"]}],
        None,
        [],
    )
    doc["sinks"] = []
    with pytest.raises(SpecError, match="a kafka source needs sql"):
        parse_spec(doc)


AVRO_SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 4},
        },
    ],
}


def avro_value(record: dict[str, Any], framing: bool = True) -> bytes:
    """A record as Confluent's Avro serializer writes it: magic byte 0, a schema id, the
    datum."""
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(AVRO_SCHEMA), record)
    return (b"\x00" + (7).to_bytes(4, "big") if framing else b"") + buf.getvalue()


def test_an_avro_table_decodes_records_and_dead_letters_the_rest(
    tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker
) -> None:
    topic = f"avro-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, 2)
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    records = [
        {
            "customer": f"c{i % 5}",
            "amount": i,
            "note": None,
            "ts": t0 + timedelta(seconds=i),
            # A decimal logical type at scale 4 into a decimal(10, 2) column: HALF_UP.
            "price": Decimal(i * 37 - 500).scaleb(-4) + Decimal("12345678.0050"),
        }
        for i in range(40)
    ]
    good = [(i % 2, None, avro_value(r)) for i, r in enumerate(records)]
    unframed = avro_value(records[0], framing=False)
    bad = [(0, None, b"\x00\x00\x00\x00\x07\xff"), (1, None, unframed), (0, None, b"{}")]
    produce(kafka_broker, topic, good[:20] + bad + good[20:])
    doc = {
        "name": "kafka-avro",
        "source": {
            "kind": "kafka",
            "table": "orders",
            "bootstrap_servers": kafka_broker.bootstrap,
            "topics": [topic],
            "format": "avro",
            "avro_schema": AVRO_SCHEMA,
            "schema": {
                "customer": "string",
                "amount": "bigint",
                "ts": "timestamp",
                "price": "decimal(10,2)",
            },
            "max_records_per_step": 16,
        },
        "sql": "CREATE VIEW spend AS SELECT customer, count(*) AS n, sum(amount) AS total, "
        "max(ts) AS last, sum(price) AS paid FROM orders GROUP BY customer",
        "sinks": [
            {"name": "spend", "kind": "files", "from": "spend", "path": "spend", "format": "jsonl"}
        ],
        "checkpoint": {"every_steps": 2},
        "trigger": {"interval": "200ms"},
    }
    state = tmp_path / "state"
    r = open_runner(parse_spec(doc), str(state), base_dir=str(tmp_path), spark=spark)
    try:
        r.run(stop_when_idle=2.0)
    finally:
        r.close()
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE orders (customer VARCHAR, amount BIGINT, ts TIMESTAMPTZ, "
        "price DECIMAL(12, 4))"
    )
    con.executemany(
        "INSERT INTO orders VALUES (?, ?, ?, ?)",
        [(x["customer"], x["amount"], x["ts"], x["price"]) for x in records],
    )
    want = con.execute(
        "SELECT customer, count(*), sum(amount), max(ts), "
        "sum(round(price, 2)) FROM orders GROUP BY customer"  # DuckDB rounds half away from 0
    ).fetchall()
    got = integrated(tmp_path / "spend")
    assert got == Counter(
        (c, n, total, str(last.astimezone(UTC)), f"{paid:.2f}") for c, n, total, last, paid in want
    )
    letters = sorted(
        d["record"]
        for f in (state / "dead-letters").iterdir()
        for d in map(json.loads, f.read_text().splitlines())
    )
    # Undecodable: a datum cut short, one without the framing, one not Avro at all; as
    # base64.
    assert letters == sorted(base64.b64encode(v).decode() for _, _, v in bad)
    # A schema that is not Avro, or no field for a column: the spec names the field.
    doc["source"]["avro_schema"] = {"type": "record", "name": "R", "fields": "no"}
    with pytest.raises(SpecError) as e:
        parse_spec(doc)
    assert e.value.errors[0][0] == "source.avro_schema"
