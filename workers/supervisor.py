"""Runs a pipeline's Spark driver (`python -m workers.driver run ... --run-id N`) as a
child process of the worker and waits for it: log to `<pipeline dir>/runs/<n>.log`, exit
recorded through `backend.services.lifecycle.run_exited`, restores relaunched in place,
crashes handed to the reaper. The driver dies with the worker (PR_SET_PDEATHSIG), so a
worker that disappears leaves no orphan writing to the storage location; its runs stop
heartbeating and the reaper replaces them.

With `SPINDLE_STANDBY_DRIVERS`, each running pipeline also gets a hot standby driver
(`run --standby`: Spark started and warmed up, waiting on its standard input; see
`workers/standby.py`), spawned once the run is up. The pipeline's next run — a crash's
restart or a restore's relaunch — takes it over with one line on its input instead of
starting Spark, and a new standby is spawned for the run after that. A standby is only used
for the exact command line and spec it was started with; a stop, a failure or a changed spec
retires it (its input is closed: it exits without touching the storage location).

With `SPINDLE_SPARE_DRIVER` (the default), the worker also keeps one spare driver while it
supervises runs (`python -m workers.driver spare`: Spark started and warmed up on a built-in
pipeline), spawned once a run is up. Any pipeline's next run without a standby of its own
takes it over (its `run` arguments on one line), and another spare is spawned once that run
is up; the worker's last run ending retires it."""

from __future__ import annotations

import contextlib
import copy
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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select

from backend.child_processes import die_with_parent
from backend.db import Database
from backend.models import DesiredState, Pipeline, PipelineState, Run, RunState
from backend.services import checkpoints as cps
from backend.services import lifecycle
from backend.services import operations as ops
from backend.services.logs import tail
from backend.services.queue import TaskQueue
from backend.settings import Settings
from pipeline_spec.exits import EXIT_INTERRUPTED
from pipeline_spec.model import resolve_path

log = logging.getLogger("spindle.supervisor")

# Set when the worker shuts down: supervisors ask their drivers to checkpoint and exit.
SHUTDOWN = threading.Event()


@dataclass(frozen=True)
class _Launch:
    """How to start one run's driver."""

    pipeline: str
    driver: list[str]  # the command line without the run's own options
    run: list[str]  # the run's own options: where it starts, which run it is
    spec_text: str
    log_path: str
    from_checkpoint: str
    run_id: int

    @property
    def cmd(self) -> list[str]:
        return [*self.driver, *self.run]

    @property
    def key(self) -> str:
        """What a standby must have been started with to serve this run."""
        return json.dumps([self.driver, self.spec_text])


def _prepare(db: Database, settings: Settings, run_id: int) -> _Launch | None:
    """Write the spec, point the run at its log; how to start its driver, or None if the
    run is no longer waiting to start (a duplicate or stale launch)."""
    with db.session() as s:
        run = s.get(Run, run_id)
        if run is None or run.state != RunState.starting:
            return None
        p = run.pipeline
        pdir = settings.pipeline_dir(p.name)
        (pdir / "runs").mkdir(parents=True, exist_ok=True)
        spec_path = pdir / "spec.json"
        spec_text = json.dumps(_absolute_paths(p.spec, settings.roots), indent=1)
        spec_path.write_text(spec_text)
        log_path = str(pdir / "runs" / f"{run.number}.log")
        lifecycle.run_prepared(run, log_path, socket.gethostname())
        storage = settings.storage_dir(p.name)
        cps.reconcile_dir(s, p.id, storage)  # the manifest wins, before anything changes
        remote = settings.pipeline_store_url(p.name)
        driver = [
            sys.executable,
            "-m",
            "workers.driver",
            "run",
            str(spec_path),
            "--storage",
            str(storage),
            "--base-dir",
            str(settings.roots[0]),
            *(a for r in settings.roots for a in ("--files-root", str(r))),
            "--hang-timeout",
            str(settings.hang_timeout_s),
            *(["--remote", remote] if remote else []),
        ]
        own = ["--from-checkpoint", run.from_checkpoint, "--run-id", str(run.id)]
        return _Launch(p.name, driver, own, spec_text, log_path, run.from_checkpoint, run.id)


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


def _spawn(
    cmd: list[str], settings: Settings, log_path: str, stdin: int
) -> subprocess.Popen[bytes]:
    root = settings.roots[0]
    root.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=stdin,
            cwd=root,
            env=_env(settings),
            # The driver dies with the worker, and runs below the control plane's priority
            # (inherited by Spark's JVM and Python workers), so a pipeline using every core
            # delays the API's answers and the worker's heartbeats by little, and pipelines
            # still get all the CPU nothing else wants.
            preexec_fn=functools.partial(die_with_parent, signal.SIGKILL, settings.driver_nice),
            # Its own process group: signals meant for the worker's group (a terminal's
            # Ctrl-C, a service manager's stop) must not reach Spark's processes; the
            # supervisor stops the driver itself, cleanly.
            start_new_session=True,
        )


@dataclass
class _Standby:
    """A driver started ahead of its run: a pipeline's standby, or the worker's spare."""

    key: str  # what it serves: a standby's launch key, or SPARE
    proc: subprocess.Popen[bytes]
    log_path: str

    @property
    def kind(self) -> str:
        return "spare" if self.key == SPARE else "standby"


SPARE = "spare"

# Standbys and spares are spawned from one long-lived thread: a driver's parent-death signal
# follows the thread that started it, and they outlive the tasks that ask for them.
_SPAWNER = ThreadPoolExecutor(1, thread_name_prefix="spindle-standby")


def _spawn_ahead(cmd: list[str], settings: Settings, log_path: str) -> subprocess.Popen[bytes]:
    return _SPAWNER.submit(_spawn, cmd, settings, log_path, subprocess.PIPE).result()


def _hand_over(sb: _Standby, launch: _Launch, line: dict[str, Any]) -> bool:
    """Make `sb`'s log the run's and tell it to take over with `line` (False, and `sb`
    retired, if it died meanwhile)."""
    try:
        os.replace(sb.log_path, launch.log_path)  # open file: the driver writes on
        sb.log_path = launch.log_path
    except OSError:
        log.warning("%s: the driver's log stays at %s", launch.pipeline, sb.log_path)
    assert sb.proc.stdin is not None
    try:
        sb.proc.stdin.write((json.dumps(line) + "\n").encode())
        sb.proc.stdin.close()
    except OSError:  # it died just now
        _retire(sb)
        return False
    return True


def _retire(sb: _Standby) -> None:
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
            log.warning("standby pid %s ended with %s; log: %s", sb.proc.pid, code, sb.log_path)

    threading.Thread(target=_reap, name="spindle-standby-reaper", daemon=True).start()


class Standbys:
    """The worker's hot standby drivers, at most one per pipeline (see the module's doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_pipeline: dict[str, _Standby] = {}

    def ensure(self, launch: _Launch, settings: Settings, db: Database) -> None:
        """A standby for the run after `launch`'s, unless one for the same key is alive."""
        with self._lock:
            have = self._by_pipeline.get(launch.pipeline)
            if have is not None and have.key == launch.key and have.proc.poll() is None:
                return
            if have is not None:
                _retire(self._by_pipeline.pop(launch.pipeline))
            log_path = str(Path(launch.log_path).with_name(f"standby-{time.time_ns()}.log"))
            proc = _spawn_ahead([*launch.driver, "--standby"], settings, log_path)
            sb = _Standby(launch.key, proc, log_path)
            self._by_pipeline[launch.pipeline] = sb
        log.info("%s: standby driver pid %s", launch.pipeline, proc.pid)
        threading.Thread(
            target=self._watch,
            args=(launch.pipeline, sb, db, settings.heartbeat_s * WATCH_BEATS),
            name="spindle-standby-watch",
            daemon=True,
        ).start()

    def _watch(self, pipeline: str, sb: _Standby, db: Database, every_s: float) -> None:
        """Retire `sb` once its pipeline is not meant to run any more while no run took it
        over: stopped while restarting, or given up by the reaper after max_restarts (no
        launch will come to take it or retire it)."""
        while sb.proc.poll() is None:
            time.sleep(every_s)
            with self._lock:
                if self._by_pipeline.get(pipeline) is not sb:
                    return  # taken over or retired
            try:
                with db.session() as s:
                    desired = s.scalar(
                        select(Pipeline.desired_state).where(Pipeline.name == pipeline)
                    )
            except Exception:  # the database may be briefly unavailable
                log.exception("standby watch")
                continue
            if desired is None or desired == DesiredState.stopped:
                with self._lock:
                    if self._by_pipeline.get(pipeline) is not sb:
                        return
                    del self._by_pipeline[pipeline]
                log.info("%s: not meant to run any more; retiring its standby", pipeline)
                _retire(sb)
                return

    def take(self, launch: _Launch) -> _Standby | None:
        """Hand `launch`'s run to the pipeline's standby: its log becomes the run's and it is
        told to take over. None if there is none for this key (the stale one is retired)."""
        with self._lock:
            sb = self._by_pipeline.pop(launch.pipeline, None)
        if sb is None:
            return None
        if sb.key != launch.key or sb.proc.poll() is not None:
            _retire(sb)
            return None
        line = {"from_checkpoint": launch.from_checkpoint, "run_id": launch.run_id}
        return sb if _hand_over(sb, launch, line) else None

    def pid(self, pipeline: str) -> int | None:
        """The process id of the pipeline's standby, if it has one."""
        with self._lock:
            sb = self._by_pipeline.get(pipeline)
        return sb.proc.pid if sb is not None else None

    def discard(self, pipeline: str) -> None:
        with self._lock:
            sb = self._by_pipeline.pop(pipeline, None)
        if sb is not None:
            _retire(sb)

    def discard_all(self) -> None:
        with self._lock:
            gone, self._by_pipeline = list(self._by_pipeline.values()), {}
        for sb in gone:
            _retire(sb)


class Spares:
    """The worker's spare driver (`python -m workers.driver spare`, workers/standby.py): at
    most one, kept while the worker supervises runs (SPINDLE_SPARE_DRIVER). Any pipeline's
    next driver (a start, a crash's restart, a restore's relaunch) takes it over, unless the
    pipeline has a standby of its own; another is spawned once that run is up. Retired when
    the worker's last run ends: an idle worker keeps no JVM."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spare: _Standby | None = None
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
            proc = _spawn_ahead([*_DRIVER, "spare"], settings, log_path)
            self._spare = _Standby(SPARE, proc, log_path)
        log.info("spare driver pid %s", proc.pid)

    def take(self, launch: _Launch) -> _Standby | None:
        """Hand `launch`'s run to the spare: its log becomes the run's and it is told the
        run's arguments. None if there is no live spare."""
        with self._lock:
            sb, self._spare = self._spare, None
        if sb is None:
            return None
        if launch.cmd[: len(_DRIVER) + 1] != [*_DRIVER, "run"] or sb.proc.poll() is not None:
            _retire(sb)
            return None
        return sb if _hand_over(sb, launch, {"argv": launch.cmd[len(_DRIVER) + 1 :]}) else None

    def pid(self) -> int | None:
        with self._lock:
            return self._spare.proc.pid if self._spare is not None else None

    def discard_all(self) -> None:
        with self._lock:
            sb, self._spare = self._spare, None
        if sb is not None:
            _retire(sb)


RETIRE_TIMEOUT_S = 180.0  # a retired standby still warming up is killed after this long
WATCH_BEATS = 5  # a standby's pipeline is checked every this many heartbeat intervals
STANDBYS = Standbys()
SPARES = Spares()
_DRIVER = [sys.executable, "-m", "workers.driver"]


def supervise(db: Database, settings: Settings, queue: TaskQueue, run_id: int) -> None:
    """Run the driver of `run_id` until it exits, then any relaunch (restore) it asks for."""
    with SPARES.supervising():
        _supervise(db, settings, queue, run_id)


def _supervise(db: Database, settings: Settings, queue: TaskQueue, run_id: int) -> None:
    next_run: int | None = run_id
    while next_run is not None:
        run_id, next_run = next_run, None
        launch = _prepare(db, settings, run_id)
        if launch is None:
            log.info("run %s is not starting; launch ignored", run_id)
            return
        standby = STANDBYS.take(launch) or SPARES.take(launch)
        if standby is not None:
            proc = standby.proc
            log.info("run %s: taken over by %s driver pid %s", run_id, standby.kind, proc.pid)
        else:
            proc = _spawn(launch.cmd, settings, launch.log_path, subprocess.DEVNULL)
            log.info("run %s: driver pid %s", run_id, proc.pid)
        with db.session() as s:
            run = s.get(Run, run_id)
            assert run is not None
            log_path = launch.log_path if standby is None else standby.log_path
            lifecycle.driver_launched(run, proc.pid, log_path)
        beat = functools.partial(_starting_heartbeat, db, run_id)
        up = functools.partial(_ahead, launch, settings, db)
        code = _wait(proc, beat, settings.heartbeat_s, up)
        with db.session() as s:
            run = s.get(Run, run_id)
            assert run is not None
            outcome = lifecycle.run_exited(s, run, code, tail(log_path))
            log.info("run %s: %s", run_id, run.exit_reason)
            leftover = [] if outcome.relaunch else ops.pending_ids(s, run.pipeline_id)
            if outcome.relaunch is not None:
                next_run = outcome.relaunch.id
            delay = lifecycle.restart_delay_s(settings, run) if outcome.restart_due else 0.0
        if outcome.relaunch is None and not outcome.restart_due:
            STANDBYS.discard(launch.pipeline)  # no next run to serve
        for op_id in leftover:  # commands that arrived as the run ended
            queue.execute(op_id)
        if outcome.restart_due:
            next_run = _restart(db, settings, queue, launch.pipeline, delay)


def _ahead(launch: _Launch, settings: Settings, db: Database) -> None:
    """Once a run is up: the drivers that the next runs will take over, as configured."""
    if settings.standby_drivers:
        STANDBYS.ensure(launch, settings, db)
    if settings.spare_driver:
        SPARES.ensure(settings)


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


def _starting_heartbeat(db: Database, run_id: int) -> bool:
    """`lifecycle.vouch_starting`: True while the run is starting."""
    with db.session() as s:
        return lifecycle.vouch_starting(s, run_id)


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


__all__ = ["SHUTDOWN", "SPARES", "STANDBYS", "Spares", "Standbys", "reap", "supervise"]
