"""Live and historical metrics: JSON history, Server-Sent Events, Prometheus exposition."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Header, Query, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from sqlalchemy import select
from sse_starlette.sse import EventSourceResponse

from pipeline_spec.model import SpecError, parse_spec
from spindle_sql.graph import GraphNode, pipeline_graph

from ...errors import InvalidSpec
from ...models import MetricSample
from ...schemas.common import INT64_MAX
from ...schemas.metrics import DataflowEdge, DataflowNode, DataflowOut, MetricOut
from ...services import metrics as history
from ...services.prometheus import PipelineCollector
from ..context import Context
from ..deps import DB, Ctx, Viewer, pipeline_by_name

router = APIRouter(tags=["metrics"])

POLL_S = 0.2  # SSE delivers a step within this of its row landing


@router.get("/api/v1/pipelines/{name}/metrics", response_model=list[MetricOut])
def metrics_history(
    name: str,
    s: DB,
    _: Viewer,
    since: Annotated[float | None, Query(description="unix seconds")] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> list[MetricOut]:
    """Per-step samples (older ones downsampled to one per minute), oldest first."""
    p = pipeline_by_name(s, name)
    return [MetricOut.model_validate(r) for r in history.history(s, p.id, since, limit)]


@router.get("/api/v1/pipelines/{name}/dataflow", response_model=DataflowOut)
def dataflow(name: str, s: DB, _: Viewer) -> DataflowOut:
    """The pipeline's dataflow: its input, operators (stateful ones under their persistent
    ids), views and sinks, with each stateful operator's figures in the newest step."""
    p = pipeline_by_name(s, name)
    try:
        spec = parse_spec(p.spec)
        graph = pipeline_graph(spec)
    except SpecError as e:
        raise InvalidSpec("the stored spec does not plan", errors=e.errors) from None
    last = s.scalar(
        select(MetricSample)
        .where(MetricSample.pipeline_id == p.id, MetricSample.resolution_s == 0)
        .order_by(MetricSample.id.desc())
        .limit(1)
    )
    figures = (last.operators or {}) if last is not None else {}
    inputs = (last.inputs or {}) if last is not None else {}
    sinks = (last.sinks or {}) if last is not None else {}

    def table_input(n: GraphNode) -> dict[str, Any] | None:
        if n.kind != "table":
            return None
        # An operator spec's graph names its one table "source".
        return inputs.get(spec.source.table if n.id == "table:source" else n.label)

    return DataflowOut(
        nodes=[
            DataflowNode(
                id=n.id,
                kind=n.kind,
                label=n.label,
                view=n.view,
                operator=n.operator,
                metrics=figures.get(n.operator) if n.operator else None,
                input=table_input(n),
                sink=sinks.get(n.id.removeprefix("sink:")) if n.kind == "sink" else None,
            )
            for n in graph.nodes
        ],
        edges=[DataflowEdge(source=a, target=b) for a, b in graph.edges],
        step=last.step if last is not None else None,
    )


def _stream_start(
    ctx: Context, name: str, backlog: int, last_event_id: int | None
) -> tuple[int, int]:
    with ctx.db.session() as s:
        pid = pipeline_by_name(s, name).id
        if last_event_id is not None:
            return pid, last_event_id
        return pid, history.start_after(s, pid, backlog)


def _fetch(ctx: Context, pipeline_id: int, after: int) -> list[dict[str, Any]]:
    with ctx.db.session() as s:
        rows = history.live(s, pipeline_id, after)
        return [MetricOut.model_validate(r).model_dump() for r in rows]


@router.get(
    "/api/v1/pipelines/{name}/metrics/stream",
    response_class=EventSourceResponse,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "one `step` event per step"}
    },
)
async def metrics_stream(
    name: str,
    request: Request,
    ctx: Ctx,
    _: Viewer,
    last_event_id: Annotated[int | None, Header(ge=0, le=INT64_MAX)] = None,
    backlog: Annotated[int, Query(ge=0, le=1000, description="recent steps sent first")] = 0,
) -> EventSourceResponse:
    """Server-Sent Events: `event: step`, `id:` the sample id (reconnect with
    Last-Event-ID to resume), `data:` the sample as JSON."""
    # Database work runs in a thread: the event loop serves every other request.
    pid, after = await anyio.to_thread.run_sync(_stream_start, ctx, name, backlog, last_event_id)

    async def events() -> AsyncIterator[dict[str, str]]:
        nonlocal after
        while not await request.is_disconnected():
            rows = await anyio.to_thread.run_sync(_fetch, ctx, pid, after)
            for r in rows:
                after = r["id"]
                yield {"event": "step", "id": str(r["id"]), "data": json.dumps(r)}
            await asyncio.sleep(POLL_S)

    return EventSourceResponse(events(), ping=15)


@router.get(
    "/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}}
)
def prometheus(ctx: Ctx, _: Viewer) -> Response:
    """Prometheus exposition of every pipeline's series."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(PipelineCollector(ctx.db))
    return Response(generate_latest(reg), media_type=CONTENT_TYPE_LATEST)
