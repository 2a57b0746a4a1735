"""What a watermark saves: Nexmark q5 (hopping windows, a join of two aggregates) and q11
(session windows) from docs/examples/nexmark/, as written (event time `date_time`, 4 s of
lateness) and with the event time taken out (no watermark: every window's state is kept).

    python -m bench.watermarks [--quick] [--json]

Each variant's dataflow (`sql.Dataflow`, the engine part of a run; Spark's part, reading the
generator's rows, is the same for both) steps through the same generated events, 100,000
events (one second of event time) a step. Per query and variant: events per second of the
dataflow's steps, the median step, the state at the end (live rows; rows and bytes the
spines hold, memory and files, which merges bring down to the live rows), the most rows the
spines held, rows dropped as late; and per query the ratios watermark / none. The
generator's events come in event-time order, so nothing is late: both variants compute the
same output.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline_spec.model import load_spec
from spindle_sql.dataflow import Dataflow
from spindle_sql.spec import plan_spec
from storage_engine import StorageLocation
from workers.runtime.dataflow_run import DataflowRun
from workers.runtime.nexmark import events as nexmark_events
from workers.runtime.sources import EPOCH_US

from .report import Log, clean, engine_revision, log_to_stderr, machine_info, quiet, versions

ROOT = Path(__file__).resolve().parents[1]
QUERIES = ("q5", "q11")
# events, events per step
PROFILES = {"full": (4_000_000, 100_000), "quick": (2_000_000, 100_000), "smoke": (6_000, 2_000)}
RATE = 100_000.0  # events per second of event time, as the examples generate them
PEOPLE = 1000


def run(work: Path, query: str, stream: pa.Table, per_step: int, watermark: bool) -> dict[str, Any]:
    spec = load_spec(ROOT / "docs" / "examples" / "nexmark" / f"{query}.yaml")
    planned = plan_spec(spec)
    flow = Dataflow(planned.views, event_time=planned.event_time if watermark else None)
    loc = StorageLocation.open(str(work / f"{query}-{watermark}"), fingerprint=flow.fingerprint)
    DataflowRun(flow).open(loc)
    ms, peak = [], 0
    try:
        for start in range(0, stream.num_rows, per_step):
            delta = stream.slice(start, per_step).cast(planned.schema)
            t0 = time.perf_counter()
            flow.step({planned.table: delta})
            ms.append((time.perf_counter() - t0) * 1000)
            peak = max(peak, sum(sp.stats().rows for sp in loc.spines()))
        stats = [sp.stats() for sp in loc.spines()]
        live = sum(len(sp.to_batch()) for sp in loc.spines())
    finally:
        loc.close()
    return {
        "steps": len(ms),
        "events_per_s": stream.num_rows / (sum(ms) / 1000),
        "p50_step_ms": statistics.median(ms),
        "live_state_rows": live,
        "state_rows": sum(s.rows for s in stats),
        "state_bytes": sum(s.mem_bytes + s.file_bytes for s in stats),
        "peak_state_rows": peak,
        "late_rows": flow.late_rows(),
    }


def run_benchmark(
    mode: str = "full", base_dir: str | None = None, log: Log = quiet
) -> dict[str, Any]:
    events, per_step = PROFILES[mode]
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="spindle-bench-watermarks-", dir=base_dir))
    report: dict[str, Any] = {
        "benchmark": "watermarks",
        "mode": mode,
        "events": events,
        "events_per_step": per_step,
        "machine": machine_info(),
        "versions": versions(),
        "revision": engine_revision(),
    }
    try:
        stream = pa.table(nexmark_events(1, RATE, 0, events, PEOPLE, EPOCH_US))
        for q in QUERIES:
            got = {}
            for watermark in (True, False):
                log(f"{q} {'with' if watermark else 'without'} a watermark")
                got["watermark" if watermark else "none"] = run(
                    work, q, stream, per_step, watermark
                )
            wm, none = got["watermark"], got["none"]
            report[q] = {
                **got,
                "state_bytes_ratio": wm["state_bytes"] / none["state_bytes"],
                "state_rows_ratio": wm["state_rows"] / none["state_rows"],
                "live_state_rows_ratio": wm["live_state_rows"] / none["live_state_rows"],
                "throughput_ratio": wm["events_per_s"] / none["events_per_s"],
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["machine"]["load_average_at_end"] = list(os.getloadavg())
    report["elapsed_s"] = time.perf_counter() - started
    cleaned: dict[str, Any] = clean(report)
    return cleaned


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.watermarks", description=__doc__.split("\n")[0]
    )
    p.add_argument("--json", action="store_true", help="print only the JSON report to stdout")
    p.add_argument("--quick", action="store_true", help="half the events")
    p.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dir", default=None, help="where to put temporary files (default: tmp)")
    args = p.parse_args(argv)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    report = run_benchmark(mode, args.dir, quiet if args.json else log_to_stderr)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for q in QUERIES:
            r = report[q]
            ratios = (r["state_bytes_ratio"], r["throughput_ratio"])
            print(f"{q}: state bytes x{ratios[0]:.3f}, throughput x{ratios[1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
