"""An upserted `log` table in real runs (issue 52): records pushed to the input log that
upsert and delete customers by id, read by the driver over several steps (at parallelism 2,
routed by key to the shards on Spark's executors), leave a view per city equal to the same
query over the live rows a plain-Python model of the records keeps; a delete of an unseen
key is a dead letter."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from pipeline_spec.model import parse_spec
from storage_engine.input_log import InputLog

ROOT = Path(__file__).resolve().parents[3]
SPEC: dict[str, Any] = {
    "name": "upserts",
    "tables": [
        {
            "kind": "log",
            "stream": "customers",
            "table": "customers",
            "schema": {"id": "bigint", "city": "string"},
            "upsert": {"key": ["id"]},
            "max_records_per_step": 40,
        }
    ],
    "sql": "CREATE VIEW per_city AS SELECT city, count(*) AS n FROM customers GROUP BY city",
    "sinks": [
        {"name": "out", "kind": "files", "from": "per_city", "path": "out", "format": "jsonl"}
    ],
    "trigger": {"interval": "50ms"},
    "checkpoint": {"every_steps": 2},
}


def _records(n: int) -> list[dict[str, Any]]:
    rng = random.Random(5)
    out: list[dict[str, Any]] = [{"id": 999, "op": "delete"}]  # a key never seen
    for _ in range(n):
        i = rng.randint(0, 30)
        if rng.random() < 0.3:
            out.append({"id": i, "op": "d"})
        else:
            out.append({"id": i, "city": rng.choice(["lyon", "oslo", "rome", None])})
    return out


@pytest.mark.timeout(600)
@pytest.mark.parametrize("parallelism", [1, 2])
def test_an_upserted_log_table_equals_the_live_rows(tmp_path: Path, parallelism: int) -> None:
    doc = {**SPEC, "parallelism": parallelism}
    spec = parse_spec(doc)
    src = spec.tables[0]
    records = _records(200)
    log = InputLog(str(tmp_path / "state" / "input-log" / "customers"), src.arrow_schema())  # type: ignore[union-attr]
    schema = src.arrow_schema()  # type: ignore[union-attr]
    rows = [{f.name: r.get(f.name) for f in schema} for r in records]
    log.append(pa.Table.from_pylist(rows, schema))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(doc))
    cmd = [sys.executable, "-m", "workers.runtime.driver", "run", str(tmp_path / "spec.yaml"),
           "--storage", str(tmp_path / "state"), "--stop-when-idle", "3"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stderr[-3000:]

    live: dict[int, str | None] = {}
    for r in records:
        if r.get("op") in ("d", "delete"):
            live.pop(r["id"], None)
        else:
            live[r["id"]] = r["city"]
    want = Counter({(city, n): 1 for city, n in Counter(live.values()).items()})
    got: Counter[tuple[Any, ...]] = Counter()
    for f in sorted((tmp_path / "out").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            got[(r["city"], r["n"])] += r["__weight"]
    assert +got == want and min(got.values()) >= 0
    # At parallelism 2 the shard that owns the key sends it to the driver.
    letters = [
        json.loads(line)
        for f in (tmp_path / "state" / "dead-letters").glob("*.jsonl")
        for line in f.read_text().splitlines()
    ]
    unseen = [x for x in letters if json.loads(x["record"])["id"] == 999]
    assert len(unseen) == 1 and unseen[0]["reason"] == "a delete of a key that has no row"
