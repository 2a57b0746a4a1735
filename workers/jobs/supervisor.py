"""Runs a pipeline's Spark driver (`python -m workers.jobs.driver run ... --run-id N`, started as
`launch.py` says) as a child process of the worker and waits for it: log to `<pipeline
dir>/runs/<n>.log`, exit recorded through `backend.services.lifecycle.run_exited`, restores
relaunched in place, crashes handed to the reaper. The driver dies with the worker
(PR_SET_PDEATHSIG), so a worker that disappears leaves no orphan writing to the storage
location; its runs stop heartbeating and the reaper replaces them.

With `SPINDLE_SPARE_DRIVER` (the default), a run's driver is the worker's spare when there is
one (`spares.py`: Spark already started and warmed up), and a new spare is spawned once the
run is up."""

from __future__ import annotations

import functools
import logging
import signal
import subprocess
import threading
import time
from collections.abc import Callable

from sqlalchemy import select

from backend.db import Database
from backend.models import Pipeline, PipelineState, Run
from backend.services import checkpoints as cps
from backend.services import lifecycle
from backend.services import operations as ops
from backend.services.logs import tail
from backend.services.queue import TaskQueue
from backend.settings import Settings
from pipeline_spec.exits import EXIT_INTERRUPTED

from .launch import prepare, spawn
from .spares import SPARES

log = logging.getLogger("spindle.supervisor")

# Set when the worker shuts down: supervisors ask their drivers to checkpoint and exit.
SHUTDOWN = threading.Event()


def supervise(db: Database, settings: Settings, queue: TaskQueue, run_id: int) -> None:
    """Run the driver of `run_id` until it exits, then any relaunch (restore) it asks for."""
    with SPARES.supervising():
        _supervise(db, settings, queue, run_id)


def _supervise(db: Database, settings: Settings, queue: TaskQueue, run_id: int) -> None:
    next_run: int | None = run_id
    while next_run is not None:
        run_id, next_run = next_run, None
        launch = prepare(db, settings, run_id)
        if launch is None:
            log.info("run %s is not starting; launch ignored", run_id)
            return
        spare = SPARES.take(launch)
        if spare is not None:
            proc = spare.proc
            log.info("run %s: taken over by spare driver pid %s", run_id, proc.pid)
        else:
            proc = spawn(launch.cmd, settings, launch.log_path, subprocess.DEVNULL, launch.env)
            log.info("run %s: driver pid %s", run_id, proc.pid)
        with db.session() as s:
            run = s.get(Run, run_id)
            assert run is not None
            log_path = launch.log_path if spare is None else spare.log_path
            lifecycle.driver_launched(run, proc.pid, log_path)
        beat = functools.partial(_starting_heartbeat, db, run_id, proc.pid)
        up = functools.partial(SPARES.ensure, settings) if settings.spare_driver else None
        code = _wait(proc, beat, settings.heartbeat_s, up)
        with db.session() as s:
            run = s.get(Run, run_id)
            if run is None or run.pid != proc.pid:
                # The pipeline was deleted while this driver still ran (its run given up
                # for lost, the pipeline then stopped): the id may be another run's now.
                log.warning("run %s: driver pid %s exited (%s); the run is gone", run_id,
                            proc.pid, code)  # fmt: skip
                return
            outcome = lifecycle.run_exited(s, run, code, tail(log_path))
            log.info("run %s: %s", run_id, run.exit_reason)
            leftover = [] if outcome.relaunch else ops.pending_ids(s, run.pipeline_id)
            if outcome.relaunch is not None:
                next_run = outcome.relaunch.id
            delay = lifecycle.restart_delay_s(settings, run) if outcome.restart_due else 0.0
        for op_id in leftover:  # commands that arrived as the run ended
            queue.execute(op_id)
        if outcome.restart_due:
            next_run = _restart(db, settings, queue, launch.pipeline, delay)


def _restart(
    db: Database, settings: Settings, queue: TaskQueue, pipeline: str, delay_s: float
) -> int | None:
    """After a crash: once the restart policy's backoff has passed, the reaper's work, done
    here; the pipeline's new run is returned for this thread to supervise (others are
    queued). Through the queue it took a task with a countdown, then a launch task: two
    broker deliveries (each up to a second with the embedded broker, which polls). If the
    worker shuts down meanwhile, or this fails, the periodic reap restarts the pipeline."""
    if SHUTDOWN.wait(delay_s):
        return None
    try:
        return reap(db, settings, queue, supervise=pipeline)
    except Exception:  # e.g. the database briefly unavailable: the periodic reap will do
        log.exception("restarting pipeline %s", pipeline)
        return None


def reap(
    db: Database, settings: Settings, queue: TaskQueue, supervise: str | None = None
) -> int | None:
    """Mark runs without heartbeats lost and launch the replacements of dead runs that the
    restart policy allows now (`lifecycle.reap`), after reconciling crashed pipelines'
    checkpoint lists with their manifests. The replacement run of pipeline `supervise`, if
    any, is returned instead of launched: its caller supervises it."""
    mine = None
    with db.session() as s:
        runs = lifecycle.reap(s, settings)
        ids = [(r.id, r.pipeline.name) for r in runs]
        # After a crash the manifest may hold checkpoints the dead run never mirrored (or
        # have lost some it did): the manifest wins. (Stopped pipelines are reconciled when
        # read, and every run reconciles as it starts.)
        after_crash = (PipelineState.restarting, PipelineState.failed)
        for p in s.scalars(select(Pipeline).where(Pipeline.state.in_(after_crash))):
            if lifecycle.live_run(s, p) is None:
                cps.reconcile_dir(s, p.id, settings.storage_dir(p.name))
    for run_id, name in ids:
        if name == supervise and mine is None:
            log.info("restarting %s: run %s", name, run_id)
            mine = run_id
        else:
            log.info("restarting %s: launching run %s", name, run_id)
            queue.launch(run_id)
    return mine


def _starting_heartbeat(db: Database, run_id: int, pid: int) -> bool:
    """`lifecycle.vouch_starting`: True while the run (driven by `pid`) is starting."""
    with db.session() as s:
        return lifecycle.vouch_starting(s, run_id, pid)


def _wait(
    proc: subprocess.Popen[bytes],
    beat: Callable[[], bool],
    every_s: float,
    up: Callable[[], None] | None = None,
) -> int:
    """The driver's exit code; `beat` every `every_s` (True while the run is starting), and
    `up` once when it no longer is."""
    asked = False
    last = 0.0
    while True:
        now = time.monotonic()
        if now - last >= every_s:
            try:
                if not beat() and up is not None and proc.poll() is None:
                    call: Callable[[], None] = up
                    up = None
                    call()
            except Exception:  # the database may be briefly unavailable
                log.exception("heartbeat")
            last = now
        try:
            code = proc.wait(timeout=min(every_s, 0.5))
            # Asked to stop for a shutdown before it could install its handler: the same.
            return EXIT_INTERRUPTED if asked and code == -signal.SIGTERM else code
        except subprocess.TimeoutExpired:
            if SHUTDOWN.is_set() and not asked:
                proc.send_signal(signal.SIGTERM)
                asked = True


__all__ = ["SHUTDOWN", "reap", "supervise"]
