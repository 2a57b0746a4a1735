"""Kafka in, SQL, Kafka out, with a real broker (Tansu): a view's changes (`changes` mode)
and its contents by key (`upsert` mode) written one transaction per step. A second run
restored at an earlier checkpoint redoes a step already committed to the topics and does not
write it again: what a read_committed consumer integrates equals DuckDB's batch query over
every record produced. A topic written by another sink is refused."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession

from local_servers.kafka import KafkaBroker
from pipeline_spec.model import parse_spec
from workers.runtime.connectors.kafka_sink import STEP
from workers.runtime.connectors.sink import SinkConflictError
from workers.runtime.run_builder import open_runner

from .test_kafka_source import orders, produce

# `paid` is a decimal(26, 4): written as a JSON string of all its digits.
SQL = """
CREATE VIEW per_customer AS
  SELECT customer, count(*) AS n, sum(amount) AS total,
    sum(CAST(amount AS DECIMAL(12, 2)) * 1.25) AS paid FROM orders GROUP BY customer
"""


def spec(broker: KafkaBroker, topics: dict[str, str], name: str = "kafka-out") -> dict[str, Any]:
    return {
        "name": name,
        "source": {
            "kind": "kafka",
            "table": "orders",
            "bootstrap_servers": broker.bootstrap,
            "topics": [topics["in"]],
            "schema": {"customer": "string", "amount": "bigint"},
            "max_records_per_step": 8,
        },
        "sql": SQL,
        "sinks": [
            {
                "name": "changes",
                "kind": "kafka",
                "from": "per_customer",
                "bootstrap_servers": broker.bootstrap,
                "topic": topics["changes"],
                "key": ["customer"],
            },
            {
                "name": "upsert",
                "kind": "kafka",
                "from": "per_customer",
                "bootstrap_servers": broker.bootstrap,
                "topic": topics["upsert"],
                "mode": "upsert",
                "key": ["customer"],
            },
        ],
        "checkpoint": {"every_steps": 2},
        "trigger": {"interval": "200ms"},
    }


def consume_all(broker: KafkaBroker, topic: str) -> list[Any]:
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"check-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    md = c.list_topics(topic, timeout=10)
    parts = sorted(md.topics[topic].partitions)
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    out, eof = [], set()
    while len(eof) < len(parts):
        for m in c.consume(1000, timeout=2.0):
            if m.error() is not None:
                eof.add(m.partition())
            else:
                out.append(m)
    c.close()
    return out


def oracle(produced: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    con = duckdb.connect()
    con.execute("CREATE TABLE orders (customer VARCHAR, amount BIGINT)")
    con.executemany(
        "INSERT INTO orders VALUES (?, ?)", [(r["customer"], r["amount"]) for r in produced]
    )
    con.execute(SQL)
    rows = con.execute("SELECT * FROM per_customer").fetchall()
    return Counter((c, n, total, f"{paid:.4f}") for c, n, total, paid in rows)


def test_steps_are_written_once_across_a_restore(
    tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker
) -> None:
    topics = {k: f"{k}-{uuid.uuid4().hex[:8]}" for k in ("in", "changes", "upsert")}
    kafka_broker.create_topic(topics["in"], 2)
    kafka_broker.create_topic(topics["changes"], 2)
    kafka_broker.create_topic(topics["upsert"], 1)
    first = orders(0, 24)
    produce(kafka_broker, topics["in"], [(p % 2, k, v) for p, k, v in first])
    s = parse_spec(spec(kafka_broker, topics))
    state = str(tmp_path / "state")
    r = open_runner(s, state, base_dir=str(tmp_path), spark=spark)
    try:
        r.run(max_steps=3, stop_when_idle=2.0)
    finally:
        r.close()
    steps = Counter(
        int(dict(m.headers())[STEP]) for m in consume_all(kafka_broker, topics["changes"])
    )
    assert sorted(steps) == [1, 2, 3]

    more = orders(24, 40)
    produce(kafka_broker, topics["in"], [(p % 2, k, v) for p, k, v in more])
    r = open_runner(s, state, base_dir=str(tmp_path), spark=spark)
    try:
        assert r.step == 2  # step 3 is redone: its records are in the topics already
        r.run(stop_when_idle=2.0)
        assert r.step > 3
    finally:
        r.close()

    expected = oracle([json.loads(v) for _, _, v in first + more if v is not None])
    changes = consume_all(kafka_broker, topics["changes"])
    again = Counter(int(dict(m.headers())[STEP]) for m in changes)
    assert again[3] == steps[3]  # not written a second time
    integrated: Counter[tuple[Any, ...]] = Counter()
    for m in changes:
        v = json.loads(m.value())
        assert json.loads(m.key()) == {"customer": v["customer"]}
        assert v["__op"] == ("insert" if v["__weight"] > 0 else "delete")
        integrated[(v["customer"], v["n"], v["total"], v["paid"])] += v["__weight"]
    assert +integrated == integrated and integrated == expected

    latest: dict[str, Any] = {}
    for m in consume_all(kafka_broker, topics["upsert"]):
        key = json.loads(m.key())["customer"]
        latest[key] = None if m.value() is None else json.loads(m.value())
    table = Counter(
        (v["customer"], v["n"], v["total"], v["paid"]) for v in latest.values() if v is not None
    )
    assert table == expected


def test_a_topic_has_one_writing_sink(
    tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker
) -> None:
    topics = {k: f"{k}-{uuid.uuid4().hex[:8]}" for k in ("in", "changes", "upsert")}
    for t in topics.values():
        kafka_broker.create_topic(t, 1)
    produce(kafka_broker, topics["in"], [(0, k, v) for _, k, v in orders(0, 5)])
    r = open_runner(
        parse_spec(spec(kafka_broker, topics)),
        str(tmp_path / "a"),
        base_dir=str(tmp_path),
        spark=spark,
    )
    try:
        r.run(max_steps=1, stop_when_idle=2.0)
    finally:
        r.close()
    other = parse_spec(spec(kafka_broker, topics, name="another"))
    with pytest.raises(SinkConflictError, match="has one writing sink"):
        open_runner(other, str(tmp_path / "b"), base_dir=str(tmp_path), spark=spark)


def test_steps_held_beyond_what_a_run_can_redo_are_reported(
    tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker
) -> None:
    """A topic holding a step whose input the offset log no longer has (its entry gone):
    the run says so (the step is skipped, and this run's output for it is lost)."""
    topics = {k: f"{k}-{uuid.uuid4().hex[:8]}" for k in ("in", "changes", "upsert")}
    for t in topics.values():
        kafka_broker.create_topic(t, 1)
    produce(kafka_broker, topics["in"], [(0, k, v) for _, k, v in orders(0, 30)])
    s = parse_spec(spec(kafka_broker, topics))
    state = tmp_path / "state"
    r = open_runner(s, str(state), base_dir=str(tmp_path), spark=spark)
    try:
        r.run(max_steps=3, stop_when_idle=2.0)
    finally:
        r.close()
    (state / "offsets" / f"step-{3:012d}.json").unlink()
    r = open_runner(s, str(state), base_dir=str(tmp_path), spark=spark)
    r.close()
    records = [json.loads(x) for x in (state / "metrics.jsonl").read_text().splitlines()]
    ahead = {x["sink"]: (x["redo"], x["held"]) for x in records if x.get("event") == "sink_ahead"}
    assert ahead == {"changes": (2, 3), "upsert": (2, 3)}
