"""Asynchronous commands' status."""

from __future__ import annotations

import time

from fastapi import APIRouter
from sqlalchemy.orm import Session

from ...errors import NotFound
from ...models import Operation, OperationStatus, Pipeline
from ...schemas.operations import OperationOut
from ..context import Context
from ..deps import DB, Viewer

router = APIRouter(prefix="/api/v1/operations", tags=["operations"])

DONE = (OperationStatus.succeeded, OperationStatus.failed)


def operation_out(s: Session, op: Operation) -> OperationOut:
    p = s.get(Pipeline, op.pipeline_id)
    return OperationOut(
        id=op.id,
        pipeline=p.name if p else "",
        kind=op.kind,
        params=op.params,
        status=op.status,
        result=op.result,
        error=op.error,
        created_at=op.created_at,
        started_at=op.started_at,
        finished_at=op.finished_at,
    )


def wait_for(ctx: Context, op_id: str, timeout_s: float) -> OperationOut:
    """Poll until the operation is done or `timeout_s` passes; its latest status."""
    deadline = time.monotonic() + timeout_s
    while True:
        with ctx.db.session() as s:
            op = s.get(Operation, op_id)
            if op is None:
                raise NotFound(f"no operation {op_id}")
            if op.status in DONE or time.monotonic() >= deadline:
                return operation_out(s, op)
        time.sleep(0.05)


@router.get("/{op_id}", response_model=OperationOut)
def get(op_id: str, s: DB, _: Viewer) -> OperationOut:
    """The status of an asynchronous command: pending, running, succeeded or failed, with its result
    or error."""
    op = s.get(Operation, op_id)
    if op is None:
        raise NotFound(f"no operation {op_id}")
    return operation_out(s, op)
