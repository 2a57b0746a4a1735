"""Asynchronous commands (commit, gc, delete, restore, stop) as rows of the operations
table. A live run claims its pipeline's pending operations (it polls every
operation_poll_s); with no live run, a worker performs them on the storage location. Every
operation ends succeeded (with a result) or failed (with an error)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ..errors import Conflict
from ..models import Operation, OperationKind, OperationStatus, Pipeline, utcnow

OPEN = (OperationStatus.pending, OperationStatus.running)


def create(s: Session, p: Pipeline, kind: OperationKind, params: dict[str, Any]) -> Operation:
    if kind == OperationKind.restore:
        busy = s.scalar(
            select(Operation.id).where(
                Operation.pipeline_id == p.id,
                Operation.kind == OperationKind.restore,
                Operation.status.in_(OPEN),
            )
        )
        if busy is not None:
            raise Conflict(
                f"a restore of {p.name!r} is already in progress (operation {busy})",
                details={"operation": busy},
            )
    op = Operation(id=str(uuid.uuid4()), pipeline_id=p.id, kind=kind, params=params)
    s.add(op)
    s.flush()
    return op


def claim(
    s: Session, pipeline_id: int, kinds: tuple[OperationKind, ...] | None = None
) -> list[Operation]:
    """Take the pipeline's pending operations, oldest first. The conditional update makes a
    claim exclusive even when two claimants race."""
    q = select(Operation).where(
        Operation.pipeline_id == pipeline_id, Operation.status == OperationStatus.pending
    )
    if kinds:
        q = q.where(Operation.kind.in_(kinds))
    out = []
    for op in s.scalars(q.order_by(Operation.created_at)).all():
        got = s.execute(
            update(Operation)
            .where(Operation.id == op.id, Operation.status == OperationStatus.pending)
            .values(status=OperationStatus.running, started_at=utcnow())
            .execution_options(synchronize_session=False)
        )
        if got.rowcount == 1:  # type: ignore[attr-defined]
            s.refresh(op)
            out.append(op)
    return out


def claim_one(s: Session, op_id: str) -> Operation | None:
    got = s.execute(
        update(Operation)
        .where(Operation.id == op_id, Operation.status == OperationStatus.pending)
        .values(status=OperationStatus.running, started_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    if got.rowcount != 1:  # type: ignore[attr-defined]
        return None
    op = s.get(Operation, op_id)
    if op is not None:
        s.refresh(op)
    return op


def succeed(op: Operation, result: dict[str, Any]) -> None:
    op.status = OperationStatus.succeeded
    op.result = result
    op.finished_at = utcnow()


def fail(op: Operation, error: str) -> None:
    op.status = OperationStatus.failed
    op.error = error
    op.finished_at = utcnow()


def pending_ids(s: Session, pipeline_id: int) -> list[str]:
    return list(
        s.scalars(
            select(Operation.id).where(
                Operation.pipeline_id == pipeline_id,
                Operation.status == OperationStatus.pending,
            )
        )
    )


__all__ = ["OPEN", "claim", "claim_one", "create", "fail", "pending_ids", "succeed"]
