"""A real Prometheus server for tests: Debian's `prometheus` package (`/usr/bin/prometheus`),
on a free loopback port, its time series under a directory the caller owns.

    prom = PrometheusServer(tmp_path / "prom", scrape_configs)
    prom.start()  # blocks until the server is ready
    prom.query("up")  # the instant query's result vector (the HTTP API's `data.result`)
    prom.stop()

`scrape_configs` is the `scrape_configs` list of a prometheus.yml; the global scrape
interval is one second, so a rate over a few scrapes is known within seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from .processes import DIE_WITH_PARENT, free_ports


def find_prometheus() -> str | None:
    """The `prometheus` binary on the PATH (Debian's package), if any."""
    return shutil.which("prometheus")


class PrometheusServer:
    def __init__(self, directory: Path, scrape_configs: list[dict[str, Any]]) -> None:
        self.directory, self.scrape_configs = directory, scrape_configs
        (self.port,) = free_ports(1)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        binary = find_prometheus()
        if binary is None:
            raise RuntimeError("no prometheus binary: `make services` installs Debian's")
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "prometheus.yml"
        doc = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": self.scrape_configs,
        }
        config.write_text(json.dumps(doc))  # YAML is a superset of JSON
        with open(self.directory / "prometheus.log", "ab") as out:
            self._proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.directory / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.directory,
                preexec_fn=DIE_WITH_PARENT,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: see {self.directory / 'prometheus.log'}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r,
            ):
                if r.status == 200:
                    return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"prometheus was not ready within {timeout} s")
            time.sleep(0.2)

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector; raises on an error the server reports (a
        query that does not parse, for one)."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{promql}: {e.read().decode(errors='replace')}") from None
        if body.get("status") != "success":
            raise RuntimeError(f"{promql}: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets, with their health and last error."""
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=10) as r:
            active: list[dict[str, Any]] = json.load(r)["data"]["activeTargets"]
        return active

    def stop(self, grace: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


__all__ = ["PrometheusServer", "find_prometheus"]
