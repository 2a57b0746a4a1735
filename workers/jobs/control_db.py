"""The driver's control plane over the control plane's database (`control_plane.ControlPlane`),
for a driver that reaches the database but not the API: it passes the same documents the
REST API takes (`control_plane`'s) through the API's own models and services
(`backend.schemas.runs`, `backend.services.run_control`), one transaction each.

A jobs module, not the runtime's: the runtime imports no `backend`, and is given this plane
by the jobs' entry point (`workers.jobs.driver`; tests/test_architecture.py).
"""

from __future__ import annotations

import os

from backend.db import Database
from backend.models import Run
from backend.schemas.runs import FinishIn, OpenedIn, ReportIn
from backend.services import run_control
from backend.settings import Settings
from workers.runtime import control_plane as cp
from workers.runtime.control_plane import Claimed, Desired, Finished, Opened, Report


class DatabaseControlPlane:
    """`ControlPlane` over the database, as run `run_id`."""

    def __init__(self, db: Database, run_id: int) -> None:
        self.db = db
        self.run_id = run_id
        # The driver's process, as its supervisor recorded it: a run row whose pid is
        # another's is not this driver's any more (its pipeline was deleted, the id reused).
        self.pid = os.getpid()
        with db.session() as s:
            run = s.get(Run, run_id)
            if run is None:
                raise LookupError(f"no run {run_id}")
            self.pipeline_id = run.pipeline_id

    def opened(self, run: Opened) -> Desired:
        body = OpenedIn.model_validate(cp.opened_doc(run, self.pid))
        with self.db.session() as s:
            return cp.desired_from(run_control.opened(s, self.run_id, body).model_dump())

    def report(self, report: Report) -> Desired:
        body = ReportIn.model_validate(cp.report_doc(report, self.pid))
        with self.db.session() as s:
            return cp.desired_from(run_control.report(s, self.run_id, body).model_dump())

    def claim(self) -> list[Claimed]:
        with self.db.session() as s:
            return cp.claimed_from([c.model_dump() for c in run_control.claim(s, self.run_id)])

    def finish(self, op_id: str, done: Finished) -> None:
        body = FinishIn.model_validate(cp.finished_doc(done))
        with self.db.session() as s:
            run_control.finish(s, self.run_id, op_id, body)


def from_env(run_id: int) -> DatabaseControlPlane:
    """The database's control plane of run `run_id` (the database from SPINDLE_*)."""
    return DatabaseControlPlane(Database(Settings().db_url), run_id)


__all__ = ["DatabaseControlPlane", "from_env"]
