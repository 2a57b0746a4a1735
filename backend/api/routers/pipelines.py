"""Pipelines: registration and lifecycle (start, stop, pause, resume), runs and logs."""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import StringConstraints, TypeAdapter
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from pipeline_spec.model import DROP_STATE_RE, PipelineSpec
from storage_engine.forks import delete_prefix
from storage_engine.objstore import open_object_store

from ...errors import Conflict, Forbidden, InvalidSpec, NotFound
from ...models import (
    Checkpoint,
    OperationKind,
    Pipeline,
    PipelineState,
    RetentionPolicy,
    Role,
    Run,
)
from ...schemas.common import INT32_MAX
from ...schemas.operations import OperationOut
from ...schemas.pipelines import (
    Lineage,
    LogOut,
    PipelineCreate,
    PipelineFork,
    PipelineOut,
    PipelineUpdate,
    RunBrief,
    RunOut,
    SpecValidation,
)
from ...services import checkpoints as cps
from ...services import forks, lifecycle, specs
from ...services import operations as ops
from ...services.logs import tail
from ...services.tokens import Caller
from ..deps import DB, Admin, Ctx, Operator, Viewer, pipeline_by_name
from ..read_cache import cached_read
from .operations import operation_out

router = APIRouter(prefix="/api/v1/pipelines", tags=["pipelines"])

Name = Annotated[str, "pipeline name"]


def pipeline_outs(s: Session, pipelines: Sequence[Pipeline]) -> list[PipelineOut]:
    """The response for each pipeline in three queries however many there are: listing is
    the hottest read (every console page polls it)."""
    ids = [p.id for p in pipelines]
    latest = select(func.max(Run.id)).where(Run.pipeline_id.in_(ids)).group_by(Run.pipeline_id)
    runs = {r.pipeline_id: r for r in s.scalars(select(Run).where(Run.id.in_(latest)))}
    counts: dict[int, int] = {
        pid: n
        for pid, n in s.execute(
            select(Checkpoint.pipeline_id, func.count())
            .where(Checkpoint.pipeline_id.in_(ids))
            .group_by(Checkpoint.pipeline_id)
        )
    }
    outs = []
    for p in pipelines:
        run = runs.get(p.id)
        out = PipelineOut.model_validate(p)
        out.current_run = RunBrief.model_validate(run) if run is not None else None
        out.last_step = run.last_step if run is not None else None
        out.checkpoints = counts.get(p.id, 0)
        out.forked_from = _lineage(p)
        outs.append(out)
    return outs


def _lineage(p: Pipeline) -> Lineage | None:
    if p.origin_pipeline is None or p.origin_checkpoint is None or p.forked_at is None:
        return None
    return Lineage(
        pipeline=p.origin_pipeline,
        checkpoint=p.origin_checkpoint,
        step=p.origin_step or 0,
        forked_at=p.forked_at,
    )


def pipeline_out(s: Session, p: Pipeline) -> PipelineOut:
    return pipeline_outs(s, [p])[0]


@router.post("/validate", response_model=SpecValidation)
def validate(body: PipelineCreate, ctx: Ctx, _: Viewer) -> SpecValidation:
    """Validate a spec without registering it; errors name the offending fields."""
    spec = specs.validate(body.spec, ctx.settings.roots, ctx.settings.object_roots)
    return SpecValidation(valid=True, name=spec.name)


def _may_register(caller: Caller, doc: dict[str, Any]) -> None:
    """A spec with `udfs` runs its Python code in the pipeline's processes: only admins
    register one (validating it, which never runs it, is anyone's)."""
    if doc.get("udfs") is not None and caller.role.rank < Role.admin.rank:
        raise Forbidden(
            "a pipeline with udfs runs Python code: registering one needs the admin role; "
            f"the token has {caller.role.value}",
            errors=[("spec.udfs", "needs the admin role")],
        )


@router.post("", response_model=PipelineOut, status_code=201)
def create(body: PipelineCreate, ctx: Ctx, s: DB, caller: Operator) -> PipelineOut:
    """Register a pipeline from its spec (stopped; `start` runs it). The spec's errors name their
    fields. A spec with `udfs` needs the admin role."""
    _may_register(caller, body.spec)
    spec = specs.validate(body.spec, ctx.settings.roots, ctx.settings.object_roots)
    _name_free(s, spec.name, "spec.name")
    p = _register(s, spec, body.spec, body.description)
    return pipeline_out(s, p)


def _name_free(s: Session, name: str, field: str) -> None:
    if s.scalar(select(Pipeline.id).where(Pipeline.name == name)) is not None:
        raise Conflict(f"a pipeline named {name!r} exists", errors=[(field, "already used")])


def _register(s: Session, spec: PipelineSpec, doc: dict[str, Any], description: str) -> Pipeline:
    p = Pipeline(name=spec.name, spec=doc, description=description)
    s.add(p)
    s.flush()
    pol = RetentionPolicy(pipeline_id=p.id)
    _policy_from_spec(pol, spec)
    s.add(pol)
    s.flush()
    return p


@router.post("/{name}/fork", response_model=PipelineOut, status_code=201)
def fork(name: Name, body: PipelineFork, ctx: Ctx, s: DB, caller: Operator) -> PipelineOut:
    """A new pipeline from a retained checkpoint of this one (a uuid, an identifier, a step or
    `latest`): its storage starts with that one checkpoint, sharing the origin's files
    (nothing is copied), and its lineage records the origin. The spec defaults to the
    origin's; operators a new spec changes start empty, the others keep their state. Its
    sinks must write elsewhere than the origin's. `start` starts it at once."""
    origin = pipeline_by_name(s, name)
    doc = forks.fork_spec(origin, body.name, body.spec)
    _may_register(caller, doc)
    try:
        spec = specs.validate(doc, ctx.settings.roots, ctx.settings.object_roots)
    except InvalidSpec as e:  # its fields are the spec's, here inside the body's `spec`
        e.errors = [(f if f.startswith("spec.") else f"spec.{f}", m) for f, m in e.errors]
        raise
    forks.check(origin, spec)
    _name_free(s, body.name, "name")
    made = forks.fork_storage(ctx.settings, origin, body.name, body.checkpoint)
    try:
        p = _register(s, spec, doc, body.description)
        info = made.checkpoint
        p.origin_pipeline, p.origin_checkpoint, p.origin_step = origin.name, info.uuid, info.step
        p.forked_at = dt.datetime.now(dt.UTC)
        cps.reconcile_dir(s, p.id, ctx.settings.storage_dir(p.name))
        # Operators the new spec changed start empty, as on a restart with a changed query.
        run = lifecycle.start(s, p, "latest", [forks.DROP_ALL]) if body.start else None
        out = pipeline_out(s, p)
        s.commit()
    except BaseException:
        s.rollback()
        forks.discard_storage(ctx.settings, body.name)
        raise
    if run is not None:
        ctx.queue.launch(run.id)
    return out


def _policy_doc(doc: dict[str, Any]) -> tuple[Any, Any]:
    """What a stored spec says of the policy (a spec stored by an older release may not
    parse any more: compared as written)."""
    checkpoint = doc.get("checkpoint")
    return doc.get("retention"), checkpoint.get("every") if isinstance(checkpoint, dict) else None


def _policy_from_spec(pol: RetentionPolicy, spec: PipelineSpec) -> None:
    """The spec's retention and auto-commit interval, as the control plane applies them (PUT
    .../retention changes them without a new spec)."""
    r = spec.retention
    pol.keep_last = r.keep_last
    pol.max_age_s = r.max_age
    pol.min_keep = r.min_keep
    pol.auto_commit_interval_s = spec.checkpoint.every


_PIPELINES = TypeAdapter(list[PipelineOut])
_PIPELINE = TypeAdapter(PipelineOut)


@router.get("", response_model=list[PipelineOut])
async def list_pipelines(request: Request, ctx: Ctx, _: Viewer) -> Response:
    """Every pipeline, by name, with its state, current run, last step and checkpoint count."""

    def read(s: Session) -> list[PipelineOut]:
        return pipeline_outs(s, s.scalars(select(Pipeline).order_by(Pipeline.name)).all())

    return await cached_read(request, ctx, _PIPELINES, read)


@router.get("/{name}", response_model=PipelineOut)
async def get(name: Name, request: Request, ctx: Ctx, _: Viewer) -> Response:
    """One pipeline with its state, current run, last step and checkpoint count."""
    return await cached_read(
        request, ctx, _PIPELINE, lambda s: pipeline_out(s, pipeline_by_name(s, name))
    )


@router.put("/{name}", response_model=PipelineOut)
def replace(name: Name, body: PipelineUpdate, ctx: Ctx, s: DB, caller: Operator) -> PipelineOut:
    """Replace the spec of a stopped pipeline (the name stays). A spec with `udfs` needs
    the admin role."""
    p = pipeline_by_name(s, name)
    _may_register(caller, body.spec)
    spec = specs.validate(body.spec, ctx.settings.roots, ctx.settings.object_roots)
    if spec.name != name:
        raise InvalidSpec("the name cannot change", errors=[("spec.name", f"must stay {name!r}")])
    if p.state not in (PipelineState.stopped, PipelineState.failed):
        raise Conflict(f"pipeline {name!r} is {p.state.value}; stop it before replacing its spec")
    if _policy_doc(p.spec) != _policy_doc(body.spec):
        # A new policy in the spec wins over an earlier PUT .../retention; an unchanged one
        # leaves that in place.
        if p.retention is None:
            p.retention = RetentionPolicy(pipeline_id=p.id)
        _policy_from_spec(p.retention, spec)
    p.spec = body.spec
    p.description = body.description
    s.flush()
    return pipeline_out(s, p)


@router.delete("/{name}", status_code=204)
def delete(name: Name, ctx: Ctx, s: DB, _: Admin) -> Response:
    """Delete a stopped pipeline with its records and storage."""
    p = pipeline_by_name(s, name)
    if p.state not in (PipelineState.stopped, PipelineState.failed) or lifecycle.live_run(s, p):
        raise Conflict(f"pipeline {name!r} is {p.state.value}; stop it before deleting it")
    s.delete(p)
    s.flush()
    shutil.rmtree(ctx.settings.pipeline_dir(name), ignore_errors=True)
    url = ctx.settings.pipeline_store_url(name)
    if url:  # its mirror too (but what its forks still use), so a new one starts clean
        delete_prefix(open_object_store(url))
    return Response(status_code=204)


@router.post("/{name}/start", response_model=PipelineOut, status_code=202)
def start(
    name: Name,
    ctx: Ctx,
    s: DB,
    _: Operator,
    from_checkpoint: Annotated[
        str, Query(pattern=r"^(latest|none|[0-9a-f-]{36})$", description="latest, none or a uuid")
    ] = "latest",
    drop_state: Annotated[
        list[Annotated[str, StringConstraints(pattern=DROP_STATE_RE)]] | None,
        Query(
            description="an operator (its id, as the dataflow graph names it) whose state "
            "starts empty if it no longer fits the changed query; repeat for several, `*` "
            "for every such operator. Without it, a run whose checkpoint another query "
            "made fails naming the operators whose state does not fit.",
        ),
    ] = None,
) -> PipelineOut:
    """Start a new run from the latest checkpoint, none (fresh state) or a retained one."""
    p = pipeline_by_name(s, name)
    if from_checkpoint not in ("latest", "none"):
        known = s.scalar(
            select(Checkpoint.id).where(
                Checkpoint.pipeline_id == p.id, Checkpoint.uuid == from_checkpoint
            )
        )
        if known is None:
            raise NotFound(f"pipeline {name!r} has no checkpoint {from_checkpoint}")
    if drop_state is None and p.origin_pipeline is not None and not _has_run(s, p):
        drop_state = [forks.DROP_ALL]  # a fork's first run: as `fork` with `start` would do
    run = lifecycle.start(s, p, from_checkpoint, drop_state)
    out = pipeline_out(s, p)
    s.commit()
    ctx.queue.launch(run.id)
    return out


def _has_run(s: Session, p: Pipeline) -> bool:
    return s.scalar(select(Run.id).where(Run.pipeline_id == p.id).limit(1)) is not None


@router.post("/{name}/stop", response_model=OperationOut, status_code=202)
def stop(
    name: Name,
    ctx: Ctx,
    s: DB,
    _: Operator,
    checkpoint: Annotated[bool, Query(description="checkpoint before stopping")] = False,
) -> OperationOut:
    """Stop; returns an operation that succeeds once the run has taken its last step (and,
    with `checkpoint=true`, its last checkpoint). The pipeline's state becomes `stopped`
    when the driver has exited, a few seconds later."""
    p = pipeline_by_name(s, name)
    run = lifecycle.request_stop(s, p)
    op = ops.create(s, p, OperationKind.stop, {"checkpoint": checkpoint})
    if run is None:
        ops.succeed(op, {"step": None, "note": "the pipeline was not running"})
    return operation_out(s, op)


@router.post("/{name}/pause", response_model=PipelineOut, status_code=202)
def pause(name: Name, s: DB, _: Operator) -> PipelineOut:
    """Pause a running pipeline: its Spark query stops, its run and state stay open."""
    p = pipeline_by_name(s, name)
    lifecycle.pause(s, p)
    return pipeline_out(s, p)


@router.post("/{name}/resume", response_model=PipelineOut, status_code=202)
def resume(name: Name, s: DB, _: Operator) -> PipelineOut:
    """Resume a paused pipeline from where it paused."""
    p = pipeline_by_name(s, name)
    lifecycle.resume(s, p)
    return pipeline_out(s, p)


@router.get("/{name}/runs", response_model=list[RunOut])
def runs(
    name: Name, s: DB, _: Viewer, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[RunOut]:
    """Run history, newest first: state, exit reason, restart count, steps."""
    p = pipeline_by_name(s, name)
    q = select(Run).where(Run.pipeline_id == p.id).order_by(Run.id.desc()).limit(limit)
    return [RunOut.model_validate(r) for r in s.scalars(q)]


@router.get("/{name}/logs", response_model=LogOut)
def logs(
    name: Name,
    s: DB,
    _: Viewer,
    lines: Annotated[int, Query(ge=1, le=10_000)] = 200,
    run: Annotated[
        int | None, Query(ge=1, le=INT32_MAX, description="run number; default the latest")
    ] = None,
    source: Literal["driver"] = "driver",
) -> LogOut:
    """The tail of a run's driver log."""
    p = pipeline_by_name(s, name)
    q = select(Run).where(Run.pipeline_id == p.id)
    q = q.where(Run.number == run) if run is not None else q.order_by(Run.id.desc()).limit(1)
    r = s.scalar(q)
    if r is None:
        if run is not None:
            raise NotFound(f"pipeline {name!r} has no run {run}")
        return LogOut(run=None, lines=[])
    text = tail(r.log_path, max_bytes=min(lines * 400, 4 << 20))
    return LogOut(run=r.number, lines=text.splitlines()[-lines:])
