"""Checkpoints (commit, list, gc, delete, pin, restore) and the retention policy."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import TypeAdapter
from sqlalchemy import select
from sqlalchemy.orm import Session

from ...errors import Conflict, NotFound
from ...models import Checkpoint, OperationKind, OperationStatus, Pipeline, RetentionPolicy
from ...schemas.checkpoints import (
    CheckpointCreate,
    CheckpointOut,
    CheckpointPatch,
    GcRequest,
    RetentionIn,
    RetentionOut,
)
from ...schemas.operations import OperationOut
from ...services import checkpoints as cps
from ...services import lifecycle
from ...services import operations as ops
from ..deps import DB, Ctx, Operator, Viewer, pipeline_by_name
from ..read_cache import cached_read
from .operations import operation_out, wait_for

router = APIRouter(prefix="/api/v1/pipelines/{name}", tags=["checkpoints"])

Uuid = Annotated[str, "checkpoint uuid"]


def _submit(
    ctx: Ctx, s: Session, p: Pipeline, kind: OperationKind, params: dict[str, Any]
) -> OperationOut:
    """Record the command; a live run picks it up, else a worker performs it."""
    op = ops.create(s, p, kind, params)
    live = lifecycle.live_run(s, p) is not None
    out = operation_out(s, op)
    s.commit()
    if not live:
        ctx.queue.execute(op.id)
    return out


# `?wait=true` answers 200 once the operation has finished, 202 if it is still going.
_WAITED: dict[int | str, dict[str, Any]] = {
    200: {"model": OperationOut, "description": "with wait=true: the operation finished"}
}


def _maybe_wait(
    ctx: Ctx, op: OperationOut, wait: bool, timeout_s: float, response: Response
) -> OperationOut:
    """With `wait`, the operation once finished (200), or as it is after `timeout_s` (202)."""
    if not wait:
        return op
    done = wait_for(ctx, op.id, timeout_s)
    if done.status in (OperationStatus.succeeded, OperationStatus.failed):
        response.status_code = 200
    return done


def _mirror(ctx: Ctx, s: Session, p: Pipeline) -> list[Checkpoint]:
    """The checkpoint rows; for a pipeline without a live run, first re-read its manifest
    (a live run keeps the rows current itself)."""
    if lifecycle.live_run(s, p) is None:
        return cps.reconcile_dir(s, p.id, ctx.settings.storage_dir(p.name))
    return cps.rows(s, p.id)


def _row(s: Session, p: Pipeline, uuid: str) -> Checkpoint:
    row = s.scalar(
        select(Checkpoint).where(Checkpoint.pipeline_id == p.id, Checkpoint.uuid == uuid)
    )
    if row is None:
        raise NotFound(f"pipeline {p.name!r} has no checkpoint {uuid}")
    return row


_CHECKPOINTS = TypeAdapter(list[CheckpointOut])


@router.get("/checkpoints", response_model=list[CheckpointOut])
async def list_checkpoints(name: str, request: Request, ctx: Ctx, _: Viewer) -> Response:
    """Oldest first."""

    def read(s: Session) -> list[CheckpointOut]:
        p = pipeline_by_name(s, name)
        return [CheckpointOut.model_validate(r) for r in _mirror(ctx, s, p)]

    return await cached_read(request, ctx, _CHECKPOINTS, read)


@router.post("/checkpoints", response_model=OperationOut, status_code=202, responses=_WAITED)
def commit(
    name: str,
    ctx: Ctx,
    s: DB,
    _: Operator,
    response: Response,
    body: CheckpointCreate | None = None,
    wait: Annotated[bool, Query(description="wait until the checkpoint is durable")] = False,
    timeout_s: Annotated[float, Query(gt=0, le=300)] = 60.0,
) -> OperationOut:
    """Take a checkpoint of the running pipeline."""
    p = pipeline_by_name(s, name)
    if lifecycle.live_run(s, p) is None:
        raise Conflict(f"pipeline {name!r} is not running: there is no live state to checkpoint")
    out = _submit(
        ctx, s, p, OperationKind.commit, {"identifier": body.identifier if body else None}
    )
    return _maybe_wait(ctx, out, wait, timeout_s, response)


@router.post("/checkpoints/gc", response_model=OperationOut, status_code=202, responses=_WAITED)
def gc(
    name: str,
    ctx: Ctx,
    s: DB,
    _: Operator,
    response: Response,
    body: GcRequest | None = None,
    wait: Annotated[bool, Query(description="wait until the gc is done")] = False,
    timeout_s: Annotated[float, Query(gt=0, le=300)] = 60.0,
) -> OperationOut:
    """Delete the oldest unpinned checkpoint, or down to `keep`; the operation's result
    lists what was deleted and the bytes freed."""
    p = pipeline_by_name(s, name)
    out = _submit(ctx, s, p, OperationKind.gc, {"keep": body.keep if body else None})
    return _maybe_wait(ctx, out, wait, timeout_s, response)


@router.delete("/checkpoints/{uuid}", response_model=OperationOut, status_code=202)
def delete(name: str, uuid: Uuid, ctx: Ctx, s: DB, _: Operator) -> OperationOut:
    """Delete one checkpoint (not a pinned one); returns an operation."""
    p = pipeline_by_name(s, name)
    _mirror(ctx, s, p)
    row = _row(s, p, uuid)
    if row.pinned:
        raise Conflict(f"checkpoint {uuid} is pinned; unpin it first")
    return _submit(ctx, s, p, OperationKind.delete_checkpoint, {"checkpoint": uuid})


@router.patch("/checkpoints/{uuid}", response_model=CheckpointOut)
def patch(
    name: str, uuid: Uuid, body: CheckpointPatch, ctx: Ctx, s: DB, _: Operator
) -> CheckpointOut:
    """Pin (never deleted by gc or retention) or unpin."""
    p = pipeline_by_name(s, name)
    _mirror(ctx, s, p)
    row = _row(s, p, uuid)
    row.pinned = body.pinned
    s.flush()
    return CheckpointOut.model_validate(row)


@router.post("/checkpoints/{uuid}/restore", response_model=OperationOut, status_code=202)
def restore(name: str, uuid: Uuid, ctx: Ctx, s: DB, _: Operator) -> OperationOut:
    """Make a checkpoint the live state: a running pipeline restarts from it; a stopped
    one resumes from it at its next start."""
    p = pipeline_by_name(s, name)
    _mirror(ctx, s, p)
    _row(s, p, uuid)
    return _submit(ctx, s, p, OperationKind.restore, {"checkpoint": uuid})


@router.get("/retention", response_model=RetentionOut)
def get_retention(name: str, s: DB, _: Viewer) -> RetentionOut:
    """The retention policy and auto-commit interval."""
    p = pipeline_by_name(s, name)
    pol = p.retention or RetentionPolicy(pipeline_id=p.id, min_keep=1)
    return RetentionOut.model_validate(pol)


@router.put("/retention", response_model=RetentionOut)
def put_retention(name: str, body: RetentionIn, s: DB, _: Operator) -> RetentionOut:
    """Replace the retention policy and auto-commit interval; a running job applies it within a
    poll."""
    p = pipeline_by_name(s, name)
    pol = p.retention
    if pol is None:
        pol = RetentionPolicy(pipeline_id=p.id)
        s.add(pol)
    pol.keep_last = body.keep_last
    pol.max_age_s = body.max_age_s
    pol.min_keep = body.min_keep
    pol.auto_commit_interval_s = body.auto_commit_interval_s
    s.flush()
    return RetentionOut.model_validate(pol)
