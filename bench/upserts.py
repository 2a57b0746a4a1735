"""What changes cost beside inserts: the same view over a table fed by upserts and deletes
by key and over an insert-only table of the same rows.

    python -m bench.upserts [--quick] [--json]

The view counts and sums per city (`GROUP BY`). The insert-only variant steps through N new
rows; the upsert variant through N changes to 100,000 customers (80 % upserts of a random
key, an update once the key exists, 20 % deletes), so every step reads old rows and
retracts them. Each variant's SQL dataflow (the engine's part of a run; reading the records
is the same for both) steps through 100,000 records a step; the figure is records per
second of the dataflow's steps, median of `REPEATS` runs.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline_spec.model import PipelineSpec, parse_spec
from spindle_sql.dataflow import Dataflow
from spindle_sql.spec import plan_spec
from storage_engine import StorageLocation
from workers.runtime.dataflow_run import DataflowRun

from .report import Log, clean, engine_revision, machine_info, quiet, run_cli, versions

PROFILES = {"full": 1_000_000, "quick": 400_000, "smoke": 20_000}  # records per run
REPEATS = {"full": 3, "quick": 2, "smoke": 1}
PER_STEP = 100_000
KEYS = 100_000
SQL = (
    "CREATE VIEW per_city AS SELECT city, count(*) AS n, sum(credit) AS credit FROM c GROUP BY city"
)


def log_spec(upsert: bool) -> PipelineSpec:
    table: dict[str, Any] = {
        "kind": "log",
        "stream": "c",
        "table": "c",
        "schema": {"id": "bigint", "city": "string", "credit": "bigint"},
    }
    if upsert:
        table["upsert"] = {"key": ["id"]}
    return parse_spec({"name": "bench-upserts", "tables": [table], "sql": SQL})


def records(n: int, upsert: bool) -> pa.Table:
    rng = np.random.default_rng(3)
    ids = rng.integers(0, KEYS, n) if upsert else np.arange(n)
    cities = np.array([f"city-{i}" for i in range(200)])[rng.integers(0, 200, n)]
    cols: dict[str, Any] = {
        "id": pa.array(ids, pa.int64()),
        "city": pa.array(cities, pa.string()),
        "credit": pa.array(rng.integers(0, 1000, n), pa.int64()),
    }
    if upsert:
        cols["op"] = pa.array(np.where(rng.random(n) < 0.2, "delete", "upsert"), pa.string())
    return pa.table(cols)


def dataflow_records_per_s(spec: PipelineSpec, rows: pa.Table, work: Path) -> float:
    planned = plan_spec(spec)
    flow = Dataflow(planned.views)
    shutil.rmtree(work, ignore_errors=True)
    loc = StorageLocation.open(str(work), fingerprint=flow.fingerprint)
    DataflowRun(flow).open(loc)
    spent = 0.0
    try:
        for start in range(0, rows.num_rows, PER_STEP):
            delta = rows.slice(start, PER_STEP).cast(planned.schema)
            t0 = time.perf_counter()
            flow.step({planned.table: delta})
            flow.take_unmatched()
            spent += time.perf_counter() - t0
    finally:
        loc.close()
    return float(rows.num_rows / spent)


def run_benchmark(
    mode: str = "full", base_dir: str | None = None, log: Log = quiet
) -> dict[str, Any]:
    n, repeats = PROFILES[mode], REPEATS[mode]
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="spindle-bench-upserts-", dir=base_dir))
    report: dict[str, Any] = {
        "benchmark": "upserts",
        "mode": mode,
        "records": n,
        "records_per_step": PER_STEP,
        "keys": KEYS,
        "repeats": repeats,
        "machine": machine_info(),
        "versions": versions(),
        "revision": engine_revision(),
    }
    try:
        runs: dict[str, list[float]] = {"inserts": [], "upserts": []}
        for _ in range(repeats):  # interleaved, so drifting load hits both alike
            for variant in runs:
                upsert = variant == "upserts"
                log(f"{variant}: {n:,} records")
                rows = records(n, upsert)
                runs[variant].append(dataflow_records_per_s(log_spec(upsert), rows, work / variant))
        ins, ups = statistics.median(runs["inserts"]), statistics.median(runs["upserts"])
        report.update(
            inserts_per_s=ins, changes_per_s=ups, changes_over_inserts=ups / ins, runs=runs
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["machine"]["load_average_at_end"] = list(os.getloadavg())
    report["elapsed_s"] = time.perf_counter() - started
    cleaned: dict[str, Any] = clean(report)
    return cleaned


def _summary(r: dict[str, Any]) -> str:
    return (
        f"inserts {r['inserts_per_s']:,.0f}/s, changes {r['changes_per_s']:,.0f}/s "
        f"(x{r['changes_over_inserts']:.2f})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("python -m bench.upserts", __doc__ or "", run_benchmark, _summary, argv)


if __name__ == "__main__":
    raise SystemExit(main())
