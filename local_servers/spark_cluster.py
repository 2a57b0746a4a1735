"""A real Spark standalone cluster for tests and benchmarks: a master and `workers` workers
started from the installed PySpark (`<pyspark>/bin/spark-class`), on free loopback ports,
everything they write under a directory the caller owns.

    with SparkCluster(tmp_path / "spark", workers=2, cores=1, memory="1g") as cluster:
        cluster.master_url          # "spark://127.0.0.1:PORT", for a driver's master
        cluster.worker_pids         # each worker's JVM, the leader of its process group
        cluster.executor_pids(0)    # the executor JVMs worker 0 runs now (to kill -9 one)
        cluster.python_pids(pid)    # an executor's Python workers (PySpark's daemon, its forks)
    # stop(): SIGTERM to every process group, SIGKILL after `grace` seconds; then whatever
    # was left of the executors' Python workers (PySpark's daemon makes a group of its own)

`start()` returns once the master's web UI JSON (`/json/`) lists every worker ALIVE. Each
process runs `spark-class`, whose Java is the drivers' (JAVA_HOME's, else the first `java`
on PATH), in a session of its own; on Linux it is SIGKILLed when the thread that started it
exits, so a killed test leaves no cluster behind (its executors exit when their worker does).
The master and the workers run with `daemon_java_options` (`DAEMON_JAVA_OPTIONS`, quick to
start); the executors with the application's (`spark.executor.extraJavaOptions`).

Under the directory: `master.log`, `worker-<i>.log`, `worker-<i>/` (worker i's work
directory: each application's executors' stdout and stderr in `<app id>/<executor id>/`),
`worker-<i>/local/` (its executors' scratch space: shuffle files, spilled blocks), `conf/`
(the cluster's SPARK_CONF_DIR, empty: no `spark-defaults.conf` or `spark-env.sh` of the
machine's applies). Nothing is written under PySpark's install (a worker's default work
directory is `<pyspark>/work`). The processes get this process's environment without its
SPARK_*, SPINDLE_* and AWS_* variables (a cluster holds none of a test's settings or keys),
with `env` added: `PYTHONPATH`, for example, reaches the executors' Python workers.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil

from .processes import DIE_WITH_PARENT, free_ports

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
_DROPPED_ENV = ("SPARK_", "SPINDLE_", "AWS_")
# The master's and the workers' JVMs only schedule: the client compiler alone and the serial
# collector halve the CPU time of their start (about 3 s each instead of 6.5 on two cores,
# where three of them start at once). Executors' options are the application's.
DAEMON_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def find_spark_home() -> Path:
    """The Spark of the installed PySpark (its `bin/spark-class` and `jars/`), or SPARK_HOME."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("pyspark is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _get_json(url: str, timeout: float = 2.0) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        got: dict[str, Any] = json.load(r)
        return got


class SparkCluster:
    """A standalone master and `workers` workers of `cores` cores and `memory` each."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        env: Mapping[str, str] | None = None,
        daemon_java_options: str = DAEMON_JAVA_OPTIONS,
        startup_timeout: float = 120.0,
    ) -> None:
        if workers < 1:
            raise ValueError("a cluster needs at least one worker")
        self.root = Path(directory).resolve()
        self.spark_home = find_spark_home()
        self.workers, self.cores, self.memory = workers, cores, memory
        self.extra_env = dict(env or {})
        self.daemon_java_options = daemon_java_options
        self.startup_timeout = startup_timeout
        self.port, self.webui_port, *self.worker_webui_ports = free_ports(2 + workers)
        self._master: subprocess.Popen[bytes] | None = None
        self._workers: list[subprocess.Popen[bytes]] = []

    # -- addresses and state --------------------------------------------------------------

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def webui_url(self) -> str:
        return f"http://127.0.0.1:{self.webui_port}"

    @property
    def master_pid(self) -> int:
        assert self._master is not None, "the cluster is not started"
        return self._master.pid

    @property
    def worker_pids(self) -> list[int]:
        """Each worker's JVM (`spark-class` execs it), in the order of the workers."""
        return [p.pid for p in self._workers]

    @property
    def running(self) -> bool:
        procs = [self._master, *self._workers]
        return all(p is not None and p.poll() is None for p in procs)

    @property
    def master_log(self) -> Path:
        return self.root / "master.log"

    def worker_log(self, worker: int) -> Path:
        return self.root / f"worker-{worker}.log"

    def work_dir(self, worker: int) -> Path:
        """Worker `worker`'s work directory: `<app id>/<executor id>/{stdout,stderr}`."""
        return self.root / f"worker-{worker}"

    def master_state(self) -> dict[str, Any]:
        """The master's web UI JSON: `workers` (id, host, cores, coresused, state...),
        `activeapps` and `completedapps` (id, name, cores, state...), `status`."""
        return _get_json(f"{self.webui_url}/json/")

    def worker_state(self, worker: int) -> dict[str, Any]:
        """Worker `worker`'s web UI JSON: its `id`, `cores`, `coresused`, and its
        `executors` and `finishedexecutors` (id, appid, cores, memory)."""
        return _get_json(f"http://127.0.0.1:{self.worker_webui_ports[worker]}/json/")

    def alive_workers(self) -> list[dict[str, Any]]:
        return [w for w in self.master_state()["workers"] if w["state"] == "ALIVE"]

    def executor_pids(self, worker: int, app_id: str | None = None) -> list[int]:
        """The executor JVMs that worker `worker` runs now (of application `app_id` only, if
        given): its children running Spark's executor backend."""
        out = []
        for child in _children(self._workers[worker].pid, recursive=False):
            cmdline = _cmdline(child)
            if EXECUTOR_CLASS not in cmdline:
                continue
            if app_id is not None and _option(cmdline, "--app-id") != app_id:
                continue
            out.append(child.pid)
        return sorted(out)

    @staticmethod
    def python_pids(executor_pid: int) -> list[int]:
        """The Python processes under an executor JVM: PySpark's daemon and the workers it
        forked (running tasks or idle), and any worker started without the daemon."""
        return sorted(
            p.pid
            for p in _children(executor_pid, recursive=True)
            if any("python" in part.rsplit("/", 1)[-1] for part in _cmdline(p)[:1])
        )

    # -- lifecycle ------------------------------------------------------------------------

    def _env(self, **more: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_ENV)}
        env.update(
            SPARK_HOME=str(self.spark_home),
            SPARK_CONF_DIR=str(self.root / "conf"),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_JAVA_OPTS=self.daemon_java_options,
        )
        return env | self.extra_env | more

    def _spawn(
        self, args: list[str], log_path: Path, env: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        # The kernel's parent-death signal is tied to the starting thread: main thread only.
        main = threading.current_thread() is threading.main_thread()
        command = [str(self.spark_home / "bin" / "spark-class"), *args]
        with log_path.open("ab") as log:
            log.write(f"\n==== {time.strftime('%F %T')} {' '.join(command)}\n".encode())
            log.flush()
            return subprocess.Popen(
                command,
                cwd=self.root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=DIE_WITH_PARENT if main else None,
            )

    def start(self) -> None:
        """Start the master, then the workers; return once every worker is ALIVE."""
        if self._master is not None:
            raise RuntimeError("the cluster is already started")
        (self.root / "conf").mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.startup_timeout
        try:
            self._master = self._spawn(
                [
                    MASTER_CLASS,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--webui-port",
                    str(self.webui_port),
                ],
                self.master_log,
                self._env(),
            )
            # Workers started before the master listens retry only after 5 to 15 s.
            self._wait(deadline, "the master", lambda: self.master_state()["status"] == "ALIVE")
            for i in range(self.workers):
                work = self.work_dir(i)
                (work / "local").mkdir(parents=True, exist_ok=True)
                env = self._env(SPARK_WORKER_DIR=str(work), SPARK_LOCAL_DIRS=str(work / "local"))
                self._workers.append(
                    self._spawn(
                        [
                            WORKER_CLASS,
                            self.master_url,
                            "--host",
                            "127.0.0.1",
                            "--cores",
                            str(self.cores),
                            "--memory",
                            self.memory,
                            "--work-dir",
                            str(work),
                            "--webui-port",
                            str(self.worker_webui_ports[i]),
                        ],
                        self.worker_log(i),
                        env,
                    )
                )
            self._wait(
                deadline,
                f"{self.workers} ALIVE workers",
                lambda: len(self.alive_workers()) == self.workers,
            )
        except BaseException:
            self.stop(grace=0)
            raise

    def _wait(self, deadline: float, what: str, ready: Callable[[], bool]) -> None:
        last: BaseException | None = None
        while True:
            for name, proc in self._processes():
                if proc.poll() is not None:
                    raise RuntimeError(self._failure(f"{name} exited ({proc.returncode})", None))
            try:
                if ready():
                    return
            except (OSError, ValueError, KeyError) as e:  # not listening yet, or half-written
                last = e
            if time.monotonic() > deadline:
                raise TimeoutError(
                    self._failure(f"no {what} after {self.startup_timeout:.0f} s", last)
                )
            time.sleep(0.1)

    def _processes(self) -> list[tuple[str, subprocess.Popen[bytes]]]:
        named = [("master", self._master)] if self._master is not None else []
        return [*named, *((f"worker {i}", p) for i, p in enumerate(self._workers))]

    def _failure(self, what: str, cause: BaseException | None) -> str:
        because = f"\nlast error: {type(cause).__name__}: {cause}" if cause else ""
        logs = [self.master_log, *(self.worker_log(i) for i in range(len(self._workers)))]
        tails = "".join(f"\n---- last lines of {p} ----\n{_tail(p)}" for p in logs)
        return f"Spark cluster {self.master_url}: {what}{because}{tails}"

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM to the workers' and the master's process groups (executors are in their
        worker's), SIGKILL to those left after `grace` seconds; then SIGKILL to whatever
        was left of their descendants (PySpark's daemon moves into a group of its own).
        `grace=0` kills at once."""
        procs = [p for _, p in self._processes()]
        self._master, self._workers = None, []
        descendants = [c for p in procs for c in _children(p.pid, recursive=True)]
        live = [p for p in procs if p.poll() is None]
        for p in live:
            _killpg(p.pid, signal.SIGTERM if grace > 0 else signal.SIGKILL)
        end = time.monotonic() + grace
        for p in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.0, end - time.monotonic()))
            if p.poll() is None:
                _killpg(p.pid, signal.SIGKILL)
                p.wait()
        for child in descendants:
            with contextlib.suppress(psutil.Error):
                child.kill()
        psutil.wait_procs(descendants, timeout=5)

    def __enter__(self) -> SparkCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"SparkCluster({self.master_url}, {len(self._workers)} workers, {state})"


def _children(pid: int, *, recursive: bool) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=recursive)
    except psutil.Error:
        return []


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _option(cmdline: list[str], name: str) -> str | None:
    i = cmdline.index(name) if name in cmdline else -1
    return cmdline[i + 1] if 0 <= i < len(cmdline) - 1 else None


def _killpg(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


__all__ = ["SparkCluster", "find_spark_home"]
