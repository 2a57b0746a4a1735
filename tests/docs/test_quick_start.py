"""The README's quick start, `make run`: what it wraps, `python -m backend serve --data-dir DIR`
without `SPINDLE_ADMIN_TOKEN`, on a fresh data directory. It prints where it serves and where
the generated admin token is, writes `<data dir>/admin-token` with mode 0600, serves
`/healthz` and the console at `/ui/`, accepts the token, prints the token only the first time,
and stops cleanly (worker included) on SIGTERM.

(`make run` also bootstraps .venv/ and builds the console; `make test` runs this suite. The
rest of the platform's behaviour over HTTP is tests/backend/test_platform.py's, which starts
it with a configured admin token.)
"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from backend.__main__ import _stop_worker
from backend.api import ui
from tests.backend.live_platform import ROOT, free_port
from tests.polling import wait_until

DIST_INDEX = ui.DIST / "index.html"


class Serve:
    """`python -m backend serve` as `make run` starts it, its output collected."""

    def __init__(self, data_dir: Path, *options: str) -> None:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPINDLE_")}
        env["PYTHONPATH"] = str(ROOT)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "backend",
                "serve",
                "--data-dir",
                str(data_dir),
                "--port",
                str(self.port),
                *options,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.url = f"http://127.0.0.1:{self.port}"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"serve exited {self.proc.returncode}:\n{self.output}")
        try:
            return httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self, timeout: float = 120) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"serve did not stop on SIGTERM:\n{self.output}") from None
        self._reader.join(10)
        return code


def _worker_pids(data_dir: Path) -> list[int]:
    found = subprocess.run(
        ["pgrep", "-f", "--", f"--schedule {data_dir}/celerybeat-schedule"],
        capture_output=True,
        text=True,
    )
    return [int(p) for p in found.stdout.split()]


def test_make_run_serves_with_a_generated_admin_token(tmp_path: Path) -> None:
    data = tmp_path / "spindle-data"
    serve = Serve(data, "--show-token")
    try:
        wait_until(serve.ready, 90, "serve to be ready")
        wait_until(lambda: any("data:" in line for line in serve.lines), 10, "the banner")
        out = serve.output
        assert f"Spindle is serving on {serve.url}" in out, out
        token_file = data / "admin-token"
        m = re.search(r"admin token \(shown once; also in (\S+)\): (spd_\S+)", out)
        assert m is not None, out
        assert Path(m.group(1)) == token_file.resolve()
        token = m.group(2)
        assert token_file.read_text().strip() == token
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600

        health = httpx.get(f"{serve.url}/healthz", timeout=10)
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        console = httpx.get(f"{serve.url}/ui/", timeout=10)
        assert console.headers["content-type"].startswith("text/html")
        if DIST_INDEX.exists():  # built by `make run` / `make test`
            assert console.status_code == 200, console.text
        else:  # says how to build it rather than failing
            assert console.status_code == 503 and "make ui" in console.text
            assert f"note: {ui.NOT_BUILT}" in out, out
        auth = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{serve.url}/api/v1/pipelines", headers=auth, timeout=10).json() == []
        assert httpx.get(f"{serve.url}/api/v1/pipelines", timeout=10).status_code == 401
        assert _worker_pids(data), "serve started no worker"
    finally:
        code = serve.stop()
    assert code == 0, serve.output
    assert serve.lines[-1] == "stopped", serve.output
    assert not _worker_pids(data), "the worker outlived serve"

    # Started again on the same data directory: the token is not printed a second time.
    again = Serve(data)
    try:
        wait_until(again.ready, 90, "serve to be ready again")
        wait_until(lambda: any("data:" in line for line in again.lines), 10, "the banner")
        assert f"admin token: in {token_file.resolve()}" in again.output, again.output
        assert token not in again.output
    finally:
        assert again.stop() == 0, again.output
    assert not _worker_pids(data), "the worker outlived serve"


def test_a_new_admin_token_is_not_printed_into_captured_output(tmp_path: Path) -> None:
    """Output that is not a terminal (a service manager's log) gets where the token is."""
    data = tmp_path / "spindle-data"
    serve = Serve(data)
    try:
        wait_until(serve.ready, 90, "serve to be ready")
        wait_until(lambda: any("data:" in line for line in serve.lines), 10, "the banner")
        token = (data / "admin-token").read_text().strip()
        assert token.startswith("spd_") and token not in serve.output, serve.output
        assert f"admin token: created, in {(data / 'admin-token').resolve()}" in serve.output
    finally:
        assert serve.stop() == 0, serve.output


def test_a_killed_serve_gives_its_worker_a_warm_shutdown(tmp_path: Path) -> None:
    """serve killed outright (SIGKILL: no cleanup code of its own runs) still ends its worker:
    the kernel sends the worker SIGTERM, Celery's warm shutdown."""
    data = tmp_path / "spindle-data"
    serve = Serve(data)
    try:
        wait_until(serve.ready, 90, "serve to be ready")
        wait_until(lambda: bool(_worker_pids(data)), 60, "the worker to start")
        serve.proc.send_signal(signal.SIGKILL)
        serve.proc.wait()
        wait_until(lambda: not _worker_pids(data), 60, "the worker to stop")
    finally:
        for pid in _worker_pids(data):
            os.kill(pid, signal.SIGKILL)


# A stand-in worker: it forks a child, then exits on SIGTERM without stopping it, as a Celery
# worker does with a beat process forked just as it began to shut down.
_LEAKY_WORKER = """
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
print(child.pid, flush=True)
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # exited, not yet reaped
    except FileNotFoundError:
        return True


def test_stopping_the_worker_ends_the_processes_it_forked() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _LEAKY_WORKER], stdout=subprocess.PIPE, start_new_session=True
    )
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    try:
        _stop_worker(proc)
        assert proc.returncode == 0
        wait_until(lambda: _gone(child), 10, "the worker's child to end with it", every=0.05)
    finally:
        if not _gone(child):
            os.kill(child, signal.SIGKILL)
