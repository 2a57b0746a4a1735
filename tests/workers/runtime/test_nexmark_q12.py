"""Nexmark q12 (docs/examples/nexmark/q12.yaml: bids per bidder per 10 seconds of
processing time) run by the runtime, in one process and in two shards, to the end of a
limited stream: its files sink's rows integrate to DuckDB's answer over the same events,
each event given the processing time the run's offset log holds for the step that read it
(`oracles.nexmark`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from oracles.nexmark import PROCTIME_COLUMN, norm, oracle
from storage_engine.schema import WEIGHT
from workers.runtime.connectors.files_sink import STEP
from workers.runtime.nexmark import events
from workers.runtime.offset_log import OffsetLog
from workers.runtime.sources import EPOCH_US

from .test_exactly_once import run

ROOT = Path(__file__).resolve().parents[3]
LIMIT, RATE = 40_000, 20_000.0


@pytest.mark.parametrize("parallelism", [1, 2])
def test_q12_run_equals_duckdb_over_the_logged_processing_times(
    tmp_path: Path, parallelism: int
) -> None:
    """At parallelism 2, level 0's tasks on Spark's executors evaluate PROCTIME() as the
    time the driver logged."""
    spec = yaml.safe_load((ROOT / "docs" / "examples" / "nexmark" / "q12.yaml").read_text())
    spec["parallelism"] = parallelism
    out = tmp_path / "out"
    out.mkdir()
    spec["source"].update(rows_per_second=RATE, max_rows_per_step=4_000, limit=LIMIT)
    spec["sinks"] = [
        {"name": "q12", "kind": "files", "from": "q12", "path": str(out), "format": "parquet"}
    ]
    spec["checkpoint"] = {"every_steps": 1000}  # no checkpoint: no entry is trimmed
    spec["trigger"] = {"interval": "200ms"}
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    run(tmp_path, spec_path, None)
    assert (tmp_path / "state" / "shards").is_dir() == (parallelism > 1)

    integral: Counter[tuple[Any, ...]] = Counter()
    for r in pq.read_table(str(out)).drop_columns([STEP]).to_pylist():
        w = r.pop(WEIGHT)
        integral[tuple(norm(v) for v in r.values())] += w
    assert +integral == integral, "negative weights"

    log = OffsetLog(str(tmp_path / "state"))
    times: list[int | None] = [None] * LIMIT
    step = 1
    while (entry := log.read(step)) is not None:
        (start, end), logged = entry["events"], log.proctime(step)
        assert isinstance(start, int) and isinstance(end, int) and logged is not None
        times[start:end] = [logged] * (end - start)
        step += 1
    assert step > 2 and None not in times, (step, times.count(None))
    stream = pa.table(events(1, RATE, 0, LIMIT, 1000, EPOCH_US))
    stream = stream.append_column(PROCTIME_COLUMN, pa.array(times, pa.timestamp("us", tz="UTC")))
    want = oracle("q12", spec["sql"], {"events": stream})
    assert want and integral == want
