"""The whole platform as real processes for end-to-end tests: `python -m backend serve`
(API + Celery worker + beat) on a fresh database and broker, driven over HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from backend.db import Database
from backend.models import Pipeline, Run
from backend.settings import Settings
from tests.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
REDIS = os.environ.get("SPINDLE_TEST_REDIS", "redis://127.0.0.1:6379/0")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Platform:
    """One running Spindle: `start()`, `client`, `stop()`; fast failure detection settings
    (heartbeat timeout, reap interval, restart backoff) so crash tests take seconds. `root`:
    the checkout whose code runs (an earlier release's, for the upgrade fixtures)."""

    def __init__(
        self,
        data_dir: Path,
        database_url: str | None,
        broker_url: str | None,
        extra_env: dict[str, str] | None = None,
        root: Path = ROOT,
    ) -> None:
        self.data_dir, self.root = data_dir, root
        self.port = free_port()
        self.token = "spd_test_" + secrets.token_urlsafe(16)
        self.prefix = f"spindle-test-{uuid.uuid4().hex[:10]}"
        self.env = {
            **os.environ,
            "PYTHONPATH": str(root),
            "SPINDLE_DATA_DIR": str(data_dir),
            "SPINDLE_ADMIN_TOKEN": self.token,
            "SPINDLE_QUEUE_PREFIX": self.prefix,
            "SPINDLE_HEARTBEAT_TIMEOUT_S": "8",
            "SPINDLE_REAP_INTERVAL_S": "1",
            "SPINDLE_RESTART_BACKOFF_S": "0.5",
            # Off unless a test asks: a spare costs a JVM's warm-up (10-20 s of CPU) beside
            # every pipeline a test starts, on machines the suite shares with itself.
            "SPINDLE_SPARE_DRIVER": "false",
        }
        self.env.update(extra_env or {})
        if database_url:
            self.env["SPINDLE_DATABASE_URL"] = database_url
        if broker_url:
            self.env["SPINDLE_BROKER_URL"] = broker_url
        self.proc: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self._db: Database | None = None  # the platform's database, once a test reads it
        self.client = httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=60,
        )

    @property
    def settings(self) -> Settings:
        return Settings(
            data_dir=self.data_dir,
            database_url=self.env.get("SPINDLE_DATABASE_URL"),
            object_store_url=self.env.get("SPINDLE_OBJECT_STORE_URL"),
            broker_url=self.env.get("SPINDLE_BROKER_URL"),
            queue_prefix=self.prefix,
        )

    def start(self) -> Platform:
        log = open(self.data_dir / "serve.log", "ab")  # noqa: SIM115 (lives with the process)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "backend", "serve", "--port", str(self.port)],
            cwd=self.root,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._ready, 60, "the API to be ready")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"serve exited: {self.logs()}")
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def worker_pids(self) -> list[int]:
        out = subprocess.run(
            [
                "pgrep",
                "-f",
                f"celery -A workers.jobs.celery_app worker.*{self.proc.pid if self.proc else 0}",
            ],
            capture_output=True,
            text=True,
        )
        return [int(x) for x in out.stdout.split()]

    def driver_pids(self, pipeline: str) -> list[int]:
        """The pipeline's driver processes: by command line, and its newest run's driver as
        the database has it (a spare that took a run over keeps its own command line)."""
        storage = self.settings.storage_dir(pipeline)
        out = subprocess.run(
            ["pgrep", "-f", f"workers.jobs.driver run .*--storage {storage}"],
            capture_output=True,
            text=True,
        )
        pids = [int(x) for x in out.stdout.split()]
        run = self._newest_run_pid(pipeline)
        if run is not None and run not in pids and os.path.exists(f"/proc/{run}"):
            pids.append(run)
        return pids

    def _newest_run_pid(self, pipeline: str) -> int | None:
        if self._db is None:  # one engine for the platform's life: callers poll
            self._db = Database(self.settings.db_url)
        with self._db.session() as s:
            pid: int | None = s.scalar(
                select(Run.pid)
                .join(Pipeline, Run.pipeline_id == Pipeline.id)
                .where(Pipeline.name == pipeline)
                .order_by(Run.id.desc())
                .limit(1)
            )
            return pid

    def spare_pids(self) -> list[int]:
        """The worker's spare drivers (`workers.jobs.driver spare`: waiting, or running the run
        they took over)."""
        out = subprocess.run(
            ["pgrep", "-f", "workers.jobs.driver spare"], capture_output=True, text=True
        )
        root = os.path.realpath(self.settings.roots[0])  # drivers' working directory
        mine = []
        for pid in (int(x) for x in out.stdout.split()):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/cwd") == root:
                    mine.append(pid)
        return mine

    def ready_spare(self) -> int | None:
        """The worker's one spare driver waiting to take over, once it has said it is ready
        (warmed up): its log stays in `spares/` until a run takes it over."""
        ready = [
            int(m.group(1))
            for f in (self.data_dir / "spares").glob("spare-*.log")
            if (m := re.search(r"spare: ready \(pid (\d+)", f.read_text()))
        ]
        running = self.spare_pids()
        alive = [pid for pid in ready if pid in running]
        return alive[0] if len(alive) == 1 else None

    def start_worker(self) -> None:
        """Another worker with beat (as an operator would after one died)."""
        from backend.__main__ import worker_command

        cmd = worker_command(self.settings, concurrency=8)
        cmd[cmd.index("--hostname") + 1] = f"spindle-extra-{uuid.uuid4().hex[:6]}@test"
        log = open(self.data_dir / "worker2.log", "ab")  # noqa: SIM115
        self.workers.append(
            subprocess.Popen(cmd, cwd=self.root, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        )

    def logs(self) -> str:
        parts = []
        for name in ("serve.log", "logs/worker.log", "worker2.log"):
            p = self.data_dir / name
            if p.exists():
                parts.append(f"--- {name}\n" + p.read_text(errors="replace")[-4000:])
        return "\n".join(parts)

    def stop(self) -> None:
        self.client.close()
        if self._db is not None:
            self._db.dispose()
        procs = [p for p in (self.proc, *self.workers) if p is not None]
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(120)  # serve gives its worker 60 s to let pipelines checkpoint
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        # Nothing may outlive the platform: drivers (spares too) die with their worker.
        left = self.spare_pids()
        for pattern in (f"--storage {self.data_dir}", f"--schedule {self.data_dir}"):
            found = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True, text=True)
            left += [int(pid) for pid in found.stdout.split()]
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    # -- HTTP helpers --

    def ok(self, method: str, path: str, **kw: Any) -> Any:
        r = self.client.request(method, path, **kw)
        assert r.status_code < 300, f"{method} {path}: {r.status_code} {r.text}\n{self.logs()}"
        return r.json() if r.content else None

    def pipeline(self, name: str) -> dict[str, Any]:
        return dict(self.ok("GET", f"/api/v1/pipelines/{name}"))

    def runs(self, name: str) -> list[dict[str, Any]]:
        return list(self.ok("GET", f"/api/v1/pipelines/{name}/runs"))

    def wait_state(self, name: str, state: str, timeout: float = 90) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            p = self.pipeline(name)
            if p["state"] == "failed" and state != "failed":
                raise AssertionError(f"pipeline failed: {p['error']}\n{self.logs()}")
            return p if p["state"] == state else None

        return dict(wait_until(check, timeout, f"{name} to be {state}"))

    def wait_step(self, name: str, step: int, timeout: float = 90) -> int:
        def check() -> int | None:
            rs = self.runs(name)
            last = rs[0]["last_step"] if rs and rs[0]["state"] == "running" else None
            return last if last is not None and last >= step else None

        return int(wait_until(check, timeout, f"{name} to reach step {step}"))

    def wait_operation(self, op_id: str, timeout: float = 60) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            op = self.ok("GET", f"/api/v1/operations/{op_id}")
            return op if op["status"] in ("succeeded", "failed") else None

        return dict(wait_until(check, timeout, f"operation {op_id}"))

    def sse_steps(self, name: str, n: int, timeout: float = 60) -> list[dict[str, Any]]:
        """The next `n` step events of the metrics stream."""
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        with self.client.stream(
            "GET", f"/api/v1/pipelines/{name}/metrics/stream", timeout=timeout
        ) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data:"):
                    got.append(json.loads(line[5:]))
                    if len(got) >= n:
                        break
                if time.monotonic() > deadline:
                    break
        return got


def platform(
    tmp: Path,
    database_url: str | None,
    broker_url: str | None,
    extra_env: dict[str, str] | None = None,
) -> Iterator[Platform]:
    p = Platform(tmp, database_url, broker_url, extra_env)
    try:
        yield p.start()
    finally:
        p.stop()


class StackPlatform(Platform):
    """The deployed stack on this machine (`local_servers.stack`: PostgreSQL, Redis, S3,
    two APIs behind nginx, a worker, beat, a Spark master and worker) behind the same
    helpers: `port` is nginx's."""

    def __init__(self, directory: Path) -> None:
        from local_servers.stack import LocalStack

        self.stack = LocalStack(
            directory,
            {
                "SPINDLE_HEARTBEAT_TIMEOUT_S": "8",
                "SPINDLE_REAP_INTERVAL_S": "1",
                "SPINDLE_RESTART_BACKOFF_S": "0.5",
                "SPINDLE_SPARE_DRIVER": "false",
                # Reads reach either API process: each caches its answers up to this long
                # (docs/configuration.md), so a test's read right after its write could see
                # the other's older answer. The tests assert read-after-write, so: none.
                "SPINDLE_READ_CACHE_S": "0",
            },
        )
        super().__init__(self.stack.data_dir, None, None)
        self.port, self.token = self.stack.port, self.stack.token
        self.env.update(self.stack.spindle_env())
        self.client = httpx.Client(
            base_url=self.stack.url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=60,
        )

    def start(self) -> Platform:
        self.stack.start()
        return self

    def worker_pids(self) -> list[int]:
        return self.stack.pids("worker")

    def logs(self) -> str:
        return "\n".join(self.stack.log_tail(n) for n in ("api", "worker", "beat", "nginx"))

    def stop(self) -> None:
        self.client.close()
        if self._db is not None:
            self._db.dispose()
        self.stack.stop()
