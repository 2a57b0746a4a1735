"""A run's driver reaching the control plane over HTTP (`workers.runtime.control_rest`): the run
opened, its reports, and its pipeline's operations, each authorised by the run's token
(`deps.require_run`) and done by `services.run_control`, as over the database."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from ...schemas.runs import ClaimedOut, DesiredOut, FinishIn, OpenedIn, ReportIn
from ...services import run_control
from ..deps import DB, OwnRun

router = APIRouter(prefix="/api/v1/runs/{run_id}", tags=["runs"])

OperationId = Annotated[str, Path(min_length=1, max_length=36)]


@router.post("/opened", response_model=DesiredOut)
def opened(run_id: OwnRun, body: OpenedIn, s: DB) -> DesiredOut:
    """The run restored its state and is about to process: it is running."""
    return run_control.opened(s, run_id, body)


@router.post("/report", response_model=DesiredOut)
def report(run_id: OwnRun, body: ReportIn, s: DB) -> DesiredOut:
    """The run's steps since its last report, its durability events, its heartbeat and
    changed checkpoints; answers what the pipeline asks of the run."""
    return run_control.report(s, run_id, body)


@router.post("/claim", response_model=list[ClaimedOut])
def claim(run_id: OwnRun, s: DB) -> list[ClaimedOut]:
    """The pipeline's pending operations, now the run's to perform."""
    return run_control.claim(s, run_id)


@router.post("/operations/{operation_id}/finish", status_code=204)
def finish(run_id: OwnRun, operation_id: OperationId, body: FinishIn, s: DB) -> Response:
    """An operation the run claimed ended: its result or error."""
    run_control.finish(s, run_id, operation_id, body)
    return Response(status_code=204)
