"""The API against its own OpenAPI document (schemathesis): every operation, called with
generated requests and an admin token, never answers 5xx and answers what the document
declares; without a token, everything but the health probes answers 401.

The app runs in-process on a SQLite file, with a task queue that only records what it was
asked to dispatch (no worker: nothing runs, operations stay pending). Two pipelines are
registered from docs/examples, and generated requests are pointed at them part of the time
so name-addressed routes reach real pipelines, not only 404s.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
import schemathesis
import yaml
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import response_schema_conformance

from backend.api.app import API, create_app
from backend.db import Database
from backend.migrate import upgrade
from backend.models import Role
from backend.services import tokens
from backend.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [ROOT / "docs/examples/clicks-per-user.yaml", ROOT / "docs/examples/ingest-log.yaml"]
SPECS = {d["name"]: d for d in (yaml.safe_load(p.read_text()) for p in EXAMPLES)}
NAMES = sorted(SPECS)
STREAMS = {"bids-from-log": "bids"}
VIEWS = {"bids-from-log": "latest"}

SSE = f"{API}/pipelines/{{name}}/metrics/stream"  # never ends: not called here
UNAUTHENTICATED = {"/healthz", "/readyz"}

SEED = 20241121
MAX_EXAMPLES = 25  # per operation; the module runs in ~15 s on 2 cores


@dataclass
class RecordingQueue:
    """`TaskQueue` that records what it is asked to dispatch and does nothing else."""

    launched: list[int] = field(default_factory=list)
    executed: list[str] = field(default_factory=list)

    def launch(self, run_id: int) -> None:
        self.launched.append(run_id)

    def execute(self, operation_id: str) -> None:
        self.executed.append(operation_id)

    def ready(self) -> str:
        return "ok"


@dataclass
class Platform:
    app: FastAPI
    db: Database
    queue: RecordingQueue
    token: str

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def restore_fixtures(self) -> None:
        """Put back what a generated request may have removed: the admin token we call with
        (DELETE /tokens/{id} may pick it once another admin exists) and the two pipelines
        (DELETE /pipelines/{name} of a stopped one)."""
        with self.db.session() as s:
            if tokens.authenticate(s, self.token) is None:
                tokens.create(s, "schemathesis", Role.admin, self.token)
        with TestClient(self.app) as c:
            have = {p["name"] for p in c.get(f"{API}/pipelines", headers=self.headers()).json()}
            for name in NAMES:
                if name not in have:
                    r = c.post(
                        f"{API}/pipelines", json={"spec": SPECS[name]}, headers=self.headers()
                    )
                    assert r.status_code == 201, r.text


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    data = tmp_path_factory.mktemp("schemathesis")
    cfg = Settings(data_dir=data, database_url=f"sqlite:///{data / 'spindle.db'}")
    cfg.data_path.mkdir(parents=True, exist_ok=True)
    upgrade(cfg.db_url)
    db = Database(cfg.db_url)
    with db.session() as s:
        _, secret = tokens.create(s, "schemathesis", Role.admin)
    queue = RecordingQueue()
    p = Platform(create_app(cfg, db, queue), db, queue, secret)
    p.restore_fixtures()
    yield p
    db.dispose()


def _document_app() -> FastAPI:
    """The app with nothing behind it, to read its OpenAPI document at import time (building
    the app touches neither the database nor the data directory)."""
    cfg = Settings(data_dir=Path("/nonexistent/spindle-schemathesis"))
    return create_app(cfg, Database("sqlite://"), RecordingQueue())


CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": SEED,
        "generation": {
            "max-examples": MAX_EXAMPLES,
            "deterministic": True,
            "database": "none",
            # The token is sent by the test; generated Authorization values would only test
            # the 401 path, which the second test covers.
            "with-security-parameters": False,
        },
        # `?wait=true` polls until the operation finishes or `timeout_s` passes; nothing
        # performs operations here, so keep the wait short.
        "parameters": {"query.timeout_s": 0.05},
    }
)
schema = schemathesis.openapi.from_asgi(
    f"{API}/openapi.json", _document_app(), config=CONFIG
).exclude(method="GET", path=SSE)


@schemathesis.serializer("application/x-ndjson")
def _ndjson(ctx: Any, value: Any) -> bytes:
    """Ingest declares its NDJSON body as a string: send it as is (schemathesis has no
    serializer for this media type; without one it never generates NDJSON bodies)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return json.dumps(value).encode()


# Bids as the `log` source of bids-from-log declares them (auction, bidder bigint; price
# double; ts timestamp), mostly well-formed, sometimes not, so ingest's success path and its
# parsing of edge values are both exercised.
_BIDS = ("auction", "bidder", "price", "ts")
_BID = st.fixed_dictionaries(
    {
        "auction": st.integers(-(2**63), 2**63 - 1),
        "bidder": st.integers(-(2**63), 2**63 - 1),
        "price": st.floats(),
        "ts": st.datetimes(timezones=st.sampled_from([dt.UTC, None])).map(dt.datetime.isoformat),
    }
)
_JUNK = st.dictionaries(
    st.sampled_from(_BIDS) | st.text(max_size=5),
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    max_size=5,
)


@st.composite
def _ingest_body(draw: st.DrawFn) -> tuple[str, str]:
    """(body, media type): NDJSON or CSV with a header."""
    rows = draw(st.lists(_BID | _JUNK, min_size=1, max_size=20))
    if draw(st.booleans()):
        return "".join(json.dumps(r) + "\n" for r in rows), "application/x-ndjson"
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=_BIDS, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    return out.getvalue(), "text/csv"


def _aim_at_real_pipelines(case: schemathesis.Case, data: st.DataObject) -> None:
    """Half the time, address one of the registered pipelines (and its stream / view); an
    ingest into the real stream then mostly carries records of its schema."""
    params = case.path_parameters
    if not params or "name" not in params or not data.draw(st.booleans(), label="real"):
        return
    name = data.draw(st.sampled_from(NAMES), label="name")
    params["name"] = name
    if "stream" in params and name in STREAMS:
        params["stream"] = STREAMS[name]
        if data.draw(st.integers(0, 3), label="records") > 0:
            body, media_type = data.draw(_ingest_body(), label="records")
            case.body = body
            case.media_type = media_type
            query = dict(case.query or {})
            query.pop("format", None)
            case.query = query
    if "view" in params and name in VIEWS:
        params["view"] = VIEWS[name]


@schema.given(data=st.data())
@settings(suppress_health_check=list(HealthCheck), deadline=None)
@schema.parametrize()
def test_no_server_errors_and_responses_match_the_schema(
    case: schemathesis.Case, data: st.DataObject, platform: Platform
) -> None:
    _aim_at_real_pipelines(case, data)
    response = case.call(app=platform.app, headers=platform.headers())
    case.validate_response(
        response,
        checks=[not_a_server_error, response_schema_conformance],
        headers=platform.headers(),
    )
    if case.method.upper() == "DELETE":
        platform.restore_fixtures()


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("DELETE", f"{API}/tokens/{2**63}", None),
        ("GET", f"{API}/pipelines/bids-from-log/logs?run={2**63}", None),
        ("PUT", f"{API}/pipelines/bids-from-log/retention", {"keep_last": 2**63}),
        ("PUT", f"{API}/pipelines/bids-from-log/retention", {"min_keep": 2**63}),
    ],
)
def test_out_of_range_integers_are_client_errors(
    platform: Platform, method: str, path: str, body: dict[str, int] | None
) -> None:
    with TestClient(platform.app, raise_server_exceptions=False) as c:
        r = c.request(method, path, json=body, headers=platform.headers())
    assert r.status_code == 422, (method, path, r.status_code, r.text)


def test_every_operation_but_health_needs_a_token(platform: Platform) -> None:
    """No Authorization header: 401 with the JSON error and a Bearer challenge, before any
    parameter is looked at (path parameters are filled with "1", no body is sent)."""
    loaded = schemathesis.openapi.from_asgi(f"{API}/openapi.json", platform.app)
    seen = 0
    with TestClient(platform.app) as c:
        for result in loaded.get_all_operations():
            op = result.ok()
            seen += 1
            r = c.request(op.method.upper(), re.sub(r"\{[^}]+\}", "1", op.path))
            if op.path in UNAUTHENTICATED:
                assert r.status_code == 200, (op.label, r.status_code, r.text)
            else:
                assert r.status_code == 401, (op.label, r.status_code, r.text)
                assert r.json()["code"] == "unauthorized"
                assert r.headers["www-authenticate"] == "Bearer"
    assert seen >= 30
