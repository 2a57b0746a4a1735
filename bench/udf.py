"""What a Python scalar UDF costs: the same view with the expression as a UDF and as
built-ins, stepped through the same rows.

    python -m bench.udf [--quick] [--json]

Two expressions: Nexmark q14's `count_char(extra, 'c')` (docs/examples/nexmark/q14.yaml's
UDF, a `count_substring` kernel per batch) against `length(extra) - length(replace(extra,
'c', ''))` over the generator's bids; and docs/examples/clicks-bands.yaml's `amount_band`
(NumPy's `select`) against its `CASE`, grouped, over the generator's clicks. Each variant's
dataflow (`spindle_sql.Dataflow`, the engine's part of a run: Spark's part, reading the
rows, is the same for both) steps through the rows in steps of 100,000; the figure is the
median of `REPEATS` runs of seconds per million rows, and the UDF's cost per million rows
is the difference. A run's whole pipeline adds Spark's reading and the sinks to both.
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

import pyarrow as pa
import yaml

from pipeline_spec.model import PipelineSpec, parse_spec
from spindle_sql.dataflow import Dataflow
from spindle_sql.spec import plan_spec
from storage_engine import StorageLocation
from workers.runtime.dataflow_run import DataflowRun
from workers.runtime.nexmark import events as nexmark_events
from workers.runtime.sources import EPOCH_US, clicks
from workers.runtime.udfs import load

from .report import Log, clean, engine_revision, machine_info, quiet, run_cli, versions

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"
PROFILES = {"full": 1_000_000, "quick": 400_000, "smoke": 20_000}  # rows per run
PER_STEP = 100_000
REPEATS = {"full": 5, "quick": 3, "smoke": 1}

Q14_BUILTIN = "length(extra) - length(replace(extra, 'c', ''))"
BANDS_BUILTIN = (
    "CASE WHEN amount < 0 THEN 'refund' WHEN amount < 20 THEN 'small' "
    "WHEN amount < 60 THEN 'medium' ELSE 'large' END"
)


def _variant(example: Path, view: str, sql: str) -> PipelineSpec:
    """The example with only `view`, written as `sql`, behind its table views."""
    doc = yaml.safe_load(example.read_text())
    kept = [
        s for s in doc["sql"].split(";") if s.strip() and f"VIEW {view.upper()} AS" not in s.upper()
    ]
    kept = [s for s in kept if "bands_builtin" not in s]  # clicks-bands' own comparison
    doc["sql"] = ";".join([*kept, f"CREATE VIEW {view} AS {sql}"])
    doc["sinks"] = [{"name": view, "kind": "view", "from": view}]
    return parse_spec(doc)


def _seconds(spec: PipelineSpec, rows: pa.Table, work: Path) -> float:
    planned = plan_spec(spec, udf_impls=load(spec))
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
            spent += time.perf_counter() - t0
    finally:
        loc.close()
    return spent


def _compare(
    name: str, udf: PipelineSpec, builtin: PipelineSpec, rows: pa.Table, work: Path, n: int
) -> dict[str, Any]:
    per_m = 1_000_000 / rows.num_rows
    times: dict[str, list[float]] = {"udf": [], "builtin": []}
    for _ in range(n):  # interleaved, so drifting load hits both alike
        times["udf"].append(_seconds(udf, rows, work / name) * per_m)
        times["builtin"].append(_seconds(builtin, rows, work / name) * per_m)
    u, b = statistics.median(times["udf"]), statistics.median(times["builtin"])
    return {
        "rows": rows.num_rows,
        "udf_s_per_million_rows": u,
        "builtin_s_per_million_rows": b,
        "udf_cost_s_per_million_rows": u - b,
        "udf_over_builtin": u / b,
        "runs": times,
    }


def run_benchmark(
    mode: str = "full", base_dir: str | None = None, log: Log = quiet
) -> dict[str, Any]:
    n_rows, repeats = PROFILES[mode], REPEATS[mode]
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="spindle-bench-udf-", dir=base_dir))
    report: dict[str, Any] = {
        "benchmark": "udf",
        "mode": mode,
        "rows_per_step": PER_STEP,
        "repeats": repeats,
        "machine": machine_info(),
        "versions": versions(),
        "revision": engine_revision(),
    }
    try:
        q14 = EXAMPLES / "nexmark" / "q14.yaml"
        q14_sql = yaml.safe_load(q14.read_text())["sql"].split("CREATE VIEW q14 AS")[1]
        # Every event is a bid's row for q14's view (the filter on price keeps some).
        bids = pa.table(nexmark_events(1, 100_000.0, 0, n_rows * 50 // 46, 1000, EPOCH_US))
        log("q14: count_char")
        report["count_char"] = _compare(
            "q14",
            _variant(q14, "q14", q14_sql),
            _variant(q14, "q14", q14_sql.replace("count_char(extra, 'c')", Q14_BUILTIN)),
            bids,
            work,
            repeats,
        )
        bands = EXAMPLES / "clicks-bands.yaml"
        grouped = "SELECT {e} AS band, count(*) AS clicks FROM input GROUP BY {e}"
        rows = pa.Table.from_batches([clicks(7, 1e9, 500, 0, n_rows, EPOCH_US)])
        log("clicks: amount_band")
        report["amount_band"] = _compare(
            "bands",
            _variant(bands, "bands", grouped.format(e="amount_band(amount)")),
            _variant(bands, "bands", grouped.format(e=BANDS_BUILTIN)),
            rows.select(["ts", "user", "page", "amount"]),
            work,
            repeats,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["machine"]["load_average_at_end"] = list(os.getloadavg())
    report["elapsed_s"] = time.perf_counter() - started
    cleaned: dict[str, Any] = clean(report)
    return cleaned


def _summary(report: dict[str, Any]) -> str:
    return "\n".join(
        f"{name}: UDF {r['udf_s_per_million_rows']:.3f} s/M rows, built-in "
        f"{r['builtin_s_per_million_rows']:.3f} s/M rows (x{r['udf_over_builtin']:.2f})"
        for name in ("count_char", "amount_band")
        for r in [report[name]]
    )


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("python -m bench.udf", __doc__ or "", run_benchmark, _summary, argv)


if __name__ == "__main__":
    raise SystemExit(main())
