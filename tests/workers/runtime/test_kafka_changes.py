"""Kafka tables fed by changes (issue 52), on a real broker (Tansu): customers as Debezium
change events (`debezium-json`, with and without the schema envelope, two partitions by
key), orders in upsert mode (a value upserts, a tombstone or `op: delete` deletes). A join
and an aggregate over them, run over two runs (the second restores a checkpoint and redoes
a logged step), at parallelism 1 and 2: the files sink integrates to, and the Kafka upsert
sink's last record per key and the Delta table (merged on the key) equal, DuckDB's query
over the live rows a plain-Python model of the same changes keeps. Records that are no
change are dead letters with their reason."""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from local_servers.kafka import KafkaBroker
from pipeline_spec.model import SpecError, parse_spec
from workers.runtime.dead_letters import UNMATCHED
from workers.runtime.run_builder import open_runner

from .test_kafka_sink import consume_all
from .test_kafka_source import produce
from .test_sql_pipeline import integrated

SQL = """
CREATE VIEW per_city AS
  SELECT c.city, count(*) AS orders, sum(o.amount) AS total
  FROM orders o JOIN customers c ON o.customer = c.id
  GROUP BY c.city
"""
Record = tuple[int, str | None, bytes | None]


def spec(broker: KafkaBroker, topics: dict[str, str], parallelism: int) -> dict[str, Any]:
    return {
        "name": "kafka-changes",
        "parallelism": parallelism,
        "tables": [
            {
                "kind": "kafka",
                "table": "customers",
                "bootstrap_servers": broker.bootstrap,
                "topics": [topics["customers"]],
                "format": "debezium-json",
                "schema": {"id": "bigint", "name": "string", "city": "string"},
                "upsert": {"key": ["id"]},
                "max_records_per_step": 9,
            },
            {
                "kind": "kafka",
                "table": "orders",
                "bootstrap_servers": broker.bootstrap,
                "topics": [topics["orders"]],
                "schema": {"order_id": "bigint", "customer": "bigint", "amount": "bigint"},
                "upsert": {"key": ["order_id"]},
                "max_records_per_step": 7,
            },
        ],
        "sql": SQL,
        "sinks": [
            {"name": "out", "kind": "files", "from": "per_city", "path": "out", "format": "jsonl"},
            {
                "name": "lake",
                "kind": "delta",
                "from": "per_city",
                "path": "lake",
                "mode": "table",
                "key": ["city"],
            },
            {
                "name": "latest",
                "kind": "kafka",
                "from": "per_city",
                "bootstrap_servers": broker.bootstrap,
                "topic": topics["latest"],
                "mode": "upsert",
                "key": ["city"],
            },
        ],
        "checkpoint": {"every_steps": 2},
        "trigger": {"interval": "100ms"},
    }


class Source:
    """Random changes of customers and orders, as Kafka records and as the live rows they
    leave (the model)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.customers: dict[int, dict[str, Any]] = {}
        self.orders: dict[int, dict[str, Any]] = {}

    def customer_events(self, n: int) -> list[Record]:
        out = []
        for _ in range(n):
            i = self.rng.randint(0, 11)
            before = self.customers.get(i)
            if before is not None and self.rng.random() < 0.25:
                # REPLICA IDENTITY DEFAULT: a delete's `before` holds the key only.
                event: dict[str, Any] = {"before": {"id": i}, "after": None, "op": "d"}
                del self.customers[i]
            else:
                after = {
                    "id": i,
                    "name": f"n{i}",
                    "city": self.rng.choice(["lyon", "oslo", "rome"]),
                }
                op = "u" if before is not None else self.rng.choice(["c", "r"])
                event = {"before": before, "after": after, "op": op, "ts_ms": 1}
                self.customers[i] = after
            if self.rng.random() < 0.5:
                event = {"schema": {"type": "struct"}, "payload": event}
            out.append((i % 2, json.dumps({"id": i}), json.dumps(event).encode()))
            if event.get("op", event.get("payload", {}).get("op")) == "d":
                out.append((i % 2, json.dumps({"id": i}), None))  # Debezium's tombstone
        return out

    def order_events(self, n: int) -> list[Record]:
        out: list[Record] = []
        for _ in range(n):
            o = self.rng.randint(0, 24)
            r = self.rng.random()
            if o in self.orders and r < 0.15:
                out.append((0, json.dumps({"order_id": o}), None))
                del self.orders[o]
            elif o in self.orders and r < 0.25:
                out.append((0, str(o), json.dumps({"order_id": o, "op": "delete"}).encode()))
                del self.orders[o]
            else:
                row = {"order_id": o, "customer": self.rng.randint(0, 13), "amount": o * 10 + n}
                out.append((0, str(o), json.dumps(row).encode()))
                self.orders[o] = row
        return out

    def oracle(self) -> Counter[tuple[Any, ...]]:
        con = duckdb.connect()
        con.execute("CREATE TABLE customers (id BIGINT, name VARCHAR, city VARCHAR)")
        con.executemany(
            "INSERT INTO customers VALUES (?, ?, ?)",
            [(c["id"], c["name"], c["city"]) for c in self.customers.values()],
        )
        con.execute("CREATE TABLE orders (order_id BIGINT, customer BIGINT, amount BIGINT)")
        con.executemany(
            "INSERT INTO orders VALUES (?, ?, ?)",
            [(o["order_id"], o["customer"], o["amount"]) for o in self.orders.values()],
        )
        con.execute(SQL)
        return Counter(con.execute("SELECT * FROM per_city").fetchall())


BAD_CUSTOMERS: list[tuple[Record, str]] = [
    ((0, None, b"{not json"), "not a Debezium change event: not JSON"),
    ((1, None, json.dumps({"op": "t", "ts_ms": 1}).encode()), "Debezium op 't'"),
    ((0, None, json.dumps({"before": None, "after": None, "op": "u"}).encode()), "'after' row"),
    ((1, None, json.dumps({"after": {"name": "x"}, "op": "c"}).encode()), "key column 'id'"),
]
BAD_ORDERS: list[tuple[Record, str]] = [
    ((0, None, None), "a tombstone whose record key"),
    ((0, "7", json.dumps({"customer": 1, "amount": 3}).encode()), "key column 'order_id'"),
    ((0, "8", json.dumps({"order_id": 8, "op": "explode"}).encode()), "op 'explode'"),
    ((0, "x", None), "a tombstone whose key does not convert"),
]


def _run(
    doc: dict[str, Any], state: Path, base: Path, spark: SparkSession, steps: int | None
) -> int:
    r = open_runner(parse_spec(doc), str(state), base_dir=str(base), spark=spark)
    try:
        first = r.step
        r.run(max_steps=steps, stop_when_idle=2.0)
    finally:
        r.close()
    return first


@pytest.mark.parametrize("parallelism", [1, 2])
def test_debezium_and_upsert_topics_equal_the_live_rows(
    tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker, parallelism: int
) -> None:
    topics = {k: f"{k}-{uuid.uuid4().hex[:8]}" for k in ("customers", "orders", "latest")}
    kafka_broker.create_topic(topics["customers"], 2)
    kafka_broker.create_topic(topics["orders"], 1)
    kafka_broker.create_topic(topics["latest"], 1)
    src = Source(seed=parallelism)
    # A delete of an order never seen: no change, a dead letter (at parallelism 2 too: the
    # shard that owns the key sends it to the driver).
    unseen = (0, json.dumps({"order_id": 99}), None)
    produce(
        kafka_broker, topics["customers"], src.customer_events(30) + [b for b, _ in BAD_CUSTOMERS]
    )
    produce(
        kafka_broker, topics["orders"], [unseen] + src.order_events(30) + [b for b, _ in BAD_ORDERS]
    )
    doc = spec(kafka_broker, topics, parallelism)
    state = tmp_path / "state"
    assert _run(doc, state, tmp_path, spark, steps=3) == 0

    produce(kafka_broker, topics["customers"], src.customer_events(30))
    produce(kafka_broker, topics["orders"], src.order_events(40))
    assert _run(doc, state, tmp_path, spark, steps=None) == 2  # restores step 2, redoes 3

    want = src.oracle()
    assert want and len(src.orders) > 5
    assert integrated(tmp_path / "out") == want
    latest: dict[str, Any] = {}
    for m in consume_all(kafka_broker, topics["latest"]):
        latest[json.loads(m.key())["city"]] = None if m.value() is None else json.loads(m.value())
    assert (
        Counter((city, v["orders"], v["total"]) for city, v in latest.items() if v is not None)
        == want
    )
    lake = DeltaTable(str(tmp_path / "lake")).to_pyarrow_table().to_pylist()
    assert Counter((r["city"], r["orders"], r["total"]) for r in lake) == want

    letters = [
        json.loads(line)
        for f in sorted((state / "dead-letters").iterdir())
        for line in f.read_text().splitlines()
    ]
    got = {(d["table"], d.get("offset"), d["reason"]) for d in letters}
    for table, bad in (("customers", BAD_CUSTOMERS), ("orders", BAD_ORDERS)):
        reasons = [r for t, _, r in got if t == table and r != UNMATCHED]
        assert len(reasons) == len(bad), reasons
        for _, why in bad:
            assert any(why in r for r in reasons), (why, reasons)
    unmatched = [d for d in letters if d["reason"] == UNMATCHED]
    assert [json.loads(d["record"])["order_id"] for d in unmatched] == [99]


def test_a_debezium_table_needs_its_key(kafka_broker: KafkaBroker) -> None:
    doc = spec(kafka_broker, {"customers": "c", "orders": "o", "latest": "l"}, 1)
    del doc["tables"][0]["upsert"]
    with pytest.raises(SpecError, match="debezium-json needs the key columns"):
        parse_spec(doc)
    doc["tables"][0]["upsert"] = {"key": ["id"], "op_column": "city"}
    with pytest.raises(SpecError, match="'city' is a column of the schema"):
        parse_spec(doc)
    doc["tables"][0]["upsert"] = {"key": ["nope"]}
    with pytest.raises(SpecError, match=r"\['nope'\] are not columns"):
        parse_spec(doc)
