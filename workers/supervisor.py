"""Runs a pipeline's Spark driver (`python -m workers.runner run ... --run-id N`) as a
child process of the worker and waits for it: log to `<pipeline dir>/runs/<n>.log`, exit
recorded through `backend.services.lifecycle.run_exited`, restores relaunched in place,
crashes handed to the reaper. The driver dies with the worker (PR_SET_PDEATHSIG), so a
worker that disappears leaves no orphan writing to the storage location; its runs stop
heartbeating and the reaper replaces them."""

from __future__ import annotations

import copy
import ctypes
import functools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import update

from backend.db import Database
from backend.models import Run, RunState, utcnow
from backend.services import checkpoints as cps
from backend.services import lifecycle
from backend.services import operations as ops
from backend.services.logs import tail
from backend.services.queue import TaskQueue
from backend.services.specs import resolve_path
from backend.settings import Settings

log = logging.getLogger("spindle.supervisor")

# Set when the worker shuts down: supervisors ask their drivers to checkpoint and exit.
SHUTDOWN = threading.Event()
_PR_SET_PDEATHSIG = 1


def _child_setup(nice: int) -> None:
    """In the driver, before exec: die with the worker; and run below the control plane's
    priority (inherited by Spark's JVM and Python workers), so a pipeline using every core
    delays the API's answers and the worker's heartbeats by little, and pipelines still get
    all the CPU nothing else wants."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if nice:
        os.nice(nice)


def _prepare(db: Database, settings: Settings, run_id: int) -> list[str] | None:
    """Write the spec, point the run at its log; the driver's command line, or None if the
    run is no longer waiting to start (a duplicate or stale launch)."""
    with db.session() as s:
        run = s.get(Run, run_id)
        if run is None or run.state != RunState.starting:
            return None
        p = run.pipeline
        pdir = settings.pipeline_dir(p.name)
        (pdir / "runs").mkdir(parents=True, exist_ok=True)
        spec_path = pdir / "spec.json"
        spec_path.write_text(json.dumps(_absolute_paths(p.spec, settings.roots), indent=1))
        run.log_path = str(pdir / "runs" / f"{run.number}.log")
        run.host = socket.gethostname()
        storage = settings.storage_dir(p.name)
        cps.reconcile_dir(s, p.id, storage)  # the manifest wins, before anything changes
        remote = settings.pipeline_store_url(p.name)
        return [
            sys.executable,
            "-m",
            "workers.runner",
            "run",
            str(spec_path),
            "--storage",
            str(storage),
            "--from-checkpoint",
            run.from_checkpoint,
            "--base-dir",
            str(settings.roots[0]),
            "--run-id",
            str(run.id),
            *(["--remote", remote] if remote else []),
        ]


def _absolute_paths(spec: dict[str, Any], roots: list[Path]) -> dict[str, Any]:
    """The spec with its file paths resolved against the file roots (as validated), so the
    driver and Spark's Python workers agree whatever their working directory."""
    out = copy.deepcopy(spec)
    things = [out.get("source", {}), *out.get("sinks", [])]
    for t in things:
        if isinstance(t, dict) and t.get("kind") == "files" and isinstance(t.get("path"), str):
            resolved = resolve_path(t["path"], roots)
            if resolved is not None:
                t["path"] = str(resolved)
    return out


def _env(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    env["SPINDLE_DATABASE_URL"] = settings.db_url
    env["SPINDLE_DATA_DIR"] = str(settings.data_path)
    env["SPINDLE_SPARK_MASTER"] = settings.spark_master
    env["PYTHONUNBUFFERED"] = "1"
    return env


def supervise(db: Database, settings: Settings, queue: TaskQueue, run_id: int) -> None:
    """Run the driver of `run_id` until it exits, then any relaunch (restore) it asks for."""
    next_run: int | None = run_id
    while next_run is not None:
        run_id, next_run = next_run, None
        cmd = _prepare(db, settings, run_id)
        if cmd is None:
            log.info("run %s is not starting; launch ignored", run_id)
            return
        with db.session() as s:
            run = s.get(Run, run_id)
            assert run is not None and run.log_path is not None
            log_path = run.log_path
        root = settings.roots[0]
        root.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=root,
                env=_env(settings),
                preexec_fn=functools.partial(_child_setup, settings.driver_nice),
                # Its own process group: signals meant for the worker's group (a terminal's
                # Ctrl-C, a service manager's stop) must not reach Spark's processes; the
                # supervisor stops the driver itself, cleanly.
                start_new_session=True,
            )
        with db.session() as s:
            run = s.get(Run, run_id)
            assert run is not None
            run.pid = proc.pid
        log.info("run %s: driver pid %s", run_id, proc.pid)
        beat = functools.partial(_starting_heartbeat, db, run_id)
        code = _wait(proc, beat, settings.heartbeat_s)
        with db.session() as s:
            run = s.get(Run, run_id)
            assert run is not None
            outcome = lifecycle.run_exited(s, run, code, tail(log_path))
            log.info("run %s: %s", run_id, run.exit_reason)
            leftover = [] if outcome.relaunch else ops.pending_ids(s, run.pipeline_id)
            if outcome.relaunch is not None:
                next_run = outcome.relaunch.id
        for op_id in leftover:  # commands that arrived as the run ended
            queue.execute(op_id)
        if outcome.restart_due:
            queue.reap()


def _starting_heartbeat(db: Database, run_id: int) -> None:
    """While the driver starts (Spark takes seconds), its supervisor vouches for it; once
    running, the driver's own control loop heartbeats."""
    with db.session() as s:
        s.execute(
            update(Run)
            .where(Run.id == run_id, Run.state == RunState.starting)
            .values(heartbeat_at=utcnow())
        )


def _wait(proc: subprocess.Popen[bytes], beat: Callable[[], None], every_s: float) -> int:
    asked = False
    last = 0.0
    while True:
        now = time.monotonic()
        if now - last >= every_s:
            try:
                beat()
            except Exception:  # the database may be briefly unavailable
                log.exception("heartbeat")
            last = now
        try:
            code = proc.wait(timeout=min(every_s, 0.5))
            # Asked to stop for a shutdown before it could install its handler: the same.
            return lifecycle.EXIT_INTERRUPTED if asked and code == -signal.SIGTERM else code
        except subprocess.TimeoutExpired:
            if SHUTDOWN.is_set() and not asked:
                proc.send_signal(signal.SIGTERM)
                asked = True


__all__ = ["SHUTDOWN", "supervise"]
