"""The worker's spare driver (`python -m workers.jobs.driver spare`, workers/runtime/spare.py):
at most one, kept while the worker supervises runs (`SPINDLE_SPARE_DRIVER`, the default). Any
pipeline's next driver (a start, a crash's restart, a restore's relaunch) takes it over with one
line on its standard input (the run's arguments) instead of starting Spark; another is spawned
once that run is up. Retired when the worker's last run ends: an idle worker keeps no JVM."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from backend.settings import Settings

from .launch import DRIVER, Launch, spawn

log = logging.getLogger("spindle.supervisor")

RETIRE_TIMEOUT_S = 180.0  # a retired spare still warming up is killed after this long

# Spares are spawned from one long-lived thread: a driver's parent-death signal follows the
# thread that started it, and a spare outlives the task that asked for it.
_SPAWNER = ThreadPoolExecutor(1, thread_name_prefix="spindle-spare")


@dataclass
class Spare:
    """A driver started ahead of its run, and where it logs until it takes one over."""

    proc: subprocess.Popen[bytes]
    log_path: str


class Spares:
    """The worker's spare driver (see the module's doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spare: Spare | None = None
        self._runs = 0  # runs being supervised

    @contextlib.contextmanager
    def supervising(self) -> Iterator[None]:
        """Around the supervision of runs: the spare is kept while one is."""
        with self._lock:
            self._runs += 1
        try:
            yield
        finally:
            with self._lock:
                self._runs -= 1
                idle = self._spare if self._runs == 0 else None
                if idle is not None:
                    self._spare = None
            if idle is not None:
                log.info("no run left to serve: retiring spare driver pid %s", idle.proc.pid)
                _retire(idle)

    def ensure(self, settings: Settings) -> None:
        """A spare, unless a live one exists or no run is being supervised."""
        with self._lock:
            have = self._spare
            if self._runs == 0 or (have is not None and have.proc.poll() is None):
                return
            logs = settings.data_path / "spares"
            logs.mkdir(parents=True, exist_ok=True)
            log_path = str(logs / f"spare-{time.time_ns()}.log")
            cmd = [*DRIVER, "spare"]
            proc = _SPAWNER.submit(spawn, cmd, settings, log_path, subprocess.PIPE).result()
            self._spare = Spare(proc, log_path)
        log.info("spare driver pid %s", proc.pid)

    def take(self, launch: Launch) -> Spare | None:
        """Hand `launch`'s run to the spare: its log becomes the run's and it is told the
        run's arguments. None if there is no live spare."""
        with self._lock:
            sb, self._spare = self._spare, None
        if sb is None:
            return None
        if launch.cmd[: len(DRIVER) + 1] != [*DRIVER, "run"] or sb.proc.poll() is not None:
            _retire(sb)
            return None
        return sb if _hand_over(sb, launch) else None

    def pid(self) -> int | None:
        with self._lock:
            return self._spare.proc.pid if self._spare is not None else None

    def discard_all(self) -> None:
        with self._lock:
            sb, self._spare = self._spare, None
        if sb is not None:
            _retire(sb)


def _hand_over(sb: Spare, launch: Launch) -> bool:
    """Make `sb`'s log the run's and tell it to take over (False, and `sb` retired, if it
    died meanwhile)."""
    try:
        os.replace(sb.log_path, launch.log_path)  # open file: the driver writes on
        sb.log_path = launch.log_path
    except OSError:
        log.warning("%s: the driver's log stays at %s", launch.pipeline, sb.log_path)
    assert sb.proc.stdin is not None
    line = {"argv": launch.cmd[len(DRIVER) + 1 :], "env": launch.env}
    try:
        sb.proc.stdin.write((json.dumps(line) + "\n").encode())
        sb.proc.stdin.close()
    except OSError:  # it died just now
        _retire(sb)
        return False
    return True


def _retire(sb: Spare) -> None:
    """Close its input (it exits at once, or after its warm-up), and reap it."""
    try:
        if sb.proc.stdin is not None:
            sb.proc.stdin.close()
    except OSError:
        pass

    def _reap() -> None:
        try:
            code = sb.proc.wait(timeout=RETIRE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            sb.proc.kill()
            code = sb.proc.wait()
        if code == 0:  # it was not needed: nothing to read in its log
            with contextlib.suppress(OSError):
                os.remove(sb.log_path)
        else:
            log.warning("spare pid %s ended with %s; log: %s", sb.proc.pid, code, sb.log_path)

    threading.Thread(target=_reap, name="spindle-spare-reaper", daemon=True).start()


SPARES = Spares()

__all__ = ["RETIRE_TIMEOUT_S", "SPARES", "Spare", "Spares"]
