"""Helpers for the control plane's fast tests (no Spark, no Celery worker).

- `RecordingQueue`: a `TaskQueue` test double that records what the API hands to workers.
- `make_api`: a migrated database, an admin token and a `TestClient` over `create_app`.
- Builders for real storage locations (checkpoints, views) and metric rows, so the API
  reads what a pipeline would have written, through the engine's own code.
"""

from __future__ import annotations

import asyncio
import copy
import json
import queue as queue_mod
import re
import threading
import time
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import yaml
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy import select
from starlette.routing import BaseRoute

from backend.api.app import create_app
from backend.api.read_cache import ReadCache
from backend.db import Database
from backend.migrate import upgrade
from backend.models import (
    DesiredState,
    MetricSample,
    Operation,
    OperationKind,
    Pipeline,
    PipelineState,
    Role,
    Run,
)
from backend.services import lifecycle, metrics, tokens
from backend.services import operations as ops
from backend.settings import Settings
from pipeline_spec.model import ViewSink as ViewSinkSpec
from storage_engine import WEIGHT, Batch, StorageLocation, ZSetSchema
from storage_engine.input_log import InputLog
from workers.jobs import offline
from workers.runtime.connectors.view_sink import ViewSink

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
API = "/api/v1"

# Small limits, so the 413 tests need no large bodies; every other body fits easily.
MAX_BODY_BYTES = 20_000
MAX_INGEST_BYTES = 1_000


class RecordingQueue:
    """The TaskQueue protocol, recording its calls; `status` is what ready() answers."""

    def __init__(self, status: str = "ok") -> None:
        self.launched: list[int] = []
        self.executed: list[str] = []
        self.status = status

    def launch(self, run_id: int) -> None:
        self.launched.append(run_id)

    def execute(self, operation_id: str) -> None:
        self.executed.append(operation_id)

    def ready(self) -> str:
        return self.status


def example(name: str) -> dict[str, Any]:
    """A spec from docs/examples (by file stem), as the API receives it."""
    doc = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    assert isinstance(doc, dict)
    return doc


def clicks_spec(name: str = "clicks-per-user") -> dict[str, Any]:
    """clicks-per-user.yaml with an extra `view` sink `v` over `per_user`, renamed."""
    spec = example("clicks-per-user")
    spec["name"] = name
    spec["sinks"] = [*spec["sinks"], {"name": "v", "kind": "view", "from": "per_user"}]
    return spec


def log_spec(name: str = "bids-from-log") -> dict[str, Any]:
    spec = example("ingest-log")
    spec["name"] = name
    return spec


def with_changes(spec: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    out.update(changes)
    return out


@dataclass
class Api:
    """The app under test with its parts, and shorthands that authenticate as admin."""

    client: TestClient
    app: FastAPI
    settings: Settings
    db: Database
    queue: RecordingQueue
    admin: str
    kind: str  # "sqlite" or "postgresql"
    now: list[float]  # the read cache's clock

    def reads_expire(self) -> None:
        """Let the read cache's entries expire, as a client polling a changed state waits
        for: changes made outside the API (the worker's, another process's) show then."""
        self.now[0] += self.settings.read_cache_s

    # -- HTTP ---------------------------------------------------------------------------

    def auth(self, token: str | None = "admin") -> dict[str, str]:
        if token is None:
            return {}
        secret = self.admin if token == "admin" else token
        return {"Authorization": f"Bearer {secret}"}

    def request(
        self, method: str, path: str, token: str | None = "admin", **kw: Any
    ) -> httpx.Response:
        headers = {**self.auth(token), **kw.pop("headers", {})}
        url = path if path.startswith("/") else f"{API}/{path}"
        response: httpx.Response = self.client.request(method, url, headers=headers, **kw)
        return response

    def get(self, path: str, token: str | None = "admin", **kw: Any) -> httpx.Response:
        return self.request("GET", path, token, **kw)

    def post(self, path: str, token: str | None = "admin", **kw: Any) -> httpx.Response:
        return self.request("POST", path, token, **kw)

    def put(self, path: str, token: str | None = "admin", **kw: Any) -> httpx.Response:
        return self.request("PUT", path, token, **kw)

    def patch(self, path: str, token: str | None = "admin", **kw: Any) -> httpx.Response:
        return self.request("PATCH", path, token, **kw)

    def delete(self, path: str, token: str | None = "admin", **kw: Any) -> httpx.Response:
        return self.request("DELETE", path, token, **kw)

    # -- records ------------------------------------------------------------------------

    def token(self, role: Role, name: str | None = None) -> str:
        """A new token's secret, created in the database directly."""
        with self.db.session() as s:
            _, secret = tokens.create(s, name or f"{role.value}-token", role)
        return secret

    def create_pipeline(self, spec: dict[str, Any], description: str = "") -> dict[str, Any]:
        r = self.post("pipelines", json={"spec": spec, "description": description})
        assert r.status_code == 201, r.text
        body = r.json()
        assert isinstance(body, dict)
        return body

    def pipeline_id(self, name: str) -> int:
        with self.db.session() as s:
            pid = s.scalar(select(Pipeline.id).where(Pipeline.name == name))
        assert pid is not None
        return pid

    def set_state(
        self, name: str, state: PipelineState, desired: DesiredState | None = None
    ) -> None:
        with self.db.session() as s:
            p = s.scalar(select(Pipeline).where(Pipeline.name == name))
            assert p is not None
            p.state = state
            if desired is not None:
                p.desired_state = desired

    def runs(self, name: str) -> list[Run]:
        with self.db.session() as s:
            return list(
                s.scalars(
                    select(Run).where(Run.pipeline_id == self.pipeline_id(name)).order_by(Run.id)
                )
            )

    def operation(self, op_id: str) -> Operation:
        with self.db.session() as s:
            op = s.get(Operation, op_id)
            assert op is not None
            s.expunge(op)
            return op

    def add_operation(
        self, name: str, kind: OperationKind, params: dict[str, Any] | None = None
    ) -> str:
        """A pending operation inserted directly (for kinds the API refuses to queue)."""
        with self.db.session() as s:
            p = s.scalar(select(Pipeline).where(Pipeline.name == name))
            assert p is not None
            return ops.create(s, p, kind, params or {}).id

    def run_offline(self, op_id: str) -> dict[str, Any]:
        """Perform a queued operation as the worker does for a stopped pipeline; the
        operation as the API then shows it."""
        offline.execute(self.db, self.settings, op_id)
        r = self.get(f"operations/{op_id}")
        assert r.status_code == 200, r.text
        body = r.json()
        assert isinstance(body, dict)
        return body

    def storage(self, name: str) -> Path:
        return self.settings.storage_dir(name)


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


@contextmanager
def make_api(
    url: str, data_dir: Path, queue: RecordingQueue | None = None, **settings: Any
) -> Iterator[Api]:
    """A migrated database at `url` with one admin token, and a client over the app."""
    upgrade(url)
    opts: dict[str, Any] = {
        "max_body_bytes": MAX_BODY_BYTES,
        "max_ingest_bytes": MAX_INGEST_BYTES,
        **settings,
    }
    cfg = Settings(data_dir=data_dir, database_url=url, **opts)
    data_dir.mkdir(parents=True, exist_ok=True)
    db = Database(url)
    with db.session() as s:
        _, admin = tokens.create(s, "admin", Role.admin)
    q = queue or RecordingQueue()
    app = create_app(cfg, db, q)
    now = [0.0]
    app.state.ctx.reads = ReadCache(cfg.read_cache_s, clock=lambda: now[0])
    client = TestClient(app)
    kind = "sqlite" if url.startswith("sqlite") else "postgresql"
    api = Api(client, app, cfg, db, q, admin, kind, now)
    try:
        yield api
    finally:
        client.close()
        db.dispose()


# -- routes -----------------------------------------------------------------------------------

# Health, and the web console's static files (the data behind them needs a token).
UNAUTHENTICATED = {"/healthz", "/readyz", "/", "/ui", "/ui/{path:path}"}
PARAM = re.compile(r"\{(\w+)(?::\w+)?\}")
DUMMY = {
    "name": "no-such-pipeline",
    "uuid": "00000000-0000-0000-0000-000000000000",
    "op_id": "00000000-0000-0000-0000-000000000000",
    "token_id": "1",
    "run_id": "1",
    "operation_id": "00000000-0000-0000-0000-000000000000",
    "stream": "bids",
    "view": "v",
}


def api_routes(routes: Sequence[BaseRoute]) -> Iterator[APIRoute]:
    """Every APIRoute, looking inside included routers (FastAPI >= 0.16x wraps each
    `include_router` in a route object that keeps the router as `original_router`)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
            continue
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from api_routes(inner.routes)


def protected_endpoints(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path template) of every API route except health and the docs. Cross-checked
    against the OpenAPI document, so a route the walk misses fails here rather than going
    untested."""
    docs = {
        u
        for u in (app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url)
        if u
    }
    found: set[tuple[str, str]] = set()
    for route in app.routes:
        if isinstance(route, APIRoute) or getattr(route, "original_router", None) is not None:
            continue
        assert getattr(route, "path", None) in docs, f"unexpected route {route!r}"
    for route in api_routes(app.routes):
        found |= {(m, route.path) for m in route.methods or ()}
    documented = {
        (m.upper(), path)
        for path, item in app.openapi()["paths"].items()
        for m in item
        if m in ("get", "post", "put", "patch", "delete")
    }
    assert documented <= found, f"routes not found by walking app.routes: {documented - found}"
    return [(method, path) for method, path in sorted(found) if path not in UNAUTHENTICATED]


def fill(template: str, **values: str) -> str:
    """A route template with its parameters filled: `values`, else dummy values."""
    return PARAM.sub(lambda m: values.get(m.group(1), DUMMY[m.group(1)]), template)


# -- storage --------------------------------------------------------------------------------

STATE = ZSetSchema.of([("k", pa.int64())], [("v", pa.int64())])


def build_checkpoints(
    storage: Path,
    n: int,
    first_step: int = 1,
    offsets: Sequence[int] | None = None,
    fingerprint: str = "",
) -> list[str]:
    """`n` checkpoints (oldest first) in a real storage location, at steps first_step, ...
    and source offsets `offsets` (default step * 10), taken by a circuit of `fingerprint`.
    Each holds its own batch file (the location is reopened empty before each commit), so
    deleting any one frees bytes."""
    uids = []
    for i in range(n):
        step = first_step + i
        offset = offsets[i] if offsets is not None else step * 10
        with StorageLocation.open(str(storage), fingerprint=fingerprint, checkpoint="none") as loc:
            sp = loc.spine("per_user", STATE)
            sp.insert(Batch.from_tuples(STATE, [((step * 1000 + j,), (j,), 1) for j in range(64)]))
            meta = {"source_offsets": {"input": offset}}
            uids.append(loc.commit(step=step, metadata=meta))
    return uids


VIEW_SCHEMA = pa.schema([("user", pa.int64()), ("clicks", pa.int64())])


def delta(rows: Sequence[tuple[int, int, int]]) -> pa.Table:
    """A view delta: (user, clicks, weight) rows, the weight in the `__weight` column."""
    return pa.table(
        {
            "user": pa.array([r[0] for r in rows], pa.int64()),
            "clicks": pa.array([r[1] for r in rows], pa.int64()),
            WEIGHT: pa.array([r[2] for r in rows], pa.int64()),
        }
    )


def write_view(
    storage: Path, view: str, deltas: Sequence[pa.Table], step: int, operator: str = "per_user"
) -> str:
    """Write `deltas` through a real ViewSink over the storage location, then checkpoint
    at `step`; returns the checkpoint's uuid."""
    with StorageLocation.open(str(storage)) as loc:
        sink = ViewSink(
            ViewSinkSpec(name=view, kind="view", **{"from": operator}), VIEW_SCHEMA, loc
        )
        for i, d in enumerate(deltas):
            sink.write(step - len(deltas) + 1 + i, d)
        return loc.commit(step=step)


# -- metrics -------------------------------------------------------------------------------


def add_samples(db: Database, pipeline_id: int, samples: Sequence[dict[str, Any]]) -> list[int]:
    """Insert metric rows (fields of MetricSample; resolution 0 unless given) and grow the
    pipeline's totals by them, as a run's control loop does; their ids."""
    with db.session() as s:
        rows = [MetricSample(pipeline_id=pipeline_id, **{"step": 0, **x}) for x in samples]
        s.add_all(rows)
        s.flush()
        metrics.add_totals(
            s,
            pipeline_id,
            steps=sum(r.steps or 1 for r in rows),
            rows_in=sum(r.rows_in or 0 for r in rows),
            rows_out=sum(r.rows_out or 0 for r in rows),
            dead_letters=sum(r.dead_letters or 0 for r in rows),
            late_rows=sum(r.late_rows or 0 for r in rows),
        )
        metrics.add_shard_totals(s, pipeline_id, [r.operators for r in rows])
        return [r.id for r in rows]


# -- ingest -------------------------------------------------------------------------------

BID_SCHEMA = pa.schema(
    [
        ("auction", pa.int64()),
        ("bidder", pa.int64()),
        ("price", pa.float64()),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)


def bid(i: int) -> dict[str, Any]:
    return {
        "auction": i % 3,
        "bidder": 100 + i,
        "price": 1.5 * i,
        "ts": f"2024-01-01T00:00:{i % 60:02d}Z",
    }


def ndjson(records: Sequence[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def input_log(storage: Path, stream: str = "bids") -> InputLog:
    return InputLog(str(storage / "input-log" / stream), BID_SCHEMA)


# -- raw ASGI --------------------------------------------------------------------------------


def asgi_request(
    app: FastAPI,
    method: str,
    path: str,
    headers: dict[str, str],
    on_response_sent: Callable[[], None],
) -> int:
    """One request straight through the ASGI interface (no client), calling
    `on_response_sent` at the moment the last byte of the response is handed to the server,
    that is when a real client can act on it. Returns the status."""
    status = 0
    state = {"sent": False}

    async def receive() -> dict[str, Any]:
        if not state["sent"]:
            state["sent"] = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the client stays connected
        raise AssertionError("unreachable")

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
        elif message["type"] == "http.response.body" and not message.get("more_body"):
            on_response_sent()

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }

    async def main() -> None:
        await asyncio.wait_for(app(scope, receive, send), timeout=30)

    asyncio.run(main())
    return status


# -- server-sent events ---------------------------------------------------------------------


class LineReader:
    """Reads a streaming response's lines on a thread, so every read can time out instead
    of blocking the test forever."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines: queue_mod.Queue[str | BaseException | None] = queue_mod.Queue()
        self._thread = threading.Thread(target=self._run, args=(response,), daemon=True)
        self._thread.start()

    def _run(self, response: httpx.Response) -> None:
        try:
            for line in response.iter_lines():
                self.lines.put(line)
            self.lines.put(None)
        except BaseException as e:  # the stream closed under us: the test is done with it
            self.lines.put(e)

    def next_line(self, timeout: float) -> str:
        try:
            got = self.lines.get(timeout=timeout)
        except queue_mod.Empty:
            raise AssertionError(f"no line from the stream within {timeout}s") from None
        if got is None:
            raise AssertionError("the stream ended")
        if isinstance(got, BaseException):
            raise AssertionError(f"the stream failed: {got!r}")
        return got

    def next_event(self, timeout: float = 10.0) -> dict[str, str]:
        """The next event's fields (`event`, `id`, `data`); comments (pings) skipped."""
        deadline = time.monotonic() + timeout
        fields: dict[str, str] = {}
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no complete event within {timeout}s (have {fields})")
            line = self.next_line(left)
            if line == "":
                if fields:
                    return fields
                continue
            if line.startswith(":"):
                continue
            key, _, value = line.partition(":")
            fields[key] = value.removeprefix(" ")

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


__all__ = [
    "API",
    "BID_SCHEMA",
    "EXAMPLES",
    "MAX_BODY_BYTES",
    "MAX_INGEST_BYTES",
    "STATE",
    "VIEW_SCHEMA",
    "Api",
    "LineReader",
    "RecordingQueue",
    "add_samples",
    "api_routes",
    "asgi_request",
    "bid",
    "build_checkpoints",
    "clicks_spec",
    "delta",
    "example",
    "fill",
    "input_log",
    "log_spec",
    "make_api",
    "ndjson",
    "protected_endpoints",
    "sqlite_url",
    "with_changes",
    "write_view",
]


CLICKS = "clicks-per-user"
BIDS = "bids-from-log"
NDJSON = {"Content-Type": "application/x-ndjson"}
UNKNOWN_UUID = "0f0f0f0f-0000-4000-8000-000000000000"


def error(r: Any, status: int, code: str) -> dict[str, Any]:
    """The JSON error body of `r`, after checking its status and code."""
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert isinstance(body, dict)
    assert body["code"] == code, body
    assert isinstance(body["message"], str) and body["message"]
    return body


def fields(body: dict[str, Any]) -> list[str]:
    return [e["field"] for e in body["errors"]]


def end_run(api: Api, name: str, code: int) -> None:
    """The supervisor's bookkeeping when the live run's driver exits with `code`."""
    with api.db.session() as s:
        p = s.scalar(select(Pipeline).where(Pipeline.name == name))
        assert p is not None
        run = lifecycle.live_run(s, p)
        assert run is not None
        lifecycle.run_exited(s, run, code)
    api.reads_expire()
