"""The broker going away for a while and coming back loses nothing: a SQL pipeline reading a
three-partition topic of a real broker (Tansu, a server of this test's own) and writing a
Kafka topic and files runs while the broker's process is stopped (SIGSTOP: connections stay
open and nothing answers, as when a host hangs or the network drops) and continued.

- A short outage (under the broker timeout, 30 s): the run waits and goes on.
- A long one (past it): the run ends, saying which broker did not answer and what for, and
  the next run (the restart policy's) goes on from the last checkpoint.

Either way, the files sink and what a read_committed consumer reads from the output topic
end equal to DuckDB's batch query over every record produced."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from local_servers.kafka import KafkaBroker
from workers.runtime.connectors.kafka_sink import STEP

from .test_exactly_once import _steps, _wait_for_steps, start_run
from .test_kafka_sink import consume_all, oracle, spec
from .test_kafka_source import orders, produce
from .test_sql_pipeline import integrated

IDLE_S = 15  # a run ends after this long without a step: longer than the short outage


def _start(tmp: Path, spec_path: Path, log: str) -> subprocess.Popen[bytes]:
    return start_run(tmp, spec_path, "--stop-when-idle", str(IDLE_S), err=log)


def _away(broker: KafkaBroker, seconds: float) -> None:
    pid = broker.pid
    os.killpg(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.killpg(pid, signal.SIGCONT)


def _changes(broker: KafkaBroker, topic: str) -> Counter[tuple[Any, ...]]:
    """The changes topic integrated. Tansu also gives read_committed consumers the records
    of aborted transactions, so a step aborted by the outage and written again after it
    shows twice, with the same records (same step, same output): each is counted once.
    (No step of this view has two equal change records: one per customer and sign.)"""
    seen: set[tuple[int, bytes]] = set()
    out: Counter[tuple[Any, ...]] = Counter()
    for m in consume_all(broker, topic):
        step = int(dict(m.headers())[STEP])
        if (step, m.value()) in seen:
            continue
        seen.add((step, m.value()))
        v = json.loads(m.value())
        out[(v["customer"], v["n"], v["total"], v["paid"])] += v["__weight"]
    return out


@pytest.mark.full
def test_a_broker_away_for_a_while_loses_nothing(tmp_path: Path) -> None:
    broker = KafkaBroker(tmp_path / "kafka")
    broker.start()
    try:
        topics = {k: f"{k}-{uuid.uuid4().hex[:8]}" for k in ("in", "changes", "upsert")}
        broker.create_topic(topics["in"], 3)
        broker.create_topic(topics["changes"], 1)
        broker.create_topic(topics["upsert"], 1)
        doc = spec(broker, topics, name="kafka-outage")
        out = str(tmp_path / "out")
        doc["sinks"].append(
            {
                "name": "files",
                "kind": "files",
                "from": "per_customer",
                "path": out,
                "format": "jsonl",
            }
        )
        spec_path = tmp_path / "spec.json"
        spec_path.write_text(json.dumps(doc))
        metrics = tmp_path / "state" / "metrics.jsonl"
        produced = orders(0, 60)
        produce(broker, topics["in"], produced)

        # Short: the run is still up when the broker is back, and reads on.
        p = _start(tmp_path, spec_path, "short.err")
        _wait_for_steps(metrics, 2, p)
        _away(broker, 8)
        assert p.poll() is None, (tmp_path / "short.err").read_text()[-3000:]
        produced += orders(60, 120)
        produce(broker, topics["in"], produced[60:])
        assert p.wait(300) == 0, (tmp_path / "short.err").read_text()[-3000:]
        expected = oracle([json.loads(v) for _, _, v in produced if v is not None])
        assert +integrated(tmp_path / "out") == expected
        assert _changes(broker, topics["changes"]) == expected

        # Long: past the broker timeout, wherever it finds the run.
        produced += orders(120, 220)
        produce(broker, topics["in"], produced[120:])
        before = _steps(metrics)
        p = _start(tmp_path, spec_path, "long.err")
        _wait_for_steps(metrics, before + 2, p)
        _away(broker, 40)
        code = p.wait(300)
        err = (tmp_path / "long.err").read_text()
        if code != 0:  # the step or the sink it was in gave up: the error says on what
            assert broker.bootstrap in err or "did not arrive within" in err, err[-3000:]
        p = _start(tmp_path, spec_path, "after.err")
        assert p.wait(300) == 0, (tmp_path / "after.err").read_text()[-3000:]
        expected = oracle([json.loads(v) for _, _, v in produced if v is not None])
        assert +integrated(tmp_path / "out") == expected
        assert _changes(broker, topics["changes"]) == expected
    finally:
        broker.stop()
