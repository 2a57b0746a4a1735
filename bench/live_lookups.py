"""Key lookups against a running pipeline (`GET .../views/{view}?key=`), through the API to
the driver's live state, beside the same lookup of the newest checkpoint and the previous
release's whole-view read, and what the lookups cost the pipeline's steps.

    python -m bench.live_lookups [--quick] [--json] [--dir DIR]

Starts the platform (`python -m backend serve`, embedded) as bench.api does, and a pipeline
with a `log` source of bids and one aggregate, max price and count per bidder, whose view
`by_bidder` gets one row per bidder. Its input log is filled with `rows` bids of distinct
bidders (straight into the log with the ingest endpoint's functions), so once the run has
consumed them the view holds `rows` rows. Then a feeder keeps appending bids of random
known bidders (`feed_records` records `feed_rate` times a second), so the run keeps taking
steps that update the view, while the phases run one after the other:

- `quiet_before`, `quiet_after`: no lookups, `phase_s` each;
- `live`: lookups of random bidders at `rate` requests/s (open loop, bench.api's
  generator), answered from the running driver's newest step;
- `checkpoint`: the same lookups with `?as_of=latest`, answered from the newest
  checkpoint's files through their block indexes (the previous commit's way);
- `scan`: the lookup as the release before that made it, the whole view read from the
  newest checkpoint and filtered (`scans` of them, one after the other: seconds each).

Step p50/p99 (the metrics' per-step `step_ms`) are reported for each phase; the quiet ones
are the baseline for the live one. `cpu_share`: each role's CPU seconds per second of the
phase (the API's `serve` process, the Celery worker, the driver with its JVM, this
benchmark's load generator), to say what bounds the figures on a small machine.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import numpy as np
import psutil
import pyarrow as pa
import pyarrow.compute as pc
import uvloop

from backend.services import ingest as ingest_service
from backend.settings import Settings
from pipeline_spec.model import LogSource, PipelineSpec, parse_spec
from storage_engine.location_view import read_spine

from .api import API, Platform, open_loop
from .report import (
    Log,
    clean,
    engine_revision,
    machine_info,
    package_version,
    quiet,
    run_cli,
    versions,
)

PIPELINE = "bench-lookups"
VIEW = "by_bidder"
SERVER_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Profile:
    rows: int  # bidders, so rows of the view
    phase_s: float
    rate: float  # lookups/s (open loop)
    feed_rate: float  # appends/s to the input log while measuring
    feed_records: int  # records per append
    scans: int
    fill_timeout_s: float


PROFILES = {
    "full": Profile(10_000_000, 20.0, 200.0, 4.0, 2_000, 3, 900.0),
    "quick": Profile(1_000_000, 8.0, 200.0, 4.0, 2_000, 3, 300.0),
    "smoke": Profile(20_000, 2.0, 50.0, 4.0, 200, 1, 180.0),
}


def pipeline_spec() -> dict[str, Any]:
    return {
        "name": PIPELINE,
        "source": {
            "kind": "log",
            "stream": "bids",
            "schema": {"bidder": "bigint", "price": "double", "auction": "bigint"},
            "max_records_per_step": 1_000_000,
        },
        "trigger": {"interval": "500ms"},
        "state": [
            {
                "name": VIEW,
                "kind": "aggregate",
                "group_by": ["bidder"],
                "aggregates": [
                    {"name": "max_price", "func": "max", "column": "price"},
                    {"name": "bids", "func": "count"},
                ],
            }
        ],
        "sinks": [{"name": VIEW, "kind": "view", "from": VIEW}],
    }


def _bids(bidders: np.ndarray, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "bidder": pa.array(bidders, pa.int64()),
            "price": pa.array(np.round(rng.uniform(1, 500, len(bidders)), 2)),
            "auction": pa.array(rng.integers(0, 1000, len(bidders)), pa.int64()),
        }
    )


class Feeder:
    """Appends bids of random known bidders to the input log from a thread."""

    def __init__(self, storage: Path, spec: PipelineSpec, prof: Profile) -> None:
        src = spec.source
        assert isinstance(src, LogSource)
        self.storage, self.spec, self.src, self.prof = storage, spec, src, prof
        self.appends = 0
        self._running = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._running.set()
        self._thread = threading.Thread(target=self._run, name="feeder", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._running.clear()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        rng = np.random.default_rng(11)
        while self._running.is_set():
            who = rng.integers(0, self.prof.rows, self.prof.feed_records)
            table = _bids(who, self.appends)
            ingest_service.append(self.storage, self.spec, self.src, table)
            self.appends += 1
            time.sleep(1 / self.prof.feed_rate)


def _fill(storage: Path, spec: PipelineSpec, rows: int) -> None:
    src = spec.source
    assert isinstance(src, LogSource)
    chunk = 1_000_000
    for start in range(0, rows, chunk):
        bidders = np.arange(start, min(rows, start + chunk), dtype=np.int64)
        ingest_service.append(storage, spec, src, _bids(bidders, start))


def _wait_view(c: httpx.Client, rows: int, deadline: float) -> float:
    """Until a live lookup of the last bidder finds it: the fill is in the view."""
    t0 = time.monotonic()
    url = f"{API}/pipelines/{PIPELINE}/views/{VIEW}"
    while time.monotonic() < deadline:
        p = c.get(f"{API}/pipelines/{PIPELINE}").json()
        if p.get("state") == "failed":
            raise RuntimeError(f"the pipeline failed: {p.get('error')}")
        r = c.get(url, params={"key": str(rows - 1)})
        if r.status_code == 200 and r.json()["live"] and r.json()["rows"]:
            return time.monotonic() - t0
        time.sleep(1.0)
    raise RuntimeError("the view did not fill in time")


def _wait_steps(c: httpx.Client, n: int, deadline: float) -> None:
    """Until the run has taken `n` more steps."""
    first = None
    while time.monotonic() < deadline:
        step = c.get(f"{API}/pipelines/{PIPELINE}").json().get("last_step") or 0
        first = step if first is None else first
        if step >= first + n:
            return
        time.sleep(0.2)
    raise RuntimeError("the pipeline took no steps in time")


def _cpu_seconds(server_pid: int) -> dict[str, float]:
    """CPU seconds so far of the platform's processes by role: the API (the `serve`
    process), the Celery worker, the pipeline's driver (every other process: the driver,
    its JVM, Spark's Python workers), this benchmark."""
    out = {"api": 0.0, "driver": 0.0, "worker": 0.0, "bench": 0.0}
    procs = [psutil.Process(server_pid)]
    procs += procs[0].children(recursive=True)
    for p in procs:
        try:
            cmd = " ".join(p.cmdline())
            t = p.cpu_times()
        except psutil.Error:
            continue
        role = "api" if p.pid == server_pid else "worker" if "celery" in cmd else "driver"
        out[role] += t.user + t.system
    me = psutil.Process().cpu_times()
    out["bench"] = me.user + me.system
    return out


def _cpu_share(before: dict[str, float], after: dict[str, float], wall: float) -> dict[str, float]:
    return {k: (after[k] - before[k]) / wall for k in before}


def _step_figures(samples: Sequence[dict[str, Any]], t0: float, t1: float) -> dict[str, Any]:
    ms = [s["step_ms"] for s in samples if t0 <= s["ts"] < t1 and s["rows_in"] > 0]
    return {
        "steps": len(ms),
        "step_p50_ms": float(np.percentile(ms, 50)) if ms else None,
        "step_p99_ms": float(np.percentile(ms, 99)) if ms else None,
    }


async def _lookups(
    base_url: str, token: str, prof: Profile, params: dict[str, str], seed: int
) -> dict[str, Any]:
    rng = random.Random(seed)
    keys = [str(rng.randrange(prof.rows)) for _ in range(round(prof.rate * prof.phase_s) + 1)]
    url = f"{API}/pipelines/{PIPELINE}/views/{VIEW}"
    headers = {"Authorization": f"Bearer {token}"}
    connector = aiohttp.TCPConnector(limit=32)
    timeout = aiohttp.ClientTimeout(total=10.0)
    async with aiohttp.ClientSession(
        base_url, headers=headers, connector=connector, timeout=timeout
    ) as c:

        async def lookup(s: aiohttp.ClientSession, i: int) -> int:
            async with s.get(url, params={"key": keys[i % len(keys)], **params}) as r:
                body = await r.json()
                if r.status == 200 and len(body["rows"]) != 1:
                    return 599  # a known bidder not found: a wrong answer, not a fast one
                return r.status

        return await open_loop(c, lookup, prof.rate, prof.phase_s, 32, 10.0)


def _scans(storage: Path, prof: Profile) -> dict[str, Any]:
    """The whole view read from the newest checkpoint, then filtered."""
    rng = random.Random(5)
    out = []
    for _ in range(prof.scans):
        who = rng.randrange(prof.rows)
        t0 = time.perf_counter()
        got = read_spine(storage, f"view.{VIEW}")
        assert got.rows is not None
        found = got.rows.filter(pc.equal(got.rows.column("bidder"), who))
        assert found.num_rows == 1
        out.append((time.perf_counter() - t0) * 1000)
    return {"scans": len(out), "p50_ms": float(np.percentile(out, 50)), "max_ms": max(out)}


def run_benchmark(
    mode: str = "full", base_dir: str | None = None, log: Log = quiet
) -> dict[str, Any]:
    prof = PROFILES[mode]
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="spindle-bench-live-", dir=base_dir))
    report: dict[str, Any] = {
        "benchmark": "live_lookups",
        "mode": mode,
        "sizes": asdict(prof),
        "machine": machine_info(),
        "versions": versions(aiohttp=package_version("aiohttp")),
        "revision": engine_revision(),
    }
    platform = Platform(root, log, 1, {"spare_driver": "false"})
    feeder: Feeder | None = None
    try:
        log(f"starting the platform on port {platform.port}")
        platform.start()
        platform.wait_ready(time.monotonic() + SERVER_TIMEOUT_S)
        raw = pipeline_spec()
        spec = parse_spec(raw)
        storage = Settings(data_dir=platform.data).storage_dir(PIPELINE)
        headers = {"Authorization": f"Bearer {platform.token}"}
        with httpx.Client(base_url=platform.base_url, headers=headers, timeout=60.0) as c:
            c.post(f"{API}/pipelines", json={"spec": raw}).raise_for_status()
            log(f"filling the input log with {prof.rows:,} bidders")
            _fill(storage, spec, prof.rows)
            c.post(f"{API}/pipelines/{PIPELINE}/start").raise_for_status()
            deadline = time.monotonic() + prof.fill_timeout_s
            report["fill_s"] = _wait_view(c, prof.rows, deadline)
            c.post(f"{API}/pipelines/{PIPELINE}/checkpoints?wait=true").raise_for_status()
            feeder = Feeder(storage, spec, prof)
            feeder.start()
            _wait_steps(c, 3, deadline)  # the feeder's steps under way
            phases: dict[str, Any] = {}
            windows: dict[str, tuple[float, float]] = {}

            assert platform.proc is not None
            pid = platform.proc.pid
            cpu: dict[str, dict[str, float]] = {}

            def quiet_phase(name: str) -> None:
                t0, before = time.time(), _cpu_seconds(pid)
                time.sleep(prof.phase_s)
                windows[name] = (t0, time.time())
                cpu[name] = _cpu_share(before, _cpu_seconds(pid), time.time() - t0)

            quiet_phase("quiet_before")
            for name, params, seed in (("live", {}, 1), ("checkpoint", {"as_of": "latest"}, 2)):
                log(f"{name}: {prof.rate:.0f} lookups/s for {prof.phase_s:.0f} s")
                t0, before = time.time(), _cpu_seconds(pid)
                phases[name] = uvloop.run(
                    _lookups(platform.base_url, platform.token, prof, params, seed)
                )
                windows[name] = (t0, time.time())
                cpu[name] = _cpu_share(before, _cpu_seconds(pid), time.time() - t0)
            quiet_phase("quiet_after")
            log(f"{prof.scans} whole-view reads")
            phases["scan"] = _scans(storage, prof)
            feeder.stop()
            since = min(t0 for t0, _ in windows.values())
            samples = c.get(
                f"{API}/pipelines/{PIPELINE}/metrics", params={"since": since, "limit": 10_000}
            ).json()
            for name, (t0, t1) in windows.items():
                phases.setdefault(name, {}).update(_step_figures(samples, t0, t1))
                phases[name]["cpu_share"] = cpu[name]
            report["phases"] = phases
            report["step_samples"] = len(samples)
            report["feeder_appends"] = feeder.appends
    finally:
        if feeder is not None:
            feeder.stop()
        log("stopping the platform")
        platform.stop()
        shutil.rmtree(root, ignore_errors=True)
    report["machine"]["load_average_at_end"] = list(os.getloadavg())
    report["elapsed_s"] = time.perf_counter() - started
    cleaned: dict[str, Any] = clean(report)
    return cleaned


def _summary(r: dict[str, Any]) -> str:
    p = r["phases"]
    q = p["quiet_before"]
    return (
        f"{r['sizes']['rows']:,} rows at {r['sizes']['rate']:.0f}/s: live p50 "
        f"{p['live']['p50_ms']:.1f} ms, p99 {p['live']['p99_ms']:.1f} ms; checkpoint p99 "
        f"{p['checkpoint']['p99_ms']:.1f} ms; scan {p['scan']['p50_ms']:.0f} ms; step p99 "
        f"{q['step_p99_ms']} ms quiet, {p['live']['step_p99_ms']} ms with live lookups"
    )


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("python -m bench.live_lookups", __doc__ or "", run_benchmark, _summary, argv)


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["PROFILES", "run_benchmark"]
