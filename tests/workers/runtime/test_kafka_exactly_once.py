"""Exactly-once from Kafka: a SQL pipeline (an aggregate joined back to its input, an
aggregate over that join) reading a three-partition topic of a real broker (Tansu) is
SIGKILLed at random moments among its steps and restarted from its latest checkpoint each
time; the files, Postgres table and Delta table sinks must end equal to DuckDB's batch
query over every record produced, and each bad record must be one dead letter. Every
partition's offset, the views' state, the sinks and the dead letters thus roll back and
forward together. (The Kafka sink's part, a committed step not written again, is
tests/workers/runtime/test_kafka_sink.py: with Tansu a read_committed consumer also sees aborted
transactions' records, so a kill mid-transaction cannot be checked through it.)"""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import psycopg
from deltalake import DeltaTable

from local_servers.kafka import KafkaBroker

from ...spindle_sql.test_dataflow_oracle import _norm
from .test_exactly_once import run
from .test_kafka_source import produce
from .test_sql_exactly_once import JOINED, _last_step, _normalised
from .test_sql_pipeline import integrated

RECORDS, PER_STEP = 360, 30


def spec(tmp: Path, broker: KafkaBroker, topic: str, dsn: str) -> Path:
    p = tmp / "spec.yaml"
    sql = JOINED.strip().replace("\n", "\n  ")
    p.write_text(
        f"""
name: kafka-exactly-once
source:
  kind: kafka
  table: orders
  bootstrap_servers: "{broker.bootstrap}"
  topics: [{topic}]
  schema: {{customer: string, amount: bigint}}
  max_records_per_step: {PER_STEP}
sql: |
  {sql}
sinks:
  - {{name: agg, kind: files, from: above_average_per_customer, path: {tmp / "out-agg"},
     format: jsonl}}
  - {{name: pg, kind: postgres, from: above_average_per_customer, dsn: "{dsn}",
     table: above_average_per_customer, mode: table, key: [customer]}}
  - {{name: delta, kind: delta, from: above_average_per_customer, path: {tmp / "delta"},
     mode: table, key: [customer]}}
checkpoint: {{every_steps: 2}}
trigger: {{interval: 100ms}}
"""
    )
    return p


def test_sigkills_give_exactly_the_batch_result(
    tmp_path: Path, kafka_broker: KafkaBroker, pg_dsn: str
) -> None:
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, 3)
    rng = random.Random(31)
    records, good, bad = [], [], []
    for i in range(RECORDS):
        if rng.random() < 0.02:
            value = b'{"customer": "c1", "amount": oops}'
            bad.append(value)
        else:
            row = {"customer": f"c{rng.randint(0, 15)}", "amount": rng.randint(1, 100)}
            good.append(row)
            value = json.dumps(row).encode()
        records.append((i % 3, None, value))
    produce(kafka_broker, topic, records)
    spec_path = spec(tmp_path, kafka_broker, topic, pg_dsn)

    killed = 0
    for k in (2, 3, 2):  # killed within a second of its k-th step
        killed += run(tmp_path, spec_path, rng.uniform(0.0, 1.0), after_steps=k) is None
    assert killed >= 2, f"only {killed} of 3 runs were killed before the input's end"
    run(tmp_path, spec_path, kill_after=None)  # to the end of the input
    assert _last_step(tmp_path) >= RECORDS // PER_STEP

    con = duckdb.connect()
    con.execute("CREATE TABLE orders (customer VARCHAR, amount BIGINT)")
    con.executemany(
        "INSERT INTO orders VALUES (?, ?)", [(r["customer"], r["amount"]) for r in good]
    )
    for statement in JOINED.split(";"):
        con.execute(statement)
    want = Counter(
        tuple(_norm(v) for v in r)
        for r in con.execute("SELECT * FROM above_average_per_customer").fetchall()
    )
    assert want
    assert _normalised(integrated(tmp_path / "out-agg")) == want
    with psycopg.connect(pg_dsn) as c:
        got = c.execute("SELECT customer, n, total, mean FROM above_average_per_customer")
        assert Counter(tuple(_norm(v) for v in r) for r in got.fetchall()) == want
    table = DeltaTable(str(tmp_path / "delta")).to_pyarrow_table().to_pylist()
    assert Counter(tuple(_norm(v) for v in r.values()) for r in table) == want

    letters: list[dict[str, Any]] = [
        json.loads(x)
        for f in (tmp_path / "state" / "dead-letters").iterdir()
        for x in f.read_text().splitlines()
    ]
    assert len({(d["topic"], d["partition"], d["offset"]) for d in letters}) == len(bad)
    assert len(letters) == len(bad) and all("oops" in d["record"] for d in letters)
