"""One Nexmark query on Apache Flink SQL (PyFlink's local mini-cluster), for `bench.nexmark`.

    .venv-flink/bin/python bench/flink/nexmark_flink.py CONFIG.json

Runs in the benchmark's own Flink environment (bench/flink/requirements.txt), so it imports
nothing of Spindle: CONFIG (written by bench/nexmark.py) carries the events table's DDL, the
query's statements and where to write. The query's view goes to a `blackhole` table, or, with
`collect`, to files of Debezium JSON changes, integrated at the end (inserts count +1,
deletes -1) into rows with their net counts, written to `out` as JSON lines. Prints one JSON
object: start-up (process start to job submitted) and the job's net runtime (Flink's own
figure: deployment to the end of the bounded input).
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

STARTED = time.monotonic()
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _configured(cfg: dict[str, Any]) -> Any:
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    conf = Configuration()
    for k, v in cfg["flink_conf"].items():
        conf.set_string(k, str(v))
    settings = (
        EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(conf).build()
    )
    return TableEnvironment.create(settings)


def _epoch_us(text: str) -> int:
    """A timestamp as Flink's JSON writes it (UTC) as epoch microseconds, as
    `oracles.nexmark.norm` compares it (this process imports nothing of Spindle)."""
    return (datetime.fromisoformat(text).replace(tzinfo=UTC) - EPOCH) // timedelta(microseconds=1)


def _columns(env: Any, view: str) -> list[tuple[str, str]]:
    """The view's columns and their types (a view cannot be a CREATE TABLE's LIKE; a time
    attribute's type is a plain timestamp's)."""
    cols = env.from_path(view)._j_table.getResolvedSchema().getColumns()
    return [(c.getName(), c.getDataType().getLogicalType().asSerializableString()) for c in cols]


def _changes(directory: Path, columns: list[tuple[str, str]]) -> Counter[tuple[Any, ...]]:
    """The sink's Debezium JSON records summed: `after` counts +1, `before` -1 (Flink writes
    an update as a delete and an insert). Files being written are hidden (`.` names)."""
    stamps = {n for n, t in columns if t.startswith("TIMESTAMP")}
    net: Counter[tuple[Any, ...]] = Counter()
    for f in sorted(directory.rglob("part-*")):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            for side, weight in (("after", 1), ("before", -1)):
                if rec.get(side) is not None:
                    row = rec[side]
                    key = tuple(
                        _epoch_us(row[n]) if n in stamps and row[n] is not None else row[n]
                        for n, _ in columns
                    )
                    net[key] += weight
    return net


def main(config: str) -> int:
    cfg = json.loads(Path(config).read_text())
    env = _configured(cfg)
    for ddl in cfg["tables"]:
        env.execute_sql(ddl)
    for stmt in cfg["statements"]:
        env.execute_sql(stmt)
    query = cfg["query"]
    columns = _columns(env, query)
    ddl = ", ".join(f"`{n}` {t}" for n, t in columns)
    written = Path(cfg["out"]).with_suffix(".flink")
    if cfg["collect"]:
        # Row by row, PyFlink's collect() costs milliseconds a row: the changelog goes to
        # files instead.
        sink = f"'connector' = 'filesystem', 'path' = '{written}', 'format' = 'debezium-json'"
    else:
        sink = "'connector' = 'blackhole'"
    env.execute_sql(f"CREATE TABLE sink ({ddl}) WITH ({sink})")
    result = env.execute_sql(f"INSERT INTO sink SELECT * FROM {query}")
    report: dict[str, Any] = {"startup_s": time.monotonic() - STARTED}
    client = result.get_job_client()
    done = client.get_job_execution_result().result()
    report["net_runtime_s"] = done.get_net_runtime() / 1000
    if cfg["collect"]:
        net = _changes(written, columns)
        with open(cfg["out"], "w") as f:
            for r, n in net.items():
                if n:
                    f.write(json.dumps({"row": list(r), "weight": n}) + "\n")
        report["collected_rows"] = sum(n for n in net.values() if n)
    report["wall_s"] = time.monotonic() - STARTED
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
