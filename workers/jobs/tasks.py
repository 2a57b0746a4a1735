"""Celery tasks: thin, explicitly named, taking ids (JSON) and handing off to the
supervisor, the offline commands and the lifecycle service. Each task opens the database
from the worker's settings."""

from __future__ import annotations

import logging
from functools import cache
from typing import Any

from celery import Celery
from celery.signals import worker_shutting_down

from backend.db import Database
from backend.services import metrics as metric_history
from backend.settings import Settings

from . import offline, supervisor
from .celery_app import app
from .spares import SPARES

log = logging.getLogger("spindle.tasks")

LAUNCH = "spindle.launch"
EXECUTE = "spindle.execute_operation"
REAP = "spindle.reap"
RETENTION = "spindle.enforce_retention"
DOWNSAMPLE = "spindle.downsample_metrics"


class CeleryQueue:
    """`backend.services.queue.TaskQueue` over a Celery app (by task name: no import of the
    task functions needed by the sender)."""

    def __init__(self, celery: Celery) -> None:
        self.celery = celery

    def launch(self, run_id: int) -> None:
        self.celery.send_task(LAUNCH, kwargs={"run_id": int(run_id)})

    def execute(self, operation_id: str) -> None:
        self.celery.send_task(EXECUTE, kwargs={"operation_id": str(operation_id)})

    def ready(self) -> str:
        try:
            with self.celery.connection_for_write() as conn:
                conn.ensure_connection(max_retries=1, timeout=2)
            return "ok"
        except Exception as e:  # any broker failure means not ready
            return f"error: {type(e).__name__}"


@cache
def _context() -> tuple[Settings, Database, CeleryQueue]:
    settings = Settings()
    return settings, Database(settings.db_url), CeleryQueue(app)


@worker_shutting_down.connect
def _on_shutdown(**_: Any) -> None:
    supervisor.SHUTDOWN.set()
    SPARES.discard_all()


@app.task(name=LAUNCH)
def launch(run_id: int) -> None:
    settings, db, queue = _context()
    supervisor.supervise(db, settings, queue, int(run_id))


@app.task(name=EXECUTE)
def execute_operation(operation_id: str) -> None:
    settings, db, _ = _context()
    offline.execute(db, settings, str(operation_id))


@app.task(name=REAP)
def reap() -> None:
    settings, db, queue = _context()
    supervisor.reap(db, settings, queue)


@app.task(name=RETENTION)
def enforce_retention() -> None:
    settings, db, queue = _context()
    offline.enforce_retention(db, settings, queue)


@app.task(name=DOWNSAMPLE)
def downsample_metrics() -> None:
    settings, db, _ = _context()
    with db.session() as s:
        metric_history.downsample(s, settings)


__all__ = [
    "CeleryQueue",
    "downsample_metrics",
    "enforce_retention",
    "execute_operation",
    "launch",
    "reap",
]
