"""The one interface between a running driver and the control plane (`ControlPlane`), and
its implementation over the database (`DatabaseControlPlane`).

A driver's control loop (`workers.control.JobControl`) reports its run's state and steps,
follows the pipeline's desired state, and claims and finishes operations only through it;
the state changes it causes go through `lifecycle`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import or_, select, update

from storage_engine.manifest import CheckpointInfo

from ..db import Database
from ..models import (
    DesiredState,
    MetricSample,
    Operation,
    OperationKind,
    OperationStatus,
    Pipeline,
    Run,
    utcnow,
)
from . import checkpoints as cps
from . import lifecycle, metrics
from . import operations as ops

_METRIC_FIELDS = {c.name for c in MetricSample.__table__.columns} - {
    "id",
    "pipeline_id",
    "run_id",
    "resolution_s",
}

# Durability events that leave the pipeline in trouble (`workers.durability`).
_PROBLEMS = ("commit_failed", "upload_failed", "remote_unavailable", "fenced")


@dataclass(frozen=True)
class Checkpoints:
    """The storage location's checkpoints as the driver sees them, for the mirror:
    `listed` oldest first, `metadata(uuid)`, and the uuids the object store holds (None
    without an object store)."""

    listed: Sequence[CheckpointInfo]
    metadata: Callable[[str], dict[str, Any]]
    remote: set[str] | None


@dataclass(frozen=True)
class Skipped:
    """A checkpoint the run's restore skipped (corrupt, `on_corruption: fallback`)."""

    uuid: str
    reason: str


@dataclass(frozen=True)
class Report:
    """What the driver tells at each poll: the run's step now, the records of the steps
    since the last poll, its durability events (`workers.durability`), and whether its
    heartbeat is due."""

    step: int
    samples: Sequence[dict[str, Any]] = ()
    events: Sequence[dict[str, Any]] = ()
    heartbeat: bool = True


@dataclass(frozen=True)
class Desired:
    """What the pipeline asks of its run: `exit` (stop now: the pipeline is gone, or stopped
    with no stop operation pending to do it), `paused` (None: as it is, while a stop is
    pending), and the retention policy's automatic commit interval (`auto_commit_s`, None:
    off; only if `has_policy`)."""

    exit: bool = False
    paused: bool | None = None
    has_policy: bool = False
    auto_commit_s: float | None = None


@dataclass(frozen=True)
class Claimed:
    """An operation the run now performs; `pinned`: the pipeline's pinned checkpoints."""

    id: str
    kind: OperationKind
    params: dict[str, Any] = field(default_factory=dict)
    pinned: frozenset[str] = frozenset()


class ControlPlane(Protocol):
    """A running driver's view of the control plane."""

    def opened(
        self, step: int, restored: str | None, skipped: Sequence[Skipped], cp: Checkpoints
    ) -> Desired:
        """The run restored its state at `step` and is about to process."""
        ...

    def poll(self, report: Report) -> Desired:
        """Report the run's progress; what the pipeline asks of it now."""
        ...

    def claim(self) -> list[Claimed]:
        """Take the pipeline's pending operations, oldest first."""
        ...

    def finish(self, op_id: str, result: dict[str, Any] | None, error: str | None) -> None:
        """An operation ended: its result, or its error (neither: a restore, which the run
        opening its checkpoint completes)."""
        ...

    def mirror(self, cp: Checkpoints) -> None:
        """The storage location's checkpoints changed: mirror them."""
        ...


class DatabaseControlPlane:
    """`ControlPlane` over the control plane's database."""

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

    def opened(
        self, step: int, restored: str | None, skipped: Sequence[Skipped], cp: Checkpoints
    ) -> Desired:
        with self.db.session() as s:
            run = s.get(Run, self.run_id)
            assert run is not None
            lifecycle.run_opened(s, run, step, restored, os.getpid())
            self._mirror(s, cp)
            # A restore that asked for this run is done once its checkpoint is live.
            for op in s.scalars(
                select(Operation).where(
                    Operation.pipeline_id == self.pipeline_id,
                    Operation.kind == OperationKind.restore,
                    Operation.status == OperationStatus.running,
                )
            ):
                if restored == op.params.get("checkpoint"):
                    ops.succeed(op, {"checkpoint": restored, "step": step})
                elif skipped and skipped[0].uuid == op.params.get("checkpoint"):
                    ops.fail(
                        op,
                        f"checkpoint {skipped[0].uuid} is corrupt ({skipped[0].reason}); "
                        f"restored {restored} instead (checkpoint.on_corruption: fallback)",
                    )
                elif op.started_at is not None and run.created_at > op.started_at:
                    # Started after the restore was asked for, from another checkpoint: no
                    # run will open the one it names now.
                    ops.fail(op, f"superseded: run {run.number} started from {restored}")
            return self._desired(s)

    def poll(self, report: Report) -> Desired:
        with self.db.session() as s:
            self._record(s, report.samples, report.events)
            if report.heartbeat:
                s.execute(
                    update(Run)
                    .where(Run.id == self.run_id, or_(Run.pid == self.pid, Run.pid.is_(None)))
                    .values(heartbeat_at=utcnow(), last_step=report.step)
                )
            return self._desired(s)

    def claim(self) -> list[Claimed]:
        with self.db.session() as s:
            claimed = ops.claim(s, self.pipeline_id)
            if not claimed:
                return []
            pinned = frozenset(cps.pinned(s, self.pipeline_id))
            return [Claimed(op.id, op.kind, dict(op.params), pinned) for op in claimed]

    def finish(self, op_id: str, result: dict[str, Any] | None, error: str | None) -> None:
        with self.db.session() as s:
            op = s.get(Operation, op_id)
            assert op is not None
            if error is not None:
                ops.fail(op, error)
            elif result is not None:
                ops.succeed(op, result)

    def mirror(self, cp: Checkpoints) -> None:
        with self.db.session() as s:
            self._mirror(s, cp)

    def _mirror(self, s: Any, cp: Checkpoints) -> None:
        cps.reconcile(s, self.pipeline_id, cp.listed, cp.metadata, cp.remote)

    def _desired(self, s: Any) -> Desired:
        run = s.get(Run, self.run_id)
        p = s.get(Pipeline, self.pipeline_id)
        if p is None or run is None or run.pipeline_id != p.id or run.pid not in (None, self.pid):
            return Desired(exit=True)  # the pipeline, or this run, was deleted
        policy = p.retention
        interval = policy.auto_commit_interval_s if policy is not None else None
        if p.desired_state == DesiredState.stopped:
            # A stop operation, if any, is claimed and performed by the driver first.
            gone = not ops.pending_ids(s, self.pipeline_id)
            return Desired(exit=gone, has_policy=policy is not None, auto_commit_s=interval)
        paused = p.desired_state == DesiredState.paused
        lifecycle.run_follows(s.get(Run, self.run_id), paused)
        return Desired(paused=paused, has_policy=policy is not None, auto_commit_s=interval)

    def _record(
        self, s: Any, samples: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]]
    ) -> None:
        """The steps' metric records, and the durability events: counted, and the newest
        problem shown on the pipeline until a checkpoint is durable again."""
        rows = [
            MetricSample(
                pipeline_id=self.pipeline_id,
                run_id=self.run_id,
                resolution_s=0,
                **{k: v for k, v in rec.items() if k in _METRIC_FIELDS},
            )
            for rec in samples
        ]
        if rows:
            s.add_all(rows)
            metrics.add_totals(
                s,
                self.pipeline_id,
                steps=len(rows),
                rows_in=sum(r.rows_in or 0 for r in rows),
                rows_out=sum(r.rows_out or 0 for r in rows),
                dead_letters=sum(r.dead_letters or 0 for r in rows),
                late_rows=sum(r.late_rows or 0 for r in rows),
            )
        if not events:
            return
        kinds = [e["event"] for e in events]
        metrics.add_totals(
            s,
            self.pipeline_id,
            commit_failures=kinds.count("commit_failed"),
            upload_failures=kinds.count("upload_failed"),
            fencings=kinds.count("fenced"),
        )
        p = s.get(Pipeline, self.pipeline_id)
        if p is None:
            return
        for e in events:
            if e["event"] in ("durable", "remote_available"):
                p.durability_error = p.durability_error_at = None
            elif e["event"] in _PROBLEMS:
                p.durability_error = str(e.get("message", e["event"]))[:2000]
                p.durability_error_at = utcnow()


__all__ = [
    "Checkpoints",
    "Claimed",
    "ControlPlane",
    "DatabaseControlPlane",
    "Desired",
    "Report",
    "Skipped",
]
