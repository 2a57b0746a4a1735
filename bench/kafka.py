"""Kafka ingest: events from a topic through a simple aggregate to a Kafka sink, next to the
same query reading the same events from JSON files, on the local disk and on an object store,
and from a topic of the same events as Avro.

    python -m bench.kafka [--quick] [--json]

A Kafka-protocol broker (Tansu, `local_servers/kafka.py`, memory storage) runs on this
machine. N click events (`user`, `amount`) are produced once to a topic of two partitions
as JSON and once to another as Avro (Confluent framing), and written once as JSON files of
the same records, to a directory and to an object store (`SPINDLE_S3_*` if set, else a
SeaweedFS server started here, as `bench.commit` does). Each variant is a SQL pipeline,
`SELECT user, count(*), sum(amount) ... GROUP BY user`, whose view goes to a Kafka topic
(`changes` mode, one transaction per step), run by a `Runner` in this process until its
input is read. Per variant: events per second over the steps (first step's start to the last
step's end: Spark's start-up excluded, reported apart), the median and p99 step, and the
ratios Kafka / files, Kafka Avro / Kafka JSON and object-store files / files. Each reads
at most `per_step` records (files: as many files) a step. One more variant reads the first
10,000 events 100 a step: its step is the latency a trickle of records sees.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from local_servers.kafka import KafkaBroker
from pipeline_spec.model import parse_spec
from storage_engine.objstore import ObjectStore, ObjectStoreSettings

from .commit import object_store
from .report import Log, clean, engine_revision, log_to_stderr, machine_info, quiet, versions

# events, events per step (= records per file)
PROFILES = {"full": (1_000_000, 100_000), "quick": (300_000, 50_000), "smoke": (4_000, 1_000)}
# The small-steps variant: this many of the events, this many a step (a trickle of records,
# where a step's time is the latency a consumer of the output sees).
SMALL_STEPS = (10_000, 100)
USERS = 10_000
PARTITIONS = 2
SQL = (
    "CREATE VIEW per_user AS "
    "SELECT user, count(*) AS n, sum(amount) AS total FROM clicks GROUP BY user"
)


AVRO_SCHEMA = {
    "type": "record",
    "name": "Click",
    "fields": [{"name": "user", "type": "string"}, {"name": "amount", "type": "double"}],
}


def _records(events: int) -> list[dict[str, Any]]:
    return [{"user": f"u{(i * 7919) % USERS}", "amount": (i % 1000) / 10} for i in range(events)]


def _avro(records: list[dict[str, Any]]) -> list[bytes]:
    """Each record as Confluent's serializer writes it: magic byte 0, schema id, datum."""
    import fastavro

    schema = fastavro.parse_schema(AVRO_SCHEMA)
    out = []
    for r in records:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, r)
        out.append(b"\x00\x00\x00\x00\x01" + buf.getvalue())
    return out


def _produce(broker: KafkaBroker, topic: str, values: list[bytes]) -> None:
    """Every value, round-robin over the partitions; each partition's last record alone in
    its request: Tansu 0.6 reports a partition's end as its last batch's first offset + 1."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
    last = len(values) - PARTITIONS
    for i, v in enumerate(values[:last]):
        while True:
            try:
                p.produce(topic, value=v, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.1)
    p.flush()
    for i, v in enumerate(values[last:], start=last):
        p.produce(topic, value=v, partition=i % PARTITIONS)
        p.flush()


def _spec(name: str, source: dict[str, Any], broker: KafkaBroker, out: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"table": "clicks", "schema": {"user": "string", "amount": "double"}, **source},
        "sql": SQL,
        "sinks": [
            {
                "name": "out",
                "kind": "kafka",
                "from": "per_user",
                "bootstrap_servers": broker.bootstrap,
                "topic": out,
            }
        ],
        "checkpoint": {"every_steps": 10},
        "trigger": {"interval": "100ms"},
    }


def _upload(store: ObjectStore, files: Path) -> None:
    store.ensure_bucket()
    for f in sorted(files.iterdir()):
        store.put_file(f.name, str(f))


@contextmanager
def _s3_environment(s3: ObjectStoreSettings) -> Iterator[None]:
    """`SPINDLE_S3_*` naming `s3` while a run reads from it, as a driver's environment
    would (the previous values restored after)."""
    names = {
        "SPINDLE_S3_ENDPOINT": s3.endpoint,
        "SPINDLE_S3_ACCESS_KEY": s3.access_key,
        "SPINDLE_S3_SECRET_KEY": s3.secret_key.get_secret_value(),
        "SPINDLE_S3_SECURE": str(s3.secure).lower(),
    }
    before = {k: os.environ.get(k) for k in names}
    os.environ.update(names)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_variant(work: Path, doc: dict[str, Any], events: int, spark: Any) -> dict[str, Any]:
    from workers.runtime.run_builder import open_runner

    storage = work / doc["name"]
    t0 = time.perf_counter()
    r = open_runner(parse_spec(doc), str(storage), base_dir=str(work), spark=spark)
    try:
        opened = time.perf_counter() - t0
        r.run(stop_when_idle=3.0)
    finally:
        r.close()
    records = [json.loads(x) for x in (storage / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in records if "event" not in x]
    read = sum(x["rows_in"] for x in steps)
    assert read == events, f"{doc['name']}: read {read} of {events} events"
    ms = sorted(x["step_ms"] for x in steps)
    # From the first step's start to the last step's end.
    span_s = steps[-1]["ts"] - steps[0]["ts"] + steps[0]["step_ms"] / 1000
    return {
        "steps": len(steps),
        "events_per_s": events / span_s,
        "span_s": span_s,
        "p50_step_ms": statistics.median(ms),
        "p99_step_ms": ms[min(len(ms) - 1, int(0.99 * len(ms)))],
        # Where a step goes: reading and parsing its input (Spark's part, or the driver's
        # for Kafka), the dataflow and the sink, the commit.
        "p50_read_ms": statistics.median(x["spark_ms"] for x in steps),
        "p50_engine_ms": statistics.median(x["engine_ms"] for x in steps),
        "p50_commit_ms": statistics.median(x["commit_ms"] for x in steps),
        "open_s": opened,
    }


def run_benchmark(
    mode: str = "full", base_dir: str | None = None, log: Log = quiet
) -> dict[str, Any]:
    from workers.runtime.session import spark_session

    events, per_step = PROFILES[mode]
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="spindle-bench-kafka-", dir=base_dir))
    report: dict[str, Any] = {
        "benchmark": "kafka",
        "mode": mode,
        "events": events,
        "events_per_step": per_step,
        "machine": machine_info(),
        "versions": versions(),
        "revision": engine_revision(),
    }
    broker = KafkaBroker(work / "broker")
    spark = None
    try:
        broker.start()
        records = _records(events)
        values = [json.dumps(r).encode() for r in records]
        topic, out = f"clicks-{uuid.uuid4().hex[:6]}", f"per-user-{uuid.uuid4().hex[:6]}"
        broker.create_topic(topic, PARTITIONS)
        broker.create_topic(f"{topic}-avro", PARTITIONS)
        broker.create_topic(f"{topic}-small", PARTITIONS)
        for t in ("out-kafka", "out-small", "out-avro", "out-files", "out-s3"):
            broker.create_topic(f"{out}-{t}", 1)
        log(f"producing {events} events")
        t0 = time.perf_counter()
        _produce(broker, topic, values)
        report["produce_events_per_s"] = events / (time.perf_counter() - t0)
        _produce(broker, f"{topic}-avro", _avro(records))
        small, small_step = min(events, SMALL_STEPS[0]), SMALL_STEPS[1]
        _produce(broker, f"{topic}-small", values[:small])
        files = work / "files"
        files.mkdir()
        for i in range(0, events, per_step):
            (files / f"part-{i // per_step:05d}.json").write_bytes(
                b"\n".join(values[i : i + per_step]) + b"\n"
            )
        spark = spark_session("spindle-bench-kafka")
        kafka = {
            "kind": "kafka",
            "bootstrap_servers": broker.bootstrap,
            "topics": [topic],
            "max_records_per_step": per_step,
        }
        from_files = {
            "kind": "files",
            "path": str(files),
            "format": "json",
            "max_files_per_step": 1,
        }
        log("kafka source")
        report["kafka"] = run_variant(
            work, _spec("bench-kafka", kafka, broker, f"{out}-out-kafka"), events, spark
        )
        log("kafka source, small steps")
        trickle = {**kafka, "topics": [f"{topic}-small"], "max_records_per_step": small_step}
        report["kafka_small_steps"] = run_variant(
            work, _spec("bench-kafka-small", trickle, broker, f"{out}-out-small"), small, spark
        )
        log("kafka source, avro")
        avro = {
            **kafka,
            "topics": [f"{topic}-avro"],
            "format": "avro",
            "avro_schema": AVRO_SCHEMA,
        }
        report["kafka_avro"] = run_variant(
            work, _spec("bench-kafka-avro", avro, broker, f"{out}-out-avro"), events, spark
        )
        log("files source")
        report["files"] = run_variant(
            work, _spec("bench-files", from_files, broker, f"{out}-out-files"), events, spark
        )
        report["throughput_ratio"] = (
            report["kafka"]["events_per_s"] / report["files"]["events_per_s"]
        )
        report["avro_ratio"] = (
            report["kafka_avro"]["events_per_s"] / report["kafka"]["events_per_s"]
        )
        with object_store(str(work), log) as s3:
            prefix = f"{s3.prefix}/bench-kafka-{uuid.uuid4().hex[:6]}".strip("/")
            _upload(ObjectStore(s3.model_copy(update={"prefix": prefix})), files)
            log("object-store files source")
            from_s3 = {**from_files, "path": f"s3://{s3.bucket}/{prefix}"}
            with _s3_environment(s3):
                report["object_files"] = run_variant(
                    work, _spec("bench-s3", from_s3, broker, f"{out}-out-s3"), events, spark
                )
        report["object_files_ratio"] = (
            report["object_files"]["events_per_s"] / report["files"]["events_per_s"]
        )
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    report["machine"]["load_average_at_end"] = list(os.getloadavg())
    report["elapsed_s"] = time.perf_counter() - started
    cleaned: dict[str, Any] = clean(report)
    return cleaned


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kafka", description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="print only the JSON report to stdout")
    p.add_argument("--quick", action="store_true", help="fewer events")
    p.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dir", default=None, help="where to put temporary files (default: tmp)")
    args = p.parse_args(argv)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    report = run_benchmark(mode, args.dir, quiet if args.json else log_to_stderr)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for side in ("kafka", "kafka_small_steps", "kafka_avro", "files", "object_files"):
            r = report[side]
            print(f"{side}: {r['events_per_s']:.0f} events/s, p50 step {r['p50_step_ms']:.0f} ms")
        print(f"kafka / files: x{report['throughput_ratio']:.2f}")
        print(f"kafka avro / kafka json: x{report['avro_ratio']:.2f}")
        print(f"object-store files / files: x{report['object_files_ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
