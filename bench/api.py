"""API benchmark: the control plane's request latency and throughput, and the delivery delay
of its live metrics (Server-Sent Events), while a pipeline runs.

    python -m bench.api [--quick] [--json] [--dir DIR] [--rate N] [--quiet]

Starts the whole platform as a subprocess, `python -m backend serve` (API, Celery worker and
beat) in embedded mode (SQLite metadata database and broker under a temporary data
directory, no servers), registers and starts a pipeline with a `log` source (modelled on
docs/examples/ingest-log.yaml) and waits until its run is running and has completed two
steps (the first may be read ahead before its streaming query starts).
Then, one after the other, it loads three operations at a fixed target rate over loopback:
`GET /api/v1/pipelines`, `GET /api/v1/pipelines/{name}/checkpoints` and
`POST /api/v1/pipelines/{name}/ingest/{stream}` (NDJSON batches), while a subscriber of
`GET /api/v1/pipelines/{name}/metrics/stream` records how late each step's event arrives.
See NOTES for exactly what is timed.

Why one long module: a benchmark's workload, its load generator, what it times and its
report read as one method; split, a reader would jump between files to check that the
figures mean what docs/benchmarks.md says.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import numpy as np
import uvloop
import yaml

from backend.services import ingest as ingest_service
from backend.settings import Settings
from pipeline_spec.model import LogSource, parse_spec

from .report import (
    Log,
    clean,
    engine_revision,
    log_to_stderr,
    machine_info,
    package_version,
    quiet,
    versions,
)

ROOT = Path(__file__).resolve().parents[1]
SPEC_MODEL = ROOT / "docs" / "examples" / "ingest-log.yaml"
PIPELINE = "bench-api"
API = "/api/v1"


@dataclass(frozen=True)
class Profile:
    name: str
    phase_s: float  # length of each measured phase
    rate: float  # target requests/s of each phase (open loop)
    batch_records: int  # records per ingest request
    feeder_rate: float  # input-log appends/s during the read phases (not through the API)
    trigger: str  # the pipeline's trigger interval
    connections: int  # the load generator's connections (requests beyond wait in the client)
    pipeline_timeout_s: float  # from the start request until a step was completed
    api_workers: int  # API server processes (SPINDLE_API_WORKERS)


PROFILES = {
    "full": Profile("full", 8.0, 200.0, 100, 4.0, "500ms", 32, 90.0, 1),
    "quick": Profile("quick", 2.0, 200.0, 100, 4.0, "500ms", 32, 90.0, 1),
}

TARGETS = {"read_p99_ms": 50.0, "sse_delay_p99_s": 1.0}
REQUEST_TIMEOUT_S = 10.0  # a request not answered by then counts as failed (its outcome)
SETTLE_LIMIT_S = 10.0  # before each phase, wait at most this for the server to be idle
SERVER_TIMEOUT_S = 30.0  # until /readyz answers 200
DRAIN_LIMIT_S = 10.0  # after a phase's last scheduled request, send what is queued this long

NOTES = [
    "The platform is `python -m backend serve` in embedded mode (SQLite database and Celery "
    "broker in a temporary data directory) with sizes.api_workers API processes, on "
    "loopback; the load generator, the API server, the Celery worker and the pipeline's "
    "Spark driver share the machine's cores.",
    "The pipeline is docs/examples/ingest-log.yaml (a `log` source: max bid per auction) "
    "renamed, with a shorter trigger interval (sizes.trigger). Measuring starts once its run "
    "is `running` and has completed two steps, one batch fed for each (GET "
    "/api/v1/pipelines/{name}; a run's first step is read ahead, before its streaming query "
    "starts, and the second is the query's); Spark's start-up "
    "is not measured (pipeline_ready_s says how long it took).",
    "Open-loop load: request i of a phase is scheduled at t0 + i / rate whether or not earlier ones"
    " have been answered, and its latency runs from that scheduled time to the end of its response,"
    " so a server that falls behind is charged for the queueing it causes (no coordinated "
    "omission). sizes.connections senders (one aiohttp ClientSession on uvloop, HTTP/1.1 keep-"
    "alive) take the scheduled requests in order, as a proxy in front of the API would: a request "
    "finding them all busy waits in the client's queue, and that wait counts in its latency. "
    "Latency percentiles are over successful requests; failures are in `outcomes`: a status code, "
    "an aiohttp error or TimeoutError (no answer within 10 s), or `abandoned` (still queued 10 s "
    "after the phase's last scheduled time: not sent). achieved_rps = successful responses / (time "
    "from t0 until the last request was answered or failed). sent_late: requests the generator "
    "itself queued more than 5 ms late (a CPU-starved client; client_cpu_share is its CPU time / "
    "wall time).",
    "Phases, one after the other, each phase_s long at `rate`: list_pipelines (GET "
    "/api/v1/pipelines), list_checkpoints (GET /api/v1/pipelines/{name}/checkpoints, a "
    "running pipeline: answered from the database), ingest (POST .../ingest/{stream}, "
    "NDJSON, batch_records records per request, each durably appended as one segment).",
    "During the two read phases a feeder appends a batch of batch_records records to the "
    "pipeline's input log feeder_rate times a second, directly (the ingest endpoint's own "
    "parse and append functions, not through the API, so it adds no API load), so the "
    "pipeline keeps taking steps (a log source with no new records takes none); the ingest "
    "phase feeds it itself.",
    "SSE delay: one subscriber of GET /api/v1/pipelines/{name}/metrics/stream (Bearer "
    "token) for the whole load; for every `data:` event received during the phases, "
    "receive time - `ts` (the unix time the driver completed the step). This spans the "
    "driver's metric queue, the job's flush to the database (every operation_poll_s), the "
    "stream's poll of the database (every 0.2 s) and delivery.",
    "One run per phase: figures are over that run's requests (p50 is the median). The "
    "machine is a shared, noisy VM: load_average_at_start/end are in `machine`.",
]


# -- the platform as a subprocess --


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Platform:
    """`python -m backend serve` in its own session (process group), so the worker and
    drivers it starts can be found and stopped even if the server does not stop them."""

    def __init__(
        self, root: Path, log: Log, api_workers: int = 1, settings: dict[str, str] | None = None
    ) -> None:
        self.root = root
        self.api_workers = api_workers
        self.settings = settings or {}
        self.data = root / "data"
        self.port = free_port()
        self.token = "spd_" + secrets.token_urlsafe(32)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "server.log"
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.shutdown: dict[str, Any] = {}

    def start(self) -> None:
        # Embedded mode: no SPINDLE_* from the caller's environment (a database or broker
        # URL there would point the platform at servers).
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPINDLE_")}
        env["SPINDLE_ADMIN_TOKEN"] = self.token
        env["SPINDLE_API_WORKERS"] = str(self.api_workers)
        env.update({f"SPINDLE_{k.upper()}": v for k, v in self.settings.items()})
        env["PYTHONPATH"] = str(ROOT)
        cmd = [sys.executable, "-m", "backend", "serve", "--data-dir", str(self.data)]
        cmd += ["--port", str(self.port)]
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def log_tail(self, n: int = 4000) -> str:
        parts = []
        for p in (self.log_path, self.data / "logs" / "worker.log"):
            with contextlib.suppress(OSError):
                parts.append(f"--- {p.name} ---\n" + p.read_text(errors="replace")[-n:])
        return "\n".join(parts)

    def wait_ready(self, deadline: float) -> None:
        assert self.proc is not None
        with httpx.Client(base_url=self.base_url, timeout=2.0) as c:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"the server exited ({self.proc.returncode}):\n{self.log_tail()}"
                    )
                try:
                    if c.get("/readyz").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the server was not ready in time:\n{self.log_tail()}")
                time.sleep(0.1)

    def _group_alive(self, pgid: int) -> bool:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM the server, SIGKILL it after `timeout`; then whatever is left of its
        process group (the Celery worker and pipeline drivers, should the server have exited
        without stopping them) gets the same treatment."""
        p = self.proc
        if p is None:
            return
        pgid = p.pid  # start_new_session: the server leads its own group
        t0 = time.monotonic()
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.shutdown["server_exit_s"] = time.monotonic() - t0
        self.shutdown["server_returncode"] = p.returncode
        left = self._group_alive(pgid)
        self.shutdown["processes_left_after_server_exit"] = left
        if left:
            self.log("the server exited leaving its worker/drivers running: SIGTERM to them")
            os.killpg(pgid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while self._group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if self._group_alive(pgid):
                os.killpg(pgid, signal.SIGKILL)
        # serve runs its Celery worker in a process group of its own, which the signals to
        # the server's group do not reach: if the server had to be killed before it stopped
        # the worker (a slow warm shutdown), end what still runs on this platform's files.
        left_pids = self._pids_using_root()
        self.shutdown["processes_left_on_its_files"] = len(left_pids)
        if left_pids:
            self.log(f"processes left on the platform's files: {left_pids}: SIGTERM to them")
            for sig in (signal.SIGTERM, signal.SIGKILL):
                for pid in left_pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
                deadline = time.monotonic() + timeout
                while (left_pids := self._pids_using_root()) and time.monotonic() < deadline:
                    time.sleep(0.1)
                if not left_pids:
                    break
        self.shutdown["stopped_s"] = time.monotonic() - t0

    def _pids_using_root(self) -> list[int]:
        """Processes whose command line names this platform's directory (Linux)."""
        mark = str(self.root).encode()
        pids = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit() and int(d.name) != os.getpid():
                try:
                    if mark in (d / "cmdline").read_bytes():
                        pids.append(int(d.name))
                except OSError:
                    continue
        return pids


# -- the pipeline --


def pipeline_spec(prof: Profile) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(SPEC_MODEL.read_text())
    spec["name"] = PIPELINE
    spec["trigger"] = {"interval": prof.trigger}
    return spec


def ingest_bodies(spec: dict[str, Any], records: int, n: int = 16, seed: int = 7) -> list[bytes]:
    """`n` NDJSON bodies of `records` bids each (the spec's stream schema)."""
    assert set(spec["source"]["schema"]) == {"auction", "bidder", "price", "ts"}
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        lines = [
            json.dumps(
                {
                    "auction": rng.randrange(1000),
                    "bidder": rng.randrange(100_000),
                    "price": round(rng.uniform(1, 500), 2),
                    "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            )
            for _ in range(records)
        ]
        out.append(("\n".join(lines) + "\n").encode())
    return out


def start_pipeline(
    c: httpx.Client, spec: dict[str, Any], body: bytes, deadline: float, log: Log
) -> float:
    """Register and start the pipeline, feed it one batch, and wait until its run is
    running and has completed a step; then feed another and wait for its step: a run's
    first step may be read ahead, before its streaming query has started (seconds more),
    and the load phases must find the query up. Returns the seconds that took."""
    t0 = time.monotonic()
    c.post(f"{API}/pipelines", json={"spec": spec}).raise_for_status()
    c.post(f"{API}/pipelines/{PIPELINE}/start").raise_for_status()
    stream = spec["source"]["stream"]
    log("waiting for the pipeline's run to be running and to complete two steps (Spark start-up)")
    for steps in (1, 2):
        c.post(
            f"{API}/pipelines/{PIPELINE}/ingest/{stream}",
            content=body,
            headers={"Content-Type": "application/x-ndjson"},
        ).raise_for_status()
        _wait_step(c, steps, deadline)
    return time.monotonic() - t0


def _wait_step(c: httpx.Client, step: int, deadline: float) -> None:
    """Until the pipeline's run is running and has completed step `step`."""
    while True:
        p = c.get(f"{API}/pipelines/{PIPELINE}").json()
        run = p.get("current_run") or {}
        if run.get("state") == "running" and (p.get("last_step") or 0) >= step:
            return
        if p.get("state") == "failed" or run.get("state") in ("failed", "lost"):
            logs = c.get(f"{API}/pipelines/{PIPELINE}/logs", params={"lines": 40}).json()
            raise RuntimeError(
                f"the pipeline failed: {p.get('error')}\n" + "\n".join(logs["lines"])
            )
        if time.monotonic() > deadline:
            raise RuntimeError(f"the pipeline did not run a step in time (last seen: {p})")
        time.sleep(0.25)


def pipeline_state(platform: Platform) -> dict[str, Any]:
    """The pipeline's state after the load: whether its run survived it."""
    headers = {"Authorization": f"Bearer {platform.token}"}
    try:
        with httpx.Client(base_url=platform.base_url, headers=headers, timeout=5.0) as c:
            p = c.get(f"{API}/pipelines/{PIPELINE}").json()
            runs = c.get(f"{API}/pipelines/{PIPELINE}/runs").json()
    except httpx.HTTPError as e:
        return {"error": f"{type(e).__name__}: {e}"}
    return {
        "state": p.get("state"),
        "last_step": p.get("last_step"),
        "runs": [
            {"number": r["number"], "state": r["state"], "exit_reason": r["exit_reason"]}
            for r in runs
        ],
    }


# -- SSE delivery delay --


@dataclass
class SseProbe:
    """Subscribes to the pipeline's metrics stream in a thread of its own; while
    `recording`, keeps receive time - ts of every event."""

    base_url: str
    token: str
    delays: list[float] = field(default_factory=list)
    steps: set[int] = field(default_factory=set)
    events: int = 0
    reconnects: int = 0
    errors: list[str] = field(default_factory=list)
    recording: bool = False
    connected: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="sse-probe", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        if self.thread is not None:
            self.thread.join(1)  # it ends at its next event, or when the server stops

    def _run(self) -> None:
        url = f"{API}/pipelines/{PIPELINE}/metrics/stream"
        last_id: str | None = None
        headers = {"Authorization": f"Bearer {self.token}"}
        # No read timeout: a stalled server is measured, not reconnected to (a reconnect
        # would be a new request, and the stream resumes after the last event seen anyway,
        # Last-Event-ID). The thread is a daemon; stopping the server ends the stream.
        timeout = httpx.Timeout(10.0, read=None)
        with httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout) as c:
            while not self.done.is_set():
                h = {"Last-Event-ID": last_id} if last_id is not None else {}
                try:
                    with c.stream("GET", url, headers=h) as r:
                        r.raise_for_status()
                        self.connected.set()
                        for line in r.iter_lines():
                            received = time.time()
                            if self.done.is_set():
                                return
                            if not line.startswith("data:"):
                                continue
                            sample = json.loads(line[5:])
                            last_id = str(sample["id"])
                            self.events += 1
                            if self.recording:
                                self.delays.append(received - float(sample["ts"]))
                                self.steps.add(int(sample["step"]))
                except httpx.HTTPError as e:
                    self.errors.append(f"{type(e).__name__}: {e}")
                    self.reconnects += 1
                    time.sleep(0.2)

    def result(self) -> dict[str, Any]:
        d = self.delays
        return {
            "events": len(d),
            "steps": len(self.steps),
            "delay_p50_s": _pct(d, 50) if d else None,
            "delay_p99_s": _pct(d, 99) if d else None,
            "delay_max_s": max(d) if d else None,
            "delay_min_s": min(d) if d else None,
            "reconnects": self.reconnects,
            "errors": self.errors[:5],
        }


# -- open-loop load --


def _pct(xs: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


# The load generator is aiohttp on uvloop: it costs the shared cores several times less per
# request than httpx's async client, so more of the machine is left to the server measured.
Request = Callable[[aiohttp.ClientSession, int], Awaitable[int]]  # -> the response status
LOAD_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)


async def open_loop(
    client: aiohttp.ClientSession,
    request: Request,
    rate: float,
    duration: float,
    connections: int,
    drain_s: float,
) -> dict[str, Any]:
    """`rate * duration` requests scheduled at fixed intervals, sent by `connections`
    senders that take them in order from a queue. Open loop: the schedule does not wait for
    answers, and a request's latency runs from its scheduled time, so time spent queued
    behind a slow server is measured (no coordinated omission). Requests still queued
    `drain_s` after the last scheduled time are not sent (outcome "abandoned")."""
    n = max(1, round(rate * duration))
    latencies: list[float] = []
    outcomes: Counter[str] = Counter()
    queue: asyncio.Queue[tuple[int, float]] = asyncio.Queue()
    cpu0 = time.process_time()
    t0 = time.perf_counter() + 0.01
    give_up = t0 + duration + drain_s

    async def sender() -> None:
        while True:
            i, scheduled = await queue.get()
            if i < 0:
                return
            if time.perf_counter() > give_up:
                outcomes["abandoned"] += 1
                continue
            try:
                status = await request(client, i)
                outcome, ok = str(status), 200 <= status < 300
            except LOAD_ERRORS as e:
                outcome, ok = type(e).__name__, False
            outcomes[outcome] += 1
            if ok:
                latencies.append(time.perf_counter() - scheduled)

    senders = [asyncio.create_task(sender()) for _ in range(connections)]
    late = 0
    for i in range(n):
        scheduled = t0 + i / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        elif delay < -0.005:
            late += 1  # the generator itself fell behind; the latency still counts from here
        queue.put_nowait((i, scheduled))
    for _ in senders:
        queue.put_nowait((-1, 0.0))
    await asyncio.gather(*senders)
    wall = time.perf_counter() - t0  # until the last request was answered or failed
    ms = [x * 1000 for x in latencies]
    return {
        "requests": n,
        "ok": len(latencies),
        "outcomes": dict(sorted(outcomes.items())),
        "target_rps": rate,
        "achieved_rps": len(latencies) / wall,
        "p50_ms": _pct(ms, 50) if ms else None,
        "p99_ms": _pct(ms, 99) if ms else None,
        "max_ms": max(ms) if ms else None,
        "mean_ms": float(np.mean(ms)) if ms else None,
        "sent_late": late,
        "client_cpu_share": (time.process_time() - cpu0) / wall,
        "wall_s": wall,
    }


async def settle(c: aiohttp.ClientSession, limit_s: float) -> float:
    """Wait (at most `limit_s`) until a read is answered promptly again, so a phase does not
    start with what the previous one left queued in the server; returns the seconds waited."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        sent = time.perf_counter()
        with contextlib.suppress(*LOAD_ERRORS):
            timeout = aiohttp.ClientTimeout(total=limit_s)
            async with c.get(f"{API}/pipelines", timeout=timeout) as r:
                await r.read()
            if r.status == 200 and time.perf_counter() - sent < 0.1:
                break
        await asyncio.sleep(0.1)
    return time.perf_counter() - t0


@dataclass
class LogFeeder:
    """Keeps the pipeline stepping (and its metrics stream flowing) during the read phases
    without touching the API: appends batches to its input log from a thread, `rate` a
    second, with the ingest endpoint's own functions (same parsing, same segment files)."""

    storage: Path
    spec: dict[str, Any]
    body: bytes
    rate: float
    appends: int = 0
    running: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.parsed = parse_spec(self.spec)
        src = self.parsed.source
        assert isinstance(src, LogSource)
        self.src = src
        self.table = ingest_service.parse(self.body, "ndjson", src.arrow_schema())

    def start(self) -> None:
        self.running.set()
        self.thread = threading.Thread(target=self._run, name="log-feeder", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.running.clear()
        if self.thread is not None:
            self.thread.join(10)

    def _run(self) -> None:
        while self.running.is_set():
            ingest_service.append(self.storage, self.parsed, self.src, self.table)
            self.appends += 1
            time.sleep(1 / self.rate)


async def load(
    base_url: str,
    token: str,
    prof: Profile,
    stream: str,
    bodies: list[bytes],
    feeder: LogFeeder,
    log: Log,
) -> dict[str, dict[str, Any]]:
    connector = aiohttp.TCPConnector(limit=prof.connections)
    headers = {"Authorization": f"Bearer {token}"}
    ndjson = {"Content-Type": "application/x-ndjson"}

    async def get(c: aiohttp.ClientSession, path: str) -> int:
        async with c.get(path) as r:
            await r.read()
            return r.status

    async def list_pipelines(c: aiohttp.ClientSession, i: int) -> int:
        return await get(c, f"{API}/pipelines")

    async def list_checkpoints(c: aiohttp.ClientSession, i: int) -> int:
        return await get(c, f"{API}/pipelines/{PIPELINE}/checkpoints")

    async def ingest(c: aiohttp.ClientSession, i: int) -> int:
        url = f"{API}/pipelines/{PIPELINE}/ingest/{stream}"
        async with c.post(url, data=bodies[i % len(bodies)], headers=ndjson) as r:
            await r.read()
            return r.status

    results: dict[str, dict[str, Any]] = {}
    async with aiohttp.ClientSession(
        base_url=base_url,
        headers=headers,
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
    ) as c:
        for req in (list_pipelines, list_checkpoints, ingest):  # warm the connections
            if (status := await req(c, 0)) != 200:
                raise RuntimeError(f"{req.__name__} answered {status}")
        feeder.start()
        for name, req in (
            ("list_pipelines", list_pipelines),
            ("list_checkpoints", list_checkpoints),
            ("ingest", ingest),
        ):
            if name == "ingest":
                await asyncio.to_thread(feeder.stop)
            waited = await settle(c, SETTLE_LIMIT_S)
            log(f"{name}: {prof.rate:g} requests/s for {prof.phase_s:g} s")
            results[name] = await open_loop(
                c, req, prof.rate, prof.phase_s, prof.connections, DRAIN_LIMIT_S
            )
            results[name]["settle_before_s"] = waited
        results["ingest"]["records_per_s"] = results["ingest"]["achieved_rps"] * prof.batch_records
    return results


# -- the benchmark --


def run_benchmark(
    mode: str = "full",
    base_dir: str | None = None,
    rate: float | None = None,
    log: Log = quiet,
    api_workers: int | None = None,
    settings: dict[str, str] | None = None,
) -> dict[str, Any]:
    """`settings`: Settings fields given to the platform (as SPINDLE_* variables)."""
    unknown = sorted(set(settings or {}) - set(Settings.model_fields))
    if unknown:
        raise ValueError(f"not a setting: {', '.join(unknown)}")
    # The API's figures, not a spare driver's warm-up (seconds of CPU on two cores right as
    # the measured pipeline starts); given settings may turn it back on.
    settings = {"spare_driver": "false", **(settings or {})}
    prof = PROFILES[mode]
    if rate is not None:
        prof = Profile(**{**asdict(prof), "rate": rate})
    if api_workers is not None:
        prof = Profile(**{**asdict(prof), "api_workers": api_workers})
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="spindle-bench-api-", dir=base_dir))
    report: dict[str, Any] = {
        "benchmark": "api",
        "profile": prof.name,
        "sizes": asdict(prof),
        "machine": machine_info(),
        "versions": versions(
            fastapi=package_version("fastapi"),
            uvicorn=package_version("uvicorn"),
            httpx=package_version("httpx"),
            aiohttp=package_version("aiohttp"),
            sqlalchemy=package_version("sqlalchemy"),
            celery=package_version("celery"),
            pyspark=package_version("pyspark"),
        ),
        "revision": engine_revision(),
        "server_settings": settings or {},
        "notes": NOTES,
    }
    platform = Platform(root, log, prof.api_workers, settings)
    probe = SseProbe(platform.base_url, platform.token)
    try:
        log(f"starting the platform on port {platform.port} (data: {platform.data})")
        t0 = time.monotonic()
        platform.start()
        platform.wait_ready(time.monotonic() + SERVER_TIMEOUT_S)
        report["server_ready_s"] = time.monotonic() - t0
        spec = pipeline_spec(prof)
        stream = spec["source"]["stream"]
        bodies = ingest_bodies(spec, prof.batch_records)
        headers = {"Authorization": f"Bearer {platform.token}"}
        with httpx.Client(base_url=platform.base_url, headers=headers, timeout=30.0) as c:
            deadline = time.monotonic() + prof.pipeline_timeout_s
            report["pipeline_ready_s"] = start_pipeline(c, spec, bodies[0], deadline, log)
        probe.start()
        if not probe.connected.wait(10):
            raise RuntimeError(f"the metrics stream did not connect: {probe.errors}")
        probe.recording = True
        storage = Settings(data_dir=platform.data).storage_dir(PIPELINE)
        feeder = LogFeeder(storage, spec, bodies[1], prof.feeder_rate)
        results = uvloop.run(
            load(platform.base_url, platform.token, prof, stream, bodies, feeder, log)
        )
        results["feeder"] = {"appends": feeder.appends, "records": feeder.table.num_rows}
        probe.recording = False
        results["sse"] = probe.result()
        report["results"] = results
        report["pipeline_after"] = pipeline_state(platform)
    finally:
        probe.stop()
        log("stopping the platform")
        platform.stop()
        report["shutdown"] = platform.shutdown
        shutil.rmtree(root, ignore_errors=True)
    reads = [results[k] for k in ("list_pipelines", "list_checkpoints")]
    sse_p99 = results["sse"]["delay_p99_s"]
    report["targets"] = dict(TARGETS)
    report["met"] = {  # a failed request fails its target whatever the others' latency
        "read_p99_ms": all(
            r["ok"] == r["requests"] and r["p99_ms"] <= TARGETS["read_p99_ms"] for r in reads
        ),
        "sse_delay_p99_s": sse_p99 is not None and sse_p99 <= TARGETS["sse_delay_p99_s"],
    }
    report["machine"]["load_average_at_end"] = list(os.getloadavg())
    report["elapsed_s"] = time.perf_counter() - started
    cleaned: dict[str, Any] = clean(report)
    return cleaned


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    def f(x: Any) -> str:
        return "-" if x is None else f"{x:.1f}" if isinstance(x, float) else str(x)

    t = Table(title=f"Spindle API benchmark ({report['profile']})")
    for col in ("operation", "target rps", "achieved rps", "p50 ms", "p99 ms", "max ms", "ok"):
        t.add_column(col, justify="left" if col == "operation" else "right")
    res = report["results"]
    for name in ("list_pipelines", "list_checkpoints", "ingest"):
        r = res[name]
        t.add_row(
            name,
            f(r["target_rps"]),
            f(r["achieved_rps"]),
            f(r["p50_ms"]),
            f(r["p99_ms"]),
            f(r["max_ms"]),
            f"{r['ok']}/{r['requests']}",
        )
    c = Console()
    c.print(t)
    s = res["sse"]
    c.print(
        f"SSE delay: p50 {f(s['delay_p50_s'])} s, p99 {f(s['delay_p99_s'])} s, "
        f"max {f(s['delay_max_s'])} s over {s['events']} events"
    )
    c.print(f"targets: {report['targets']}  met: {report['met']}")


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through run_benchmark's cleanup


def main(argv: Sequence[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    p = argparse.ArgumentParser(prog="python -m bench.api", description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="print only the JSON report to stdout")
    p.add_argument("--quick", action="store_true", help="2 s phases (for the smoke test)")
    p.add_argument("--dir", default=None, help="where to put temporary state (default: tmp)")
    p.add_argument("--rate", type=float, default=None, help="target requests/s of each phase")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--api-workers", type=int, default=None, help="API processes (default 1)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a platform setting, e.g. read_cache_s=0 (repeatable; default: the defaults, "
        "but spare_driver=false)",
    )
    args = p.parse_args(argv)
    mode = "quick" if args.quick else "full"
    log = quiet if args.quiet else log_to_stderr
    pairs = [x.partition("=") for x in args.set]
    if any(not eq or not k for k, eq, _ in pairs):
        p.error("--set takes FIELD=VALUE")
    try:
        report = run_benchmark(
            mode, args.dir, args.rate, log, args.api_workers, {k: v for k, _, v in pairs}
        )
    except ValueError as e:
        p.error(str(e))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
