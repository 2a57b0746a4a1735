"""What a running driver asks of the control plane, over a session: the run opened, a
report of its steps, claiming and finishing its pipeline's operations (the driver's side is
`workers.runtime.control_plane`). The REST API's run endpoints (`api/routers/runs.py`) and the
database's implementation of the driver's control plane (`workers.jobs.control_db`) both call
these, with the same documents (`schemas.runs`). Run and pipeline state changes go through
`lifecycle`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from pipeline_spec.offsets import OFFSETS, ONE_SOURCE
from storage_engine.manifest import CheckpointInfo

from ..errors import NotFound
from ..models import (
    DesiredState,
    MetricSample,
    Operation,
    OperationKind,
    OperationStatus,
    Pipeline,
    Run,
)
from ..schemas.runs import (
    CheckpointsIn,
    ClaimedOut,
    DesiredOut,
    EventIn,
    FinishIn,
    OpenedIn,
    ReportIn,
    SampleIn,
)
from . import checkpoints as cps
from . import lifecycle, metrics
from . import operations as ops

# A checkpoint's offsets as a driver reports them: every table's, or (a driver of the
# previous release mirroring a checkpoint of a one-source release) the first table's only.
_OFFSETS = (OFFSETS, ONE_SOURCE)


def opened(s: Session, run_id: int, body: OpenedIn) -> DesiredOut:
    """The run (its driver, process `body.pid`) restored its state and is about to
    process; a restore that asked for this run is done once its checkpoint is live."""
    run = s.get(Run, run_id)
    if run is None:
        return DesiredOut(exit=True)
    restored, skipped = body.restored, body.skipped
    lifecycle.run_opened(s, run, body.step, restored, body.pid)
    run.views_url = body.views.url if body.views else None
    run.views_secret = body.views.secret if body.views else None
    _mirror(s, run.pipeline_id, body.checkpoints)
    for op in s.scalars(
        select(Operation).where(
            Operation.pipeline_id == run.pipeline_id,
            Operation.kind == OperationKind.restore,
            Operation.status == OperationStatus.running,
        )
    ):
        if restored == op.params.get("checkpoint"):
            ops.succeed(op, {"checkpoint": restored, "step": body.step})
        elif skipped and skipped[0].uuid == op.params.get("checkpoint"):
            ops.fail(
                op,
                f"checkpoint {skipped[0].uuid} is corrupt ({skipped[0].reason}); "
                f"restored {restored} instead (checkpoint.on_corruption: fallback)",
            )
        elif op.started_at is not None and run.created_at > op.started_at:
            # Started after the restore was asked for, from another checkpoint: no run
            # will open the one it names now.
            ops.fail(op, f"superseded: run {run.number} started from {restored}")
    return _desired(s, run_id, body.pid)


def report(s: Session, run_id: int, body: ReportIn) -> DesiredOut:
    """The run's progress; what its pipeline asks of it now."""
    run = s.get(Run, run_id)
    if run is None:
        return DesiredOut(exit=True)
    _record(s, run, body.samples, body.events)
    if body.heartbeat:
        lifecycle.run_heartbeat(s, run_id, body.pid, body.step)
    if body.checkpoints is not None:
        _mirror(s, run.pipeline_id, body.checkpoints)
    return _desired(s, run_id, body.pid)


def claim(s: Session, run_id: int) -> list[ClaimedOut]:
    """The run's pipeline's pending operations, now the run's, oldest first."""
    run = s.get(Run, run_id)
    if run is None:
        return []
    claimed = ops.claim(s, run.pipeline_id)
    if not claimed:
        return []
    pinned = sorted(cps.pinned(s, run.pipeline_id))
    return [
        ClaimedOut(id=o.id, kind=o.kind.value, params=dict(o.params), pinned=pinned)
        for o in claimed
    ]


def finish(s: Session, run_id: int, op_id: str, body: FinishIn) -> None:
    """An operation the run performed ended: its result or error, and the checkpoints
    after it."""
    run = s.get(Run, run_id)
    op = s.get(Operation, op_id)
    if run is None or op is None or op.pipeline_id != run.pipeline_id:
        raise NotFound(f"no operation {op_id} of this run's pipeline")
    _mirror(s, run.pipeline_id, body.checkpoints)
    if body.error is not None:
        ops.fail(op, body.error)
    elif body.result is not None:
        ops.succeed(op, body.result)


def _mirror(s: Session, pipeline_id: int, cp: CheckpointsIn) -> None:
    infos = [CheckpointInfo.from_json(c.model_dump()) for c in cp.listed]
    offsets = {c.uuid: c.model_dump(include=set(_OFFSETS), exclude_none=True) for c in cp.listed}

    def metadata(uid: str) -> dict[str, Any]:
        return offsets.get(uid, {})

    remote = None if cp.remote is None else set(cp.remote)
    cps.reconcile(s, pipeline_id, infos, metadata, remote)


def _desired(s: Session, run_id: int, pid: int) -> DesiredOut:
    run = s.get(Run, run_id)
    p = s.get(Pipeline, run.pipeline_id) if run is not None else None
    if p is None or run is None or run.pid not in (None, pid):
        return DesiredOut(exit=True)  # the pipeline, or this run, was deleted
    policy = p.retention
    interval = policy.auto_commit_interval_s if policy is not None else None
    if p.desired_state == DesiredState.stopped:
        # A stop operation, if any, is claimed and performed by the driver first.
        gone = not ops.pending_ids(s, p.id)
        return DesiredOut(exit=gone, has_policy=policy is not None, auto_commit_s=interval)
    paused = p.desired_state == DesiredState.paused
    lifecycle.run_follows(run, paused)
    return DesiredOut(paused=paused, has_policy=policy is not None, auto_commit_s=interval)


def _record(s: Session, run: Run, samples: Sequence[SampleIn], events: Sequence[EventIn]) -> None:
    """The steps' metric records, and the durability events: counted, and the newest
    problem shown on the pipeline until a checkpoint is durable again."""
    rows = [
        MetricSample(
            pipeline_id=run.pipeline_id,
            run_id=run.id,
            resolution_s=0,
            **rec.model_dump(exclude={"uploads_s"}),
        )
        for rec in samples
    ]
    if rows:
        s.add_all(rows)
        metrics.add_totals(
            s,
            run.pipeline_id,
            steps=len(rows),
            rows_in=sum(r.rows_in or 0 for r in rows),
            rows_out=sum(r.rows_out or 0 for r in rows),
            dead_letters=sum(r.dead_letters or 0 for r in rows),
            late_rows=sum(r.late_rows or 0 for r in rows),
        )
        metrics.add_shard_totals(s, run.pipeline_id, [r.operators for r in rows])
        metrics.observe(s, run.pipeline_id, "step", [(r.step_ms or 0.0) / 1000 for r in rows])
        metrics.observe(s, run.pipeline_id, "upload", [x for rec in samples for x in rec.uploads_s])
    if not events:
        return
    kinds = [e.event for e in events]
    metrics.add_totals(
        s,
        run.pipeline_id,
        commit_failures=kinds.count("commit_failed"),
        upload_failures=kinds.count("upload_failed"),
        fencings=kinds.count("fenced"),
    )
    p = s.get(Pipeline, run.pipeline_id)
    if p is not None:
        lifecycle.durability_reported(p, [(e.event, e.message) for e in events])


__all__ = ["claim", "finish", "opened", "report"]
