"""Every source a partitioned run's level-0 tasks read themselves (issue 50,
`partitioned/reads.py`), end to end on Spark at parallelism 2: a Kafka table (each step's
partition ranges cut among the tasks), a generator (its record range cut) and the ingest
log (its record range cut). Each run's output equals the oracle or the run at parallelism 1.
(Files: `test_partitioned_spark.py`.)"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from local_servers.kafka import KafkaBroker
from pipeline_spec.model import parse_spec
from storage_engine.input_log import InputLog
from workers.runtime.run_builder import open_runner

from .test_kafka_sink import consume_all
from .test_kafka_sink import oracle as kafka_oracle
from .test_kafka_sink import spec as kafka_spec
from .test_kafka_source import orders, produce
from .test_sql_pipeline import integrated


def run_to_end(doc: dict[str, Any], state: Path, base: Path, spark: SparkSession) -> None:
    r = open_runner(parse_spec(doc), str(state), base_dir=str(base), spark=spark)
    try:
        r.run(max_steps=None, stop_when_idle=2.0)
    finally:
        r.close()


def test_a_kafka_table_read_by_the_shards(
    tmp_path: Path, spark: SparkSession, kafka_broker: KafkaBroker
) -> None:
    topics = {k: f"{k}-{uuid.uuid4().hex[:8]}" for k in ("in", "changes", "upsert")}
    kafka_broker.create_topic(topics["in"], 2)
    kafka_broker.create_topic(topics["changes"], 2)
    kafka_broker.create_topic(topics["upsert"], 1)
    produced = orders(0, 60)
    produce(kafka_broker, topics["in"], [(p % 2, k, v) for p, k, v in produced])
    doc = {**kafka_spec(kafka_broker, topics), "parallelism": 2}
    run_to_end(doc, tmp_path / "state", tmp_path, spark)
    changes: Counter[tuple[Any, ...]] = Counter()
    for m in consume_all(kafka_broker, topics["changes"]):
        v = json.loads(m.value())
        changes[(v["customer"], v["n"], v["total"], v["paid"])] += v["__weight"]
    assert +changes == changes
    assert changes == kafka_oracle([json.loads(v) for _, _, v in produced if v is not None])
    records = [json.loads(x) for x in (tmp_path / "state" / "metrics.jsonl").open()]
    assert sum(r["rows_in"] for r in records if "event" not in r and "step" in r) > 0


NEXMARK_SQL = """
CREATE VIEW auction AS
  SELECT auction_id AS id, auction_seller AS seller, auction_category AS category
  FROM events WHERE event_type = 1;
CREATE VIEW person AS
  SELECT person_id AS id, person_state AS state FROM events WHERE event_type = 0;
CREATE VIEW q3 AS
  SELECT p.state, a.id FROM auction a JOIN person p ON a.seller = p.id WHERE a.category = 10;
CREATE VIEW per_state AS SELECT state, count(*) AS n FROM q3 GROUP BY state
"""


def test_generated_rows_read_by_the_shards(tmp_path: Path, spark: SparkSession) -> None:
    got = {}
    for p in (1, 2):
        run = tmp_path / f"p{p}"
        doc = {
            "name": "gen",
            "source": {
                "kind": "datagen",
                "generator": "nexmark",
                "seed": 3,
                "rows_per_second": 1_000_000,
                "max_rows_per_step": 1_500,
                "limit": 6_000,
                "table": "events",
            },
            "sql": NEXMARK_SQL,
            "sinks": [
                {
                    "name": "a",
                    "kind": "files",
                    "from": "per_state",
                    "path": str(run / "a"),
                    "format": "jsonl",
                },
                {
                    "name": "b",
                    "kind": "files",
                    "from": "q3",
                    "path": str(run / "b"),
                    "format": "jsonl",
                },
            ],
            "parallelism": p,
        }
        run_to_end(doc, run / "state", run, spark)
        got[p] = (integrated(run / "a"), integrated(run / "b"))
    assert got[2] == got[1] and got[1][0] and got[1][1]


def test_the_ingest_log_read_by_the_shards(tmp_path: Path, spark: SparkSession) -> None:
    schema = pa.schema([("customer", pa.string()), ("amount", pa.int64())])
    rows = [{"customer": f"c{i % 7}", "amount": (i * 37) % 100} for i in range(900)]
    got = {}
    for p in (1, 2):
        run = tmp_path / f"p{p}"
        doc = {
            "name": "from-log",
            "source": {
                "kind": "log",
                "stream": "orders",
                "table": "orders",
                "schema": {"customer": "string", "amount": "bigint"},
                "max_records_per_step": 200,
            },
            "sql": "CREATE VIEW per_customer AS SELECT customer, count(*) AS n, "
            "sum(amount) AS total FROM orders WHERE amount > 10 GROUP BY customer",
            "sinks": [
                {
                    "name": "a",
                    "kind": "files",
                    "from": "per_customer",
                    "path": str(run / "a"),
                    "format": "jsonl",
                }
            ],
            "parallelism": p,
        }
        log = InputLog(parse_spec(doc).source.log_dir(run / "state"), schema)
        for i in range(0, len(rows), 300):
            log.append(pa.Table.from_pylist(rows[i : i + 300], schema))
        run_to_end(doc, run / "state", run, spark)
        got[p] = integrated(run / "a")
    want: Counter[tuple[Any, ...]] = Counter()
    for c in sorted({r["customer"] for r in rows}):
        mine = [r["amount"] for r in rows if r["customer"] == c and r["amount"] > 10]
        want[(c, len(mine), sum(mine))] += 1
    assert got[1] == want and got[2] == want
