"""Spindle deployed on one machine without Docker: the services of docker-compose.yml as
real processes of this machine, from a checkout (docs/deploy.md, "The stack without
Docker").

    python -m local_servers.stack [DIRECTORY]   # up until Ctrl-C, then everything stops

or, from Python (the tests):

    with LocalStack(tmp_path / "stack") as stack:
        stack.url, stack.token     # nginx in front of the console and both APIs
        stack.kill("worker")       # SIGKILL; the supervisor starts it again, as compose's
                                   # `restart: unless-stopped` does

| compose service | here |
| --- | --- |
| postgres | `PostgresServer` (Debian's PostgreSQL, a cluster of its own) |
| redis | `redis-server --appendonly yes` |
| minio, minio-init | `SeaweedS3` (SeaweedFS's S3 gateway) and its bucket |
| migrate | `python -m backend migrate`, once, before the rest |
| api | `python -m backend serve --no-worker`, two replicas |
| worker, beat | the same Celery commands |
| frontend | Debian's nginx with deploy/nginx.conf, the API's two replicas as its upstream |
| spark-master, spark-worker | `SparkCluster`: a master and one worker |

Every Spindle process gets the same settings (`spindle_env`: compose's `x-spindle-env`).
`SERVICES` names each compose service's counterpart; tests/deploy/test_compose.py checks
both lists and the settings against docker-compose.yml.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from .postgres import PostgresServer
from .processes import DIE_WITH_PARENT, free_ports
from .seaweedfs import SeaweedS3
from .spark_cluster import SparkCluster

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "spindle"
API_REPLICAS = 2
# Each compose service and what stands for it here (None: nothing to run, see the table).
SERVICES: dict[str, str] = {
    "postgres": "postgres",
    "redis": "redis",
    "minio": "s3",
    "minio-init": "s3",
    "migrate": "migrate",
    "api": "api",
    "worker": "worker",
    "beat": "beat",
    "frontend": "nginx",
    "spark-master": "spark",
    "spark-worker": "spark",
}
# The processes the supervisor starts again when they exit (compose: unless-stopped).
SUPERVISED = ("api", "worker", "beat", "nginx")


class LocalStack:
    def __init__(self, directory: Path, extra_env: dict[str, str] | None = None) -> None:
        self.directory = directory.resolve()
        self.data_dir = self.directory / "data"
        self.token = "spd_stack_" + secrets.token_urlsafe(16)
        self.extra_env = dict(extra_env or {})  # tunables (heartbeats, ...), as compose's .env
        self.port, self.redis_port, *self.api_ports = free_ports(2 + API_REPLICAS)
        self.postgres = PostgresServer(self.directory / "postgres")
        self.s3 = SeaweedS3(self.directory / "s3")
        self.spark = SparkCluster(
            self.directory / "spark",
            workers=1,
            cores=2,
            memory="2g",
            env={
                "PYTHONPATH": str(ROOT),
                # As compose's spark-master: one core per application unless it asks.
                "SPARK_MASTER_OPTS": "-Dspark.deploy.defaultCores=1",
            },
        )
        self.procs: dict[str, list[subprocess.Popen[bytes]]] = {}
        self._commands: dict[str, list[list[str]]] = {}
        self._spawn_env: dict[str, str] = {}
        self.restarts: dict[str, int] = {name: 0 for name in SUPERVISED}
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._supervisor: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spindle_env(self) -> dict[str, str]:
        """Compose's `x-spindle-env`, for this machine's servers."""
        return {
            "SPINDLE_DATA_DIR": str(self.data_dir),
            "SPINDLE_DATABASE_URL": self.postgres.url("spindle"),
            "SPINDLE_BROKER_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "SPINDLE_OBJECT_STORE_URL": f"s3://{BUCKET}",
            "SPINDLE_S3_ENDPOINT": self.s3.endpoint,
            "SPINDLE_S3_BUCKET": BUCKET,
            "SPINDLE_S3_ACCESS_KEY": self.s3.access_key,
            "SPINDLE_S3_SECRET_KEY": self.s3.secret_key,
            "SPINDLE_S3_SECURE": "false",
            "SPINDLE_SPARK_MASTER": self.spark.master_url,
            "SPINDLE_API_URL": self.url,
            "SPINDLE_DRIVER_HOST": "127.0.0.1",  # one machine: the API reaches drivers here
        }

    def _env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("SPINDLE_")}
        return {
            **base,
            "PYTHONPATH": str(ROOT),
            "SPINDLE_ADMIN_TOKEN": self.token,
            **self.extra_env,
            **self.spindle_env(),
        }

    # -- the services --------------------------------------------------------------------

    def commands(self) -> dict[str, list[list[str]]]:
        """The supervised services' commands, one per replica."""
        py = sys.executable
        celery = [py, "-m", "celery", "-A", "workers.jobs.celery_app"]
        return {
            "api": [
                [
                    py,
                    "-m",
                    "backend",
                    "serve",
                    "--no-worker",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(p),
                ]
                for p in self.api_ports
            ],
            "worker": [
                [
                    *celery,
                    "worker",
                    "--pool",
                    "threads",
                    "--concurrency",
                    "32",
                    "--loglevel",
                    "INFO",
                    "--hostname",
                    f"spindle@stack-{self.port}",
                ]
            ],
            "beat": [
                [
                    *celery,
                    "beat",
                    "--schedule",
                    str(self.directory / "celerybeat-schedule"),
                    "--loglevel",
                    "INFO",
                ]
            ],
            "nginx": [
                [
                    shutil.which("nginx") or "/usr/sbin/nginx",  # not on a user's PATH
                    "-p",
                    str(self.directory / "nginx"),
                    "-c",
                    str(self._nginx_conf()),
                    "-g",
                    "daemon off;",
                ]
            ],
        }

    def _spawn(self, name: str, i: int) -> subprocess.Popen[bytes]:
        log = open(self.directory / f"{name}-{i}.log", "ab")  # noqa: SIM115
        return subprocess.Popen(
            self._commands[name][i],
            cwd=ROOT,
            env=self._spawn_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own group: a kill reaches its children too
        )

    def start(self) -> LocalStack:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(exist_ok=True)
        self.postgres.start()
        self.postgres.create_database("spindle")
        (self.directory / "redis").mkdir(exist_ok=True)
        self.procs["redis"] = [
            subprocess.Popen(
                [
                    "redis-server",
                    "--bind",
                    "127.0.0.1",
                    "--port",
                    str(self.redis_port),
                    "--appendonly",
                    "yes",
                    "--dir",
                    str(self.directory / "redis"),
                ],
                stdout=open(self.directory / "redis.log", "ab"),  # noqa: SIM115
                stderr=subprocess.STDOUT,
                preexec_fn=DIE_WITH_PARENT,
            )
        ]
        self.s3.start()
        self.s3.client().make_bucket(BUCKET)
        self.spark.start()
        subprocess.run(
            [sys.executable, "-m", "backend", "migrate"],
            cwd=ROOT,
            env=self._env(),
            check=True,
            capture_output=True,
        )
        # Made once (the nginx configuration is written here): a restart reuses them.
        self._commands, self._spawn_env = self.commands(), self._env()
        for name, cmds in self._commands.items():
            self.procs[name] = [self._spawn(name, i) for i in range(len(cmds))]
        self._wait_ready(120)
        self._supervisor = threading.Thread(target=self._supervise, daemon=True)
        self._supervisor.start()
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        urls = [f"http://127.0.0.1:{p}/readyz" for p in self.api_ports] + [f"{self.url}/ui/"]
        while True:
            for name in SUPERVISED:
                for p in self.procs[name]:
                    if p.poll() is not None:
                        raise RuntimeError(f"{name} exited at start: {self.log_tail(name)}")
            if all(_answers(u) for u in urls):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the stack was not ready within {timeout} s")
            time.sleep(0.5)

    def _supervise(self) -> None:
        while not self._stopping.wait(0.5):
            with self._lock:
                for name in SUPERVISED:
                    for i, p in enumerate(self.procs[name]):
                        if p.poll() is not None and not self._stopping.is_set():
                            self.procs[name][i] = self._spawn(name, i)
                            self.restarts[name] += 1

    def pids(self, name: str) -> list[int]:
        """The processes of a supervised service, now."""
        with self._lock:
            return [p.pid for p in self.procs[name] if p.poll() is None]

    def kill(self, name: str, replica: int = 0) -> int:
        """SIGKILL one replica of a service (its process group: a worker's drivers go
        with it, as in a container); the supervisor starts it again. Its pid."""
        with self._lock:
            pid = self.procs[name][replica].pid
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        return pid

    def log_tail(self, name: str, lines: int = 40) -> str:
        out = []
        for f in sorted(self.directory.glob(f"{name}-*.log")):
            text = f.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {f.name}\n" + "\n".join(text))
        return "\n".join(out)

    def stop(self) -> None:
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join(5)
        # The Spindle processes first: a worker gives its pipelines time to checkpoint.
        for name in ("nginx", "beat", "worker", "api", "redis"):
            for p in self.procs.get(name, []):
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGTERM) if name != "redis" else p.terminate()
            for p in self.procs.get(name, []):
                try:
                    p.wait(120)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        self.spark.stop()
        self.s3.stop()
        self.postgres.stop()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- nginx ---------------------------------------------------------------------------

    def _nginx_conf(self) -> Path:
        """deploy/nginx.conf in a main configuration of its own: its `server` as it is,
        but listening here, the API's replicas as the upstream `api`, the built console as
        the document root."""
        prefix = self.directory / "nginx"
        (prefix / "logs").mkdir(parents=True, exist_ok=True)
        html = prefix / "html"
        html.mkdir(exist_ok=True)
        console = ROOT / "backend" / "api" / "console"
        if not (html / "ui").is_symlink():
            (html / "ui").symlink_to(console)
        server = (ROOT / "deploy" / "nginx.conf").read_text()
        server = re.sub(r"listen 8080;", f"listen 127.0.0.1:{self.port};", server)
        server = re.sub(r"\n\s*resolver [^;]*;", "", server)
        server = server.replace("set $spindle_api http://api:8000;", "set $spindle_api http://api;")
        server = server.replace("root /usr/share/nginx/html;", f"root {html};")
        upstream = "".join(f"    server 127.0.0.1:{p};\n" for p in self.api_ports)
        temp = "".join(
            f"  {k}_temp_path {prefix / k};\n"
            for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        # As root, nginx's workers would run as `nobody`, which cannot use these paths.
        user = "user root;\n" if os.getuid() == 0 else ""
        conf = (
            f"{user}pid {prefix / 'nginx.pid'};\nerror_log {prefix / 'logs' / 'error.log'};\n"
            "events {}\n"
            "http {\n  include /etc/nginx/mime.types;\n"
            f"  access_log {prefix / 'logs' / 'access.log'};\n{temp}"
            f"  upstream api {{\n{upstream}  }}\n{server}\n}}\n"
        )
        path = prefix / "nginx.conf"
        path.write_text(conf)
        return path


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def main() -> None:
    import tempfile

    directory = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp("-stack"))
    stack = LocalStack(directory)
    stack.start()
    print(f"Spindle at {stack.url}/ui/  admin token: {stack.token}  (Ctrl-C stops it)")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
