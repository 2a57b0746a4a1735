"""What a key lookup of a view costs (`GET .../views/{view}?key=`), through the checkpoint's
block indexes beside the whole-view read it replaced, in one run.

    python -m bench.view_lookups [--quick] [--json]

A `view` sink's state of N rows (user, clicks: one row per user) is written through the
real sink and checkpointed, as a running pipeline's is. Then random users are looked up,
`LOOKUPS` times each way, by the service the API calls (`backend.services.views.read`):
`indexed`, only the blocks whose key range may hold the key (`BatchFile.in_range`);
`scan`, the previous release's way, reading every batch file of the view, consolidating and
filtering. Latencies in ms, p50 and p99 per way; the figure is their ratio.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from backend.services import views
from pipeline_spec.model import ViewSink as ViewSinkSpec
from storage_engine import StorageLocation
from storage_engine.key_range import KeyRange
from storage_engine.schema import WEIGHT
from workers.runtime.connectors.view_sink import ViewSink

from .report import Log, clean, engine_revision, machine_info, quiet, run_cli, versions

PROFILES = {"full": 10_000_000, "quick": 1_000_000, "smoke": 20_000}  # rows of the view
LOOKUPS = {"full": 200, "quick": 200, "smoke": 10}
STEP_ROWS = 1_000_000
SCHEMA = pa.schema([("user", pa.int64()), ("clicks", pa.int64())])


def _write_view(storage: Path, rows: int) -> None:
    with StorageLocation.open(str(storage)) as loc:
        sink = ViewSink(ViewSinkSpec(name="v", kind="view", **{"from": "per_user"}), SCHEMA, loc)
        for step, start in enumerate(range(0, rows, STEP_ROWS), 1):
            users = np.arange(start, min(rows, start + STEP_ROWS), dtype=np.int64)
            sink.write(
                step,
                pa.table(
                    {
                        "user": users,
                        "clicks": users % 97,
                        WEIGHT: np.ones(len(users), np.int64),
                    }
                ),
            )
        loc.commit(step=max(1, (rows + STEP_ROWS - 1) // STEP_ROWS))


def _scan(storage: Path, user: int) -> int:
    """The lookup as the previous release made it: the whole view, then a filter."""
    got = views.read(storage, "v")
    assert got is not None and got.rows is not None
    return int(got.rows.filter(pc.equal(got.rows.column("user"), user)).num_rows)


def _indexed(storage: Path, user: int) -> int:
    got = views.read(storage, "v", within=KeyRange((str(user),)))
    assert got is not None and got.rows is not None
    return int(got.rows.num_rows)


def _latencies(fn: Any, storage: Path, users: list[int]) -> list[float]:
    out = []
    for u in users:
        t0 = time.perf_counter()
        assert fn(storage, u) == 1
        out.append((time.perf_counter() - t0) * 1000)
    return out


def run_benchmark(
    mode: str = "full", base_dir: str | None = None, log: Log = quiet
) -> dict[str, Any]:
    rows, n = PROFILES[mode], LOOKUPS[mode]
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="spindle-bench-lookups-", dir=base_dir))
    report: dict[str, Any] = {
        "benchmark": "view_lookups",
        "mode": mode,
        "rows": rows,
        "lookups": n,
        "machine": machine_info(),
        "versions": versions(),
        "revision": engine_revision(),
    }
    try:
        log(f"writing a view of {rows:,} rows")
        _write_view(work / "state", rows)
        rng = random.Random(7)
        users = [rng.randrange(rows) for _ in range(n)]
        scan_n = max(3, n // 20) if rows >= 1_000_000 else n  # a scan of millions is slow
        log(f"{n} indexed lookups, {scan_n} scans")
        indexed = _latencies(_indexed, work / "state", users)
        scan = _latencies(_scan, work / "state", users[:scan_n])
        report.update(
            indexed_p50_ms=float(np.percentile(indexed, 50)),
            indexed_p99_ms=float(np.percentile(indexed, 99)),
            scan_p50_ms=float(np.percentile(scan, 50)),
            scan_p99_ms=float(np.percentile(scan, 99)),
            scans=scan_n,
        )
        report["scan_over_indexed_p50"] = report["scan_p50_ms"] / report["indexed_p50_ms"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["machine"]["load_average_at_end"] = list(os.getloadavg())
    report["elapsed_s"] = time.perf_counter() - started
    cleaned: dict[str, Any] = clean(report)
    return cleaned


def _summary(r: dict[str, Any]) -> str:
    return (
        f"{r['rows']:,} rows: indexed p50 {r['indexed_p50_ms']:.2f} ms, p99 "
        f"{r['indexed_p99_ms']:.2f} ms; scan p50 {r['scan_p50_ms']:.0f} ms "
        f"(x{r['scan_over_indexed_p50']:.0f})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("python -m bench.view_lookups", __doc__ or "", run_benchmark, _summary, argv)


if __name__ == "__main__":
    raise SystemExit(main())
