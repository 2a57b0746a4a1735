"""A PostgreSQL server of its own, from Debian's packages (`/usr/lib/postgresql/<v>/bin`):
`initdb` into a directory the caller owns, then `postgres` on a free loopback port, trust
authentication for local connections, its socket in the same directory.

    pg = PostgresServer(tmp_path / "pg")
    pg.start()  # returns once it accepts connections
    pg.url("spindle")  # postgresql+psycopg://postgres@127.0.0.1:PORT/spindle (created)
    pg.stop()  # fast shutdown: SIGINT, then SIGKILL after `grace` seconds

PostgreSQL refuses to run as root: as root, the server runs as the `postgres` user (Debian's
package makes it), in a directory of its own under the system's temporary directory (that
user could not reach one under a root-only directory), removed by `stop`.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from .processes import DIE_WITH_PARENT, free_ports


def find_bin_dir() -> Path | None:
    """The newest PostgreSQL's binaries Debian installed, if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    return Path(found[-1]).parent if found else None


def _version(path: str) -> int:
    return int(Path(path).parts[-3]) if Path(path).parts[-3].isdigit() else 0


class PostgresServer:
    def __init__(self, directory: Path, settings: dict[str, str] | None = None) -> None:
        self.directory = directory.resolve()
        self.settings = dict(settings or {})  # further `-c` settings, e.g. wal_level
        self._own_dir = os.getuid() == 0
        (self.port,) = free_ports(1)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self._proc is not None, "not started"
        return self._proc.pid

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    @staticmethod
    def _owner() -> tuple[int | None, int | None, list[int] | None]:
        """The user, group and supplementary groups commands run as: the `postgres`
        user's as root, else none (this process's)."""
        if os.getuid() != 0:
            return None, None, None
        user = pwd.getpwnam("postgres")
        return user.pw_uid, user.pw_gid, []

    def start(self, timeout: float = 60.0) -> None:
        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise RuntimeError("no PostgreSQL: `make services` installs Debian's")
        if self._own_dir:
            self.directory = Path(tempfile.mkdtemp(prefix="spindle-pg-"))
        data = self.directory / "data"
        self.directory.mkdir(parents=True, exist_ok=True)
        if os.getuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
        uid, gid, groups = self._owner()
        if not (data / "PG_VERSION").exists():
            subprocess.run(
                [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                cwd=self.directory,
                user=uid,
                group=gid,
                extra_groups=groups,
            )
        log = open(self.directory / "postgres.log", "ab")  # noqa: SIM115 (lives with the process)
        self._proc = subprocess.Popen(
            [
                str(bin_dir / "postgres"),
                "-D",
                str(data),
                "-p",
                str(self.port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                f"unix_socket_directories={self.directory}",
                "-c",
                "fsync=off",  # a test server: durability is not what it is for
                *(a for k, v in self.settings.items() for a in ("-c", f"{k}={v}")),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.directory,
            preexec_fn=DIE_WITH_PARENT,
            user=uid,
            group=gid,
            extra_groups=groups,
        )
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"PostgreSQL did not start: see {self.directory}/postgres.log")
            time.sleep(0.2)

    def _ready(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(
                f"host=127.0.0.1 port={self.port} user=postgres", connect_timeout=2
            ):
                return True
        except psycopg.OperationalError:
            return False

    def create_database(self, name: str) -> None:
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres", autocommit=True
        ) as c:
            c.execute(f'CREATE DATABASE "{name}"')

    def stop(self, grace: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGINT)  # fast shutdown
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)


__all__ = ["PostgresServer", "find_bin_dir"]
