"""Data in and out: pushing records into a pipeline's input log, reading its views."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import anyio
import pyarrow as pa
from fastapi import APIRouter, Query, Request

from pipeline_spec.model import parse_spec
from storage_engine.errors import CorruptionError, StorageError
from storage_engine.location_view import read_spine, to_jsonable

from ...errors import InvalidInput, NotFound, StateUnavailable
from ...schemas.metrics import IngestOut, ViewPage
from ...services import ingest
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
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
) -> ViewPage:
    """A view's rows as of the newest checkpoint: by key (leading columns) or paged."""
    p = pipeline_by_name(s, name)
    spec = parse_spec(p.spec)
    if view not in spec.readable_views():
        raise NotFound(f"pipeline {name!r} has no view {view!r}")
    try:
        got = read_spine(ctx.settings.storage_dir(p.name), f"view.{view}")
    except (CorruptionError, OSError) as e:
        raise StateUnavailable(f"the view's state cannot be read: {e}") from None
    except (StorageError, KeyError):  # no checkpoint yet, or none with this view
        return ViewPage(view=view, step=None, checkpoint=None, rows=[])
    t = got.rows
    if t is None:
        return ViewPage(
            view=view, step=got.checkpoint.step, checkpoint=got.checkpoint.uuid, rows=[]
        )
    if key:
        if len(key) > t.num_columns:
            raise InvalidInput(f"the view has {t.num_columns} columns; got {len(key)} key values")
        mask = None
        for i, raw in enumerate(key):
            col = t.column(i)
            try:
                v = pa.scalar(raw).cast(col.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise InvalidInput(
                    f"key value {raw!r} is not a {col.type} (column {t.column_names[i]!r})"
                ) from None
            m = pa.compute.equal(col, v)
            mask = m if mask is None else pa.compute.and_(mask, m)
        t = t.filter(mask)
    rows = _pylist(t.slice(offset, limit))
    return ViewPage(
        view=view,
        step=got.checkpoint.step,
        checkpoint=got.checkpoint.uuid,
        rows=[to_jsonable(r) for r in rows],
    )


def _pylist(t: pa.Table) -> list[dict[str, Any]]:
    """The rows as Python values. A string that is not valid UTF-8 (stored before ingest
    refused it) is shown with replacement characters: reading stored state never fails."""
    try:
        rows: list[dict[str, Any]] = t.to_pylist()
    except UnicodeDecodeError:
        rows = pa.table([_lenient(c) for c in t.columns], names=t.column_names).to_pylist()
    return rows


def _lenient(col: pa.ChunkedArray) -> pa.ChunkedArray | pa.Array:
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        return col
    raw = col.cast(pa.large_binary()).to_pylist()  # a cast that does not validate
    return pa.array([None if b is None else b.decode("utf-8", "replace") for b in raw])
