"""Data in and out: pushing records into a pipeline's input log, reading its views."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import anyio
from fastapi import APIRouter, Query, Request, Response
from sqlalchemy.orm import Session

from pipeline_spec.model import parse_spec
from storage_engine.key_range import KeyRange
from storage_engine.location_view import jsonable_rows

from ...errors import InvalidInput, NotFound
from ...models import Pipeline, RunState
from ...schemas.metrics import IngestOut, ViewDiff, ViewPage
from ...services import ingest, lifecycle, views
from ..context import Context
from ..deps import DB, Ctx, Operator, Viewer, pipeline_by_name

router = APIRouter(prefix="/api/v1/pipelines/{name}", tags=["data"])


@router.post(
    "/ingest/{stream}",
    response_model=IngestOut,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/x-ndjson": {"schema": {"type": "string"}},
                "text/csv": {"schema": {"type": "string"}},
            },
        }
    },
)
async def ingest_records(
    name: str,
    stream: str,
    request: Request,
    ctx: Ctx,
    _: Operator,
    format: Annotated[
        Literal["ndjson", "csv"] | None, Query(description="default: from Content-Type")
    ] = None,
) -> IngestOut:
    """Append NDJSON or CSV (with a header) records; returns their offsets [first, end).
    Durable when this returns; processed by the pipeline's next steps."""
    fmt = format or ("csv" if "csv" in request.headers.get("content-type", "") else "ndjson")
    body = await request.body()  # async: only reading the body happens on the event loop
    return await anyio.to_thread.run_sync(_ingest, ctx, name, stream, fmt, body)


def _ingest(ctx: Context, name: str, stream: str, fmt: str, body: bytes) -> IngestOut:
    with ctx.db.session() as s:
        p = pipeline_by_name(s, name)
        spec, storage = parse_spec(p.spec), ctx.settings.storage_dir(p.name)
    src = ingest.log_source(spec, stream)
    table = ingest.parse(body, fmt, src.arrow_schema(), src.upserted())
    first, end = ingest.append(storage, spec, src, table)
    return IngestOut(stream=stream, records=end - first, first_offset=first, end_offset=end)


@router.get("/views/{view}", response_model=ViewPage)
def read_view(
    name: str,
    view: str,
    ctx: Ctx,
    s: DB,
    _: Viewer,
    key: Annotated[
        list[str] | None, Query(description="values of the leading columns, in order")
    ] = None,
    ge: Annotated[
        str | None,
        Query(description="the next column after `key`'s is at least this (a range)"),
    ] = None,
    lt: Annotated[
        str | None,
        Query(description="the next column after `key`'s is below this (a range)"),
    ] = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    as_of: Annotated[
        str | None,
        Query(
            max_length=200,
            description="the checkpoint to read: latest (the newest), a checkpoint's uuid "
            "or identifier, or a step (the retained checkpoint taken at that step); "
            "default: the running pipeline's newest step, else the newest checkpoint",
        ),
    ] = None,
) -> ViewPage | Response:
    """A view's rows as of the running pipeline's newest step (`live`), else as of the
    newest checkpoint, or an older retained one (`as_of`): those in a key range (`key`:
    the leading columns' values; `ge`, `lt`: bounds on the next column) or all, paged."""
    within = (
        None
        if not (key or ge is not None or lt is not None)
        else KeyRange(tuple(key or ()), ge, lt)
    )
    if as_of is None:
        at = ctx.live.endpoint(name, ctx.reads.generation, lambda: _live_endpoint(s, name))
        if at is not None and view in at.views:
            live = ctx.live.read(at, view, within, offset, limit)
            if live is not None:
                return Response(live, media_type="application/json")
            ctx.live.forget(name)
    storage = _view_storage(ctx, pipeline_by_name(s, name), view)
    got = views.read(storage, view, as_of or "latest", within=within)
    if got is None:
        return ViewPage(view=view, step=None, checkpoint=None, rows=[])
    t = got.rows
    return ViewPage(
        view=view,
        step=got.checkpoint.step,
        checkpoint=got.checkpoint.uuid,
        rows=[] if t is None else jsonable_rows(t.slice(offset, limit)),
    )


@router.get("/views/{view}/diff", response_model=ViewDiff)
def diff_view(
    name: str,
    view: str,
    ctx: Ctx,
    s: DB,
    _: Viewer,
    from_: Annotated[
        str | None,
        Query(
            alias="from",
            max_length=200,
            description="the older checkpoint: a uuid, identifier or step (required)",
        ),
    ] = None,
    to: Annotated[
        str,
        Query(max_length=200, description="the newer checkpoint (default the newest)"),
    ] = "latest",
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> ViewDiff:
    """What changed in a view between two retained checkpoints: each row whose count
    differs, with its `weight` (+n: n more in `to`, -n: n fewer)."""
    storage = _view_storage(ctx, pipeline_by_name(s, name), view)
    if from_ is None:  # checked after the pipeline and view, which a 404 names first
        raise InvalidInput(
            "from: the older checkpoint is required", errors=[("query.from", "required")]
        )
    old, new, t = views.diff(storage, view, from_, to)
    rows = jsonable_rows(t.slice(offset, limit).rename_columns([*t.column_names[:-1], "weight"]))
    return ViewDiff.model_validate(
        {
            "view": view,
            "from": {"checkpoint": old.checkpoint.uuid, "step": old.checkpoint.step},
            "to": {"checkpoint": new.checkpoint.uuid, "step": new.checkpoint.step},
            "rows": rows,
        }
    )


def _live_endpoint(s: Session, name: str) -> views.LiveEndpoint | None:
    """Where the pipeline's running driver serves its views; None if it does not run."""
    p = pipeline_by_name(s, name)
    run = lifecycle.latest_run(s, p)
    if run is None or run.state != RunState.running or not run.views_url:
        return None
    readable = frozenset(parse_spec(p.spec).readable_views())
    return views.LiveEndpoint(readable, run.views_url, run.views_secret or "")


def _view_storage(ctx: Context, p: Pipeline, view: str) -> Path:
    if view not in parse_spec(p.spec).readable_views():
        raise NotFound(f"pipeline {p.name!r} has no view {view!r}")
    return Path(ctx.settings.storage_dir(p.name))
