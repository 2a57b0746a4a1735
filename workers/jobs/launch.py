"""How one run's driver process starts: the spec written beside the run's log, the command
line (`python -m workers.jobs.driver run ...`), its environment (with the API's URL, the run's
token: the driver then reaches the control plane over the REST API), and the process itself
(dies with the worker, below the control plane's CPU priority, in a process group of its
own)."""

from __future__ import annotations

import copy
import functools
import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.child_processes import die_with_parent
from backend.db import Database
from backend.models import Run, RunState
from backend.services import checkpoints as cps
from backend.services import lifecycle
from backend.settings import Settings
from pipeline_spec.model import SpecError, is_object_path, parse_spec, resolve_path
from pipeline_spec.spark_conf import ENV as SPARK_CONF_ENV
from workers.runtime.control_rest import API_URL_ENV, RUN_TOKEN_ENV

DRIVER = [sys.executable, "-m", "workers.jobs.driver"]


@dataclass(frozen=True)
class Launch:
    """How to start one run's driver."""

    pipeline: str
    driver: list[str]  # the command line without the run's own options
    run: list[str]  # the run's own options: where it starts, which run it is
    spec_text: str
    log_path: str
    from_checkpoint: str
    run_id: int
    env: dict[str, str] = field(default_factory=dict)  # the run's own environment

    @property
    def cmd(self) -> list[str]:
        return [*self.driver, *self.run]


def prepare(db: Database, settings: Settings, run_id: int) -> Launch | None:
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
        token = lifecycle.run_prepared(s, run, log_path, socket.gethostname())
        storage = settings.storage_dir(p.name)
        cps.reconcile_dir(s, p.id, storage)  # the manifest wins, before anything changes
        remote = settings.pipeline_store_url(p.name)
        driver = [
            *DRIVER,
            "run",
            str(spec_path),
            "--storage",
            str(storage),
            "--base-dir",
            str(settings.roots[0]),
            *(a for r in settings.roots for a in ("--files-root", str(r))),
            *(a for r in settings.object_roots for a in ("--object-root", r)),
            "--hang-timeout",
            str(settings.hang_timeout_s),
            "--control-poll-s",
            str(settings.operation_poll_s),
            "--heartbeat-s",
            str(settings.heartbeat_s),
            *(["--remote", remote] if remote else []),
        ]
        own = ["--from-checkpoint", run.from_checkpoint, "--run-id", str(run.id)]
        own += [a for op in run.drop_state or [] for a in ("--drop-state", op)]
        env = {API_URL_ENV: settings.api_url, RUN_TOKEN_ENV: token} if settings.api_url else {}
        return Launch(p.name, driver, own, spec_text, log_path, run.from_checkpoint, run.id, env)


def _absolute_paths(spec: dict[str, Any], roots: list[Path]) -> dict[str, Any]:
    """The spec with its file paths resolved against the file roots (as validated), so the
    driver and Spark's Python workers agree whatever their working directory. A spec that
    does not validate is left as it is: the driver names its errors."""
    try:
        paths = parse_spec(spec).file_paths()
    except SpecError:
        return spec
    out = copy.deepcopy(spec)
    for loc, _, path in paths:
        resolved = None if is_object_path(path) else resolve_path(path, roots)
        if resolved is not None:
            part: Any = out
            for key in loc:  # the part where the spec gives it
                part = part[key]
            part["path"] = str(resolved)
    return out


def _env(settings: Settings, run_env: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    # A run's token is its own: never inherited by another driver (a spare).
    env.pop(RUN_TOKEN_ENV, None)
    env["SPINDLE_DATABASE_URL"] = settings.db_url
    env["SPINDLE_DATA_DIR"] = str(settings.data_path)
    env["SPINDLE_SPARK_MASTER"] = settings.spark_master
    env[SPARK_CONF_ENV] = json.dumps(settings.spark_conf)
    env["PYTHONUNBUFFERED"] = "1"
    if settings.api_url:
        env[API_URL_ENV] = settings.api_url
    return env | run_env


def spawn(
    cmd: list[str],
    settings: Settings,
    log_path: str,
    stdin: int,
    run_env: dict[str, str] | None = None,
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
            env=_env(settings, run_env or {}),
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


__all__ = ["DRIVER", "Launch", "prepare", "spawn"]
