"""The REST API (`backend.api.app.create_app`) end to end over a real metadata database, each
test on SQLite and on PostgreSQL: auth and roles, spec validation, pipelines, lifecycle,
checkpoints and operations (performed the way the worker performs them for a stopped
pipeline), ingest, views, metrics (history, Prometheus, Server-Sent Events) and health.

No Spark and no Celery: the TaskQueue is a recording double (the Celery path is tested with
the workers), and storage locations are built with the engine itself, so the API reads
exactly what a run would have written.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from backend.api.read_cache import ReadCache
from backend.models import (
    ApiToken,
    Checkpoint,
    DesiredState,
    MetricSample,
    Operation,
    OperationKind,
    Pipeline,
    PipelineState,
    RetentionPolicy,
    Role,
    Run,
    RunState,
)
from backend.services import checkpoints as cps
from backend.services import lifecycle, tokens
from pipeline_spec import exits
from pipeline_spec.model import ViewSink as ViewSinkSpec
from storage_engine import StorageLocation
from storage_engine.schema import WEIGHT
from workers.sinks import ViewSink

from .api_fixtures import (
    MAX_BODY_BYTES,
    MAX_INGEST_BYTES,
    Api,
    LineReader,
    RecordingQueue,
    add_samples,
    asgi_request,
    bid,
    build_checkpoints,
    clicks_spec,
    delta,
    example,
    fill,
    input_log,
    log_spec,
    make_api,
    ndjson,
    protected_endpoints,
    sqlite_url,
    with_changes,
    write_view,
)

pytestmark = pytest.mark.timeout(120)

CLICKS = "clicks-per-user"
BIDS = "bids-from-log"
NDJSON = {"Content-Type": "application/x-ndjson"}
UNKNOWN_UUID = "0f0f0f0f-0000-4000-8000-000000000000"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "spindle.db")
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def api(db_url: str, tmp_path: Path) -> Iterator[Api]:
    with make_api(db_url, tmp_path / "data") as a:
        yield a


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


# -- auth ---------------------------------------------------------------------------------


def test_every_route_but_health_needs_a_valid_token(api: Api) -> None:
    endpoints = protected_endpoints(api.app)
    assert len(endpoints) >= 25  # every row of the API table, not an empty walk
    assert ("POST", "/api/v1/pipelines/{name}/ingest/{stream}") in endpoints
    assert ("GET", "/metrics") in endpoints
    bad_credentials: list[dict[str, str]] = [
        {},
        {"Authorization": "Bearer spd_not-a-token"},
        {"Authorization": f"Basic {api.admin}"},
        {"Authorization": "Bearer "},
    ]
    for method, template in endpoints:
        path = fill(template)
        for headers in bad_credentials:
            r = api.request(method, path, token=None, headers=headers)
            body = error(r, 401, "unauthorized")
            assert r.headers["www-authenticate"] == "Bearer", (method, path)
            assert set(body) == {"code", "message", "errors", "details"}
    for path in ("/healthz", "/readyz"):
        assert api.get(path, token=None).status_code == 200
    # The docs stay public.
    assert api.get("/api/v1/openapi.json", token=None).status_code == 200


def test_roles(api: Api) -> None:
    viewer = api.token(Role.viewer)
    operator = api.token(Role.operator)
    body = {"spec": clicks_spec()}
    assert api.get("pipelines", token=viewer).status_code == 200
    assert api.post("pipelines/validate", token=viewer, json=body).status_code == 200
    error(api.post("pipelines", token=viewer, json=body), 403, "forbidden")
    for method in ("GET", "POST"):
        kw: dict[str, Any] = {"json": {"name": "x", "role": "viewer"}} if method == "POST" else {}
        error(api.request(method, "tokens", token=viewer, **kw), 403, "forbidden")
        error(api.request(method, "tokens", token=operator, **kw), 403, "forbidden")
    error(api.delete("tokens/1", token=operator), 403, "forbidden")

    assert api.post("pipelines", token=operator, json=body).status_code == 201
    error(api.post(f"pipelines/{CLICKS}/start", token=viewer), 403, "forbidden")
    error(api.delete(f"pipelines/{CLICKS}", token=operator), 403, "forbidden")
    assert api.get(f"pipelines/{CLICKS}", token=operator).status_code == 200
    assert api.delete(f"pipelines/{CLICKS}").status_code == 204
    assert api.get("tokens").status_code == 200


def test_tokens_show_the_secret_once_and_never_list_it(api: Api) -> None:
    r = api.post("tokens", json={"name": "ci", "role": "operator"})
    assert r.status_code == 201, r.text
    created = r.json()
    secret = created["token"]
    assert secret.startswith("spd_") and len(secret) > 40
    assert created["prefix"] == secret[:12]
    assert created["role"] == "operator" and created["name"] == "ci"
    # It works, with its role.
    assert api.post("pipelines", token=secret, json={"spec": clicks_spec()}).status_code == 201
    error(api.get("tokens", token=secret), 403, "forbidden")

    listing = api.get("tokens")
    assert listing.status_code == 200
    rows = listing.json()
    assert [t["name"] for t in rows] == ["admin", "ci"]
    for t in rows:
        assert set(t) == {"id", "name", "role", "prefix", "created_at", "last_used_at"}
    for s in (secret, api.admin):
        assert s not in listing.text
        assert tokens.digest(s) not in listing.text
    # Using a token records it.
    ci = next(t for t in rows if t["name"] == "ci")
    assert ci["last_used_at"] is not None

    error(api.post("tokens", json={"name": "", "role": "viewer"}), 422, "invalid_request")
    error(api.post("tokens", json={"name": "x", "role": "root"}), 422, "invalid_request")


def test_deleting_tokens(api: Api) -> None:
    ids = {t["name"]: t["id"] for t in api.get("tokens").json()}
    body = error(api.delete(f"tokens/{ids['admin']}"), 409, "conflict")
    assert "last admin" in body["message"]
    second = api.post("tokens", json={"name": "admin-2", "role": "admin"}).json()
    viewer = api.post("tokens", json={"name": "viewer", "role": "viewer"}).json()
    assert api.get("pipelines", token=viewer["token"]).status_code == 200
    assert api.delete(f"tokens/{viewer['id']}").status_code == 204
    error(api.get("pipelines", token=viewer["token"]), 401, "unauthorized")
    # An admin may remove the other admin, then is the last one.
    assert api.delete(f"tokens/{second['id']}").status_code == 204
    error(api.get("pipelines", token=second["token"]), 401, "unauthorized")
    error(api.delete(f"tokens/{ids['admin']}"), 409, "conflict")
    error(api.delete("tokens/99999"), 404, "not_found")
    assert [t["name"] for t in api.get("tokens").json()] == ["admin"]


def test_a_token_revoked_by_another_api_process_works_until_its_cache_entry_expires(
    api: Api,
) -> None:
    now = [1000.0]
    api.app.state.ctx.tokens = tokens.TokenCache(5.0, clock=lambda: now[0])
    viewer = api.post("tokens", json={"name": "viewer", "role": "viewer"}).json()
    assert api.get("pipelines", token=viewer["token"]).status_code == 200
    # Another API process revokes it: this one's cache does not know yet.
    with api.db.session() as s:
        s.delete(s.get(ApiToken, viewer["id"]))
    now[0] += 4.9
    assert api.get("pipelines", token=viewer["token"]).status_code == 200
    now[0] += 0.2
    error(api.get("pipelines", token=viewer["token"]), 401, "unauthorized")
    # A cached answer keeps its role: a viewer is still refused a write.
    other = api.post("tokens", json={"name": "viewer-2", "role": "viewer"}).json()
    assert api.get("pipelines", token=other["token"]).status_code == 200
    error(
        api.post("tokens", token=other["token"], json={"name": "x", "role": "admin"}),
        403,
        "forbidden",
    )


def test_a_write_is_committed_before_the_response_is_sent(api: Api) -> None:
    victim = api.post("tokens", json={"name": "victim", "role": "viewer"}).json()
    seen: dict[str, bool] = {}

    def at_response() -> None:
        with api.db.session() as s:
            seen["row_still_there"] = s.get(ApiToken, victim["id"]) is not None

    status = asgi_request(
        api.app, "DELETE", f"/api/v1/tokens/{victim['id']}", api.auth(), at_response
    )
    assert status == 204
    assert seen == {"row_still_there": False}


# -- the read cache -------------------------------------------------------------------------


def test_polled_reads_show_outside_changes_after_the_cache_interval(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    listed = api.get("pipelines").json()
    assert [p["state"] for p in listed] == ["stopped"]
    one = api.get(f"pipelines/{CLICKS}").json()
    api.set_state(CLICKS, PipelineState.failed)  # as a worker would
    assert api.get("pipelines").json() == listed
    assert api.get(f"pipelines/{CLICKS}").json() == one
    api.now[0] += api.settings.read_cache_s - 0.01
    assert api.get("pipelines").json() == listed
    api.now[0] += 0.01
    assert [p["state"] for p in api.get("pipelines").json()] == ["failed"]
    assert api.get(f"pipelines/{CLICKS}").json()["state"] == "failed"


def test_a_write_through_the_api_shows_in_the_next_read(api: Api) -> None:
    assert api.get("pipelines").json() == []
    error(api.get(f"pipelines/{CLICKS}"), 404, "not_found")
    assert api.get(f"pipelines/{CLICKS}/checkpoints").status_code == 404
    api.create_pipeline(clicks_spec())
    assert [p["name"] for p in api.get("pipelines").json()] == [CLICKS]
    assert api.get(f"pipelines/{CLICKS}").json()["description"] == ""
    assert api.get(f"pipelines/{CLICKS}/checkpoints").json() == []
    r = api.put(f"pipelines/{CLICKS}", json={"spec": clicks_spec(), "description": "new"})
    assert r.status_code == 200, r.text
    assert api.get(f"pipelines/{CLICKS}").json()["description"] == "new"
    assert api.get("pipelines").json()[0]["description"] == "new"
    # Errors are never kept: a pipeline that appears outside the API is found at once.
    error(api.get("pipelines/other"), 404, "not_found")
    with api.db.session() as s:
        s.add(Pipeline(name="other", spec=with_changes(clicks_spec(), name="other")))
    assert api.get("pipelines/other").status_code == 200


def test_the_cache_checks_the_token_first_and_is_keyed_by_query(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    assert api.get("pipelines").status_code == 200
    error(api.get("pipelines", token=None), 401, "unauthorized")
    error(api.get("pipelines", token="spd_wrong"), 401, "unauthorized")
    viewer = api.token(Role.viewer)
    assert api.get("pipelines", token=viewer).json() == api.get("pipelines").json()
    assert api.get("pipelines?x=1").json() == api.get("pipelines").json()


def test_a_read_that_started_before_a_write_is_not_kept() -> None:
    cache = ReadCache(1.0, clock=lambda: 0.0)
    started = cache.generation
    cache.invalidate()  # a write committed while the read was running
    cache.put("k", b"old", started)
    assert cache.get("k") is None
    cache.put("k", b"new", cache.generation)
    assert cache.get("k") == b"new"


def test_a_zero_interval_turns_the_cache_off(db_url: str, tmp_path: Path) -> None:
    with make_api(db_url, tmp_path / "data", read_cache_s=0) as api:
        api.create_pipeline(clicks_spec())
        assert api.get(f"pipelines/{CLICKS}").json()["state"] == "stopped"
        api.set_state(CLICKS, PipelineState.failed)
        assert api.get(f"pipelines/{CLICKS}").json()["state"] == "failed"


# -- specs ----------------------------------------------------------------------------------


def test_validate_names_every_bad_field(api: Api) -> None:
    spec = clicks_spec()
    del spec["source"]
    spec["state"][0]["group_by"] = "user"
    spec["bogus"] = 1
    body = error(api.post("pipelines/validate", json={"spec": spec}), 422, "invalid_spec")
    assert sorted(fields(body)) == ["bogus", "source", "state.0.group_by"]
    # Creating with the same spec fails the same way and creates nothing.
    r = api.post("pipelines", json={"spec": spec})
    assert fields(error(r, 422, "invalid_spec")) == fields(body)
    assert api.get("pipelines").json() == []
    ok = api.post("pipelines/validate", json={"spec": clicks_spec()})
    assert ok.status_code == 200 and ok.json() == {"valid": True, "name": CLICKS}
    # The envelope itself is checked too.
    body = error(api.post("pipelines/validate", json={"spek": {}}), 422, "invalid_request")
    assert "spec" in fields(body) and "spek" in fields(body)


def test_out_of_range_numbers_and_nul_paths_are_422s_naming_the_field(api: Api) -> None:
    """Each of these was a 500 (NUL byte in a path; an integer past SQLite's) or was stored
    as a spec the API could not hand back (1e999 read back as null)."""
    api.create_pipeline(clicks_spec())
    cases: list[tuple[str, str, str]] = [
        ('"keep_last": 5', f'"keep_last": {2**64}', "retention.keep_last"),
        ('"rows_per_second": 20000', '"rows_per_second": 1e999', "source.rows_per_second"),
        ('"rows_per_second": 20000', '"rows_per_second": Infinity', "source.rows_per_second"),
        ('"interval": "500ms"', '"interval": NaN', "trigger.interval"),
        ('"seed": 7', f'"seed": {2**70}', "source.seed"),
        ('"path": "out/clicks-per-user"', '"path": "out/a\\u0000b"', "sinks.0.path"),
    ]
    for old, new, field in cases:
        text = json.dumps({"spec": clicks_spec()})
        assert old in text, old
        body = text.replace(old, new).encode()
        for method, url in [
            ("POST", "pipelines/validate"),
            ("POST", "pipelines"),
            ("PUT", f"pipelines/{CLICKS}"),
        ]:
            r = api.request(
                method, url, "admin", content=body, headers={"Content-Type": "application/json"}
            )
            assert fields(error(r, 422, "invalid_spec")) == [field], (new, url)
    # What GET returns can be PUT back.
    spec = api.get(f"pipelines/{CLICKS}").json()["spec"]
    assert api.put(f"pipelines/{CLICKS}", json={"spec": spec}).status_code == 200


def test_a_body_that_is_not_utf8_json_is_a_422(api: Api) -> None:
    for body in (b'{"spec": "\xff"}', b"\xfe\xff", b"{not json"):
        r = api.request(
            "POST", "pipelines", "admin", content=body, headers={"Content-Type": "application/json"}
        )
        assert error(r, 422, "invalid_request")["errors"][0]["field"] == "(body)", body


def test_expressions_that_reach_the_jvm_are_refused(api: Api) -> None:
    spec = clicks_spec()
    leak = "reflect('java.lang.System','getenv','SPINDLE_S3_SECRET_KEY') AS leak"
    spec["transform"]["select"] = ["user", leak]
    for url in ("pipelines/validate", "pipelines"):
        body = error(api.post(url, json={"spec": spec}), 422, "invalid_spec")
        assert fields(body) == ["transform.select.1"]
        assert "'reflect' is not allowed" in body["errors"][0]["message"]
    assert api.get("pipelines").json() == []


PATHS = [
    ("/etc", False),
    ("../outside", False),
    ("data/../../outside", False),
    ("link-to-etc/passwd-dir", False),  # a symlink inside the root, pointing out
    ("data/orders", True),
    ("{root}/data/orders", True),
    ("data/./orders/../orders", True),
]


def test_files_paths_stay_inside_the_roots(api: Api) -> None:
    root = api.settings.roots[0]
    root.mkdir(parents=True, exist_ok=True)
    os.symlink("/etc", root / "link-to-etc")
    for path, accepted in PATHS:
        spec = example("orders-from-files")
        spec["source"]["path"] = path.format(root=root)
        r = api.post("pipelines/validate", json={"spec": spec})
        if accepted:
            assert r.status_code == 200, (path, r.text)
        else:
            assert fields(error(r, 422, "invalid_spec")) == ["source.path"], path


def test_files_sink_path_outside_the_roots(api: Api) -> None:
    spec = clicks_spec()
    spec["sinks"][0]["path"] = "/tmp/elsewhere"
    body = error(api.post("pipelines/validate", json={"spec": spec}), 422, "invalid_spec")
    assert fields(body) == ["sinks.0.path"]


def test_log_source_unsupported_type_names_the_schema_field(api: Api) -> None:
    spec = log_spec()
    spec["source"]["schema"]["extra"] = "map<string,int>"
    body = error(api.post("pipelines/validate", json={"spec": spec}), 422, "invalid_spec")
    assert len(body["errors"]) == 1
    assert "map<string,int>" in body["errors"][0]["message"]
    assert body["errors"][0]["field"] in ("source.schema", "source.schema.extra")


# -- pipelines ------------------------------------------------------------------------------


def test_pipeline_crud(api: Api) -> None:
    r = api.post("pipelines", json={"spec": clicks_spec(), "description": "per user"})
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["name"] == CLICKS and created["description"] == "per user"
    assert created["spec"] == clicks_spec()
    assert (created["state"], created["desired_state"]) == ("stopped", "stopped")
    assert created["current_run"] is None and created["checkpoints"] == 0
    api.create_pipeline(log_spec())
    assert [p["name"] for p in api.get("pipelines").json()] == [BIDS, CLICKS]
    got = api.get(f"pipelines/{CLICKS}").json()
    assert got == created

    body = error(api.post("pipelines", json={"spec": clicks_spec()}), 409, "conflict")
    assert fields(body) == ["spec.name"]

    renamed = with_changes(clicks_spec(), name="other")
    body = error(api.put(f"pipelines/{CLICKS}", json={"spec": renamed}), 422, "invalid_spec")
    assert fields(body) == ["spec.name"]
    new_spec = with_changes(clicks_spec(), trigger={"interval": "2s"})
    r = api.put(f"pipelines/{CLICKS}", json={"spec": new_spec, "description": "v2"})
    assert r.status_code == 200, r.text
    assert r.json()["spec"] == new_spec and r.json()["description"] == "v2"
    assert api.get(f"pipelines/{CLICKS}").json()["spec"] == new_spec

    for state in (PipelineState.running, PipelineState.starting, PipelineState.paused):
        api.set_state(CLICKS, state)
        error(api.put(f"pipelines/{CLICKS}", json={"spec": clicks_spec()}), 409, "conflict")
        error(api.delete(f"pipelines/{CLICKS}"), 409, "conflict")
    assert api.get(f"pipelines/{CLICKS}").json()["spec"] == new_spec
    api.set_state(CLICKS, PipelineState.failed)
    assert api.put(f"pipelines/{CLICKS}", json={"spec": clicks_spec()}).status_code == 200

    storage = api.storage(CLICKS)
    build_checkpoints(storage, 1)
    assert api.delete(f"pipelines/{CLICKS}").status_code == 204
    error(api.get(f"pipelines/{CLICKS}"), 404, "not_found")
    assert not api.settings.pipeline_dir(CLICKS).exists()
    assert [p["name"] for p in api.get("pipelines").json()] == [BIDS]
    # The name is free again.
    api.create_pipeline(clicks_spec())


def test_deleting_a_pipeline_removes_its_records(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    api.create_pipeline(log_spec())
    build_checkpoints(api.storage(CLICKS), 2)
    assert len(api.get(f"pipelines/{CLICKS}/checkpoints").json()) == 2
    assert api.post(f"pipelines/{CLICKS}/start").status_code == 202
    run_id = api.queue.launched[-1]
    end_run(api, CLICKS, 1)
    api.set_state(CLICKS, PipelineState.stopped, DesiredState.stopped)
    assert api.post(f"pipelines/{CLICKS}/checkpoints/gc").status_code == 202
    pid, other = api.pipeline_id(CLICKS), api.pipeline_id(BIDS)
    add_samples(api.db, pid, [{"ts": 1.0, "run_id": run_id}, {"ts": 2.0}])
    add_samples(api.db, other, [{"ts": 1.0}])

    assert api.delete(f"pipelines/{CLICKS}").status_code == 204
    with api.db.session() as s:
        for model in (Run, Checkpoint, Operation, MetricSample, RetentionPolicy):
            n = s.scalar(select(func.count()).select_from(model).where(model.pipeline_id == pid))
            assert n == 0, model.__name__
        # The other pipeline keeps its records.
        n = s.scalar(
            select(func.count()).select_from(MetricSample).where(MetricSample.pipeline_id == other)
        )
        assert n == 1
        assert s.get(RetentionPolicy, other) is not None


def test_unknown_pipeline_is_404_on_every_route(api: Api) -> None:
    bodies: dict[tuple[str, str], dict[str, Any]] = {
        ("PUT", "/api/v1/pipelines/{name}"): {"json": {"spec": clicks_spec()}},
        ("PUT", "/api/v1/pipelines/{name}/retention"): {"json": {"keep_last": 2}},
        ("PATCH", "/api/v1/pipelines/{name}/checkpoints/{uuid}"): {"json": {"pinned": True}},
        ("POST", "/api/v1/pipelines/{name}/ingest/{stream}"): {
            "content": ndjson([bid(1)]),
            "headers": NDJSON,
        },
    }
    api.create_pipeline(clicks_spec())  # another pipeline exists
    routes = [(m, t) for m, t in protected_endpoints(api.app) if "{name}" in t]
    assert len(routes) >= 20
    for method, template in routes:
        r = api.request(method, fill(template), **bodies.get((method, template), {}))
        body = error(r, 404, "not_found")
        assert "no-such-pipeline" in body["message"], (method, template)
    error(api.get(f"operations/{UNKNOWN_UUID}"), 404, "not_found")


def test_a_new_spec_brings_its_retention_and_checkpoint_policy(api: Api) -> None:
    """PUT of a spec ignored its retention and checkpoint interval: the policy stayed the
    one of the first spec."""
    api.create_pipeline(with_changes(clicks_spec(), retention={"keep_last": 3}))
    url = f"pipelines/{CLICKS}/retention"
    override = {"keep_last": 9, "max_age_s": None, "min_keep": 1, "auto_commit_interval_s": 5.0}
    api.put(url, json=override)
    same = with_changes(clicks_spec(), retention={"keep_last": 3})
    assert api.put(f"pipelines/{CLICKS}", json={"spec": same}).status_code == 200
    assert api.get(url).json() == override  # the spec's policy did not change
    new = with_changes(
        clicks_spec(), retention={"keep_last": 4, "min_keep": 2}, checkpoint={"every": "1m"}
    )
    assert api.put(f"pipelines/{CLICKS}", json={"spec": new}).status_code == 200
    assert api.get(url).json() == {
        "keep_last": 4,
        "max_age_s": None,
        "min_keep": 2,
        "auto_commit_interval_s": 60.0,
    }


def test_retention_policy(api: Api) -> None:
    spec = with_changes(
        clicks_spec(),
        retention={"keep_last": 3, "max_age": "1h", "min_keep": 2},
        checkpoint={"every": "30s"},
    )
    api.create_pipeline(spec)
    url = f"pipelines/{CLICKS}/retention"
    assert api.get(url).json() == {
        "keep_last": 3,
        "max_age_s": 3600.0,
        "min_keep": 2,
        "auto_commit_interval_s": 30.0,
    }
    api.create_pipeline(log_spec())  # the spec's defaults
    assert api.get(f"pipelines/{BIDS}/retention").json() == {
        "keep_last": 10,
        "max_age_s": None,
        "min_keep": 1,
        "auto_commit_interval_s": None,
    }

    new = {"keep_last": 7, "max_age_s": None, "min_keep": 1, "auto_commit_interval_s": 5.0}
    r = api.put(url, json=new)
    assert r.status_code == 200 and r.json() == new
    assert api.get(url).json() == new

    for bad, field in (
        ({"keep_last": 0}, "keep_last"),
        ({"max_age_s": -1}, "max_age_s"),
        ({"min_keep": -1}, "min_keep"),
        ({"auto_commit_interval_s": 0}, "auto_commit_interval_s"),
        ({"keep": 3}, "keep"),
    ):
        body = error(api.put(url, json=bad), 422, "invalid_request")
        assert fields(body) == [field], bad
    assert api.get(url).json() == new
    viewer = api.token(Role.viewer)
    assert api.get(url, token=viewer).status_code == 200
    error(api.put(url, token=viewer, json=new), 403, "forbidden")


# -- lifecycle ------------------------------------------------------------------------------


def test_start_and_stop(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    r = api.post(f"pipelines/{CLICKS}/start")
    assert r.status_code == 202, r.text
    out = r.json()
    assert (out["state"], out["desired_state"]) == ("starting", "running")
    runs = api.runs(CLICKS)
    assert [(x.number, x.state, x.from_checkpoint, x.restart_count) for x in runs] == [
        (1, RunState.starting, "latest", 0)
    ]
    assert api.queue.launched == [runs[0].id]
    assert out["current_run"]["id"] == runs[0].id and out["current_run"]["number"] == 1

    error(api.post(f"pipelines/{CLICKS}/start"), 409, "conflict")
    assert api.queue.launched == [runs[0].id] and len(api.runs(CLICKS)) == 1

    # Stopping a live run asks it (through the operation it polls for).
    r = api.post(f"pipelines/{CLICKS}/stop")
    assert r.status_code == 202
    stop = r.json()
    assert (stop["kind"], stop["status"], stop["params"]) == (
        "stop",
        "pending",
        {"checkpoint": False},
    )
    assert api.get(f"pipelines/{CLICKS}").json()["state"] == "stopping"
    assert api.queue.executed == []  # the live run takes it, not a worker
    end_run(api, CLICKS, exits.EXIT_STOPPED)
    got = api.get(f"pipelines/{CLICKS}").json()
    assert (got["state"], got["desired_state"]) == ("stopped", "stopped")

    # With no live run, a stop is done at once.
    r = api.post(f"pipelines/{CLICKS}/stop?checkpoint=true")
    assert r.status_code == 202
    done = r.json()
    assert done["status"] == "succeeded" and done["finished_at"] is not None
    assert done["params"] == {"checkpoint": True}
    assert api.get(f"operations/{done['id']}").json()["status"] == "succeeded"

    # Runs are numbered per pipeline, newest first in the history.
    assert api.post(f"pipelines/{CLICKS}/start").status_code == 202
    history = api.get(f"pipelines/{CLICKS}/runs").json()
    assert [(h["number"], h["state"]) for h in history] == [(2, "starting"), (1, "stopped")]
    assert history[1]["exit_reason"] == "stopped on request"
    assert api.queue.launched == [runs[0].id, history[0]["id"]]


def test_start_from_a_checkpoint(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    error(
        api.post(f"pipelines/{CLICKS}/start", params={"from_checkpoint": UNKNOWN_UUID}),
        404,
        "not_found",
    )
    error(
        api.post(f"pipelines/{CLICKS}/start", params={"from_checkpoint": "yesterday"}),
        422,
        "invalid_request",
    )
    assert api.queue.launched == [] and api.runs(CLICKS) == []
    assert api.get(f"pipelines/{CLICKS}").json()["state"] == "stopped"

    uids = build_checkpoints(api.storage(CLICKS), 2)
    api.get(f"pipelines/{CLICKS}/checkpoints")  # mirrors the manifest
    r = api.post(f"pipelines/{CLICKS}/start", params={"from_checkpoint": uids[0]})
    assert r.status_code == 202, r.text
    assert [x.from_checkpoint for x in api.runs(CLICKS)] == [uids[0]]


def test_pause_and_resume(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    error(api.post(f"pipelines/{CLICKS}/pause"), 409, "conflict")
    error(api.post(f"pipelines/{CLICKS}/resume"), 409, "conflict")
    assert api.get(f"pipelines/{CLICKS}").json()["desired_state"] == "stopped"
    api.post(f"pipelines/{CLICKS}/start")
    r = api.post(f"pipelines/{CLICKS}/pause")
    assert r.status_code == 202 and r.json()["desired_state"] == "paused"
    r = api.post(f"pipelines/{CLICKS}/resume")
    assert r.status_code == 202 and r.json()["desired_state"] == "running"


def test_logs(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    assert api.get(f"pipelines/{CLICKS}/logs").json() == {"run": None, "lines": []}
    api.post(f"pipelines/{CLICKS}/start")
    log = api.settings.pipeline_dir(CLICKS) / "runs" / "1.log"
    log.parent.mkdir(parents=True)
    log.write_text("".join(f"line {i}\n" for i in range(50)))
    with api.db.session() as s:
        run = s.get(Run, api.queue.launched[0])
        assert run is not None
        run.log_path = str(log)
    r = api.get(f"pipelines/{CLICKS}/logs", params={"lines": 3})
    assert r.json() == {"run": 1, "lines": ["line 47", "line 48", "line 49"]}
    assert api.get(f"pipelines/{CLICKS}/logs", params={"run": 1}).json()["lines"][-1] == "line 49"
    error(api.get(f"pipelines/{CLICKS}/logs", params={"run": 2}), 404, "not_found")


# -- checkpoints and operations -------------------------------------------------------------


def test_listing_checkpoints_mirrors_the_manifest(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    assert api.get(f"pipelines/{CLICKS}/checkpoints").json() == []
    uids = build_checkpoints(api.storage(CLICKS), 3)
    api.reads_expire()
    assert api.get(f"pipelines/{CLICKS}").json()["checkpoints"] == 0  # not read yet
    listed = api.get(f"pipelines/{CLICKS}/checkpoints").json()
    assert [c["uuid"] for c in listed] == uids
    assert [c["step"] for c in listed] == [1, 2, 3]
    assert [c["source_offset"] for c in listed] == [10, 20, 30]
    assert all(c["size_bytes"] > 0 and c["local_durable"] and not c["pinned"] for c in listed)
    api.reads_expire()  # the manifest changed outside the API: its own answer is a read old
    assert api.get(f"pipelines/{CLICKS}").json()["checkpoints"] == 3
    # The manifest wins: a checkpoint deleted behind the API's back disappears.
    with StorageLocation.open(str(api.storage(CLICKS)), checkpoint="none") as loc:
        loc.delete_checkpoint(uids[1])
    api.reads_expire()
    listed = api.get(f"pipelines/{CLICKS}/checkpoints").json()
    assert [c["uuid"] for c in listed] == [uids[0], uids[2]]


def test_commit_needs_a_live_run(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    error(api.post(f"pipelines/{CLICKS}/checkpoints"), 409, "conflict")
    api.post(f"pipelines/{CLICKS}/start")
    r = api.post(f"pipelines/{CLICKS}/checkpoints", json={"identifier": "before-deploy"})
    assert r.status_code == 202, r.text
    op = r.json()
    assert (op["kind"], op["status"]) == ("commit", "pending")
    assert op["params"] == {"identifier": "before-deploy"}
    assert api.queue.executed == []  # the live run performs it
    bad = api.post(f"pipelines/{CLICKS}/checkpoints", json={"identifier": "no spaces"})
    assert fields(error(bad, 422, "invalid_request")) == ["identifier"]


def test_gc_of_a_stopped_pipeline_goes_to_a_worker(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    r = api.post(f"pipelines/{CLICKS}/checkpoints/gc", json={"keep": 2})
    assert r.status_code == 202, r.text
    op = r.json()
    assert (op["kind"], op["status"], op["params"]) == ("gc", "pending", {"keep": 2})
    assert op["pipeline"] == CLICKS
    assert api.queue.executed == [op["id"]]
    got = api.get(f"operations/{op['id']}")
    assert got.status_code == 200 and got.json() == op
    error(api.get(f"operations/{UNKNOWN_UUID}"), 404, "not_found")
    bad = api.post(f"pipelines/{CLICKS}/checkpoints/gc", json={"keep": -1})
    assert fields(error(bad, 422, "invalid_request")) == ["keep"]
    assert api.queue.executed == [op["id"]]


def test_restore_conflicts_and_unknown_checkpoints(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    uids = build_checkpoints(api.storage(CLICKS), 3)
    base = f"pipelines/{CLICKS}/checkpoints"
    # Unknown checkpoints, even before the rows were mirrored.
    error(api.post(f"{base}/{UNKNOWN_UUID}/restore"), 404, "not_found")
    error(api.delete(f"{base}/{UNKNOWN_UUID}"), 404, "not_found")
    error(api.patch(f"{base}/{UNKNOWN_UUID}", json={"pinned": True}), 404, "not_found")
    assert api.queue.executed == []

    r = api.post(f"{base}/{uids[1]}/restore")
    assert r.status_code == 202, r.text
    first = r.json()
    assert (first["kind"], first["status"]) == ("restore", "pending")
    assert first["params"] == {"checkpoint": uids[1]}
    body = error(api.post(f"{base}/{uids[0]}/restore"), 409, "conflict")
    assert body["details"] == {"operation": first["id"]}
    assert api.queue.executed == [first["id"]]
    # Once done, another restore may start.
    assert api.run_offline(first["id"])["status"] == "succeeded"
    assert api.post(f"{base}/{uids[0]}/restore").status_code == 202


def test_pinning(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    uids = build_checkpoints(api.storage(CLICKS), 2)
    base = f"pipelines/{CLICKS}/checkpoints"
    r = api.patch(f"{base}/{uids[0]}", json={"pinned": True})
    assert r.status_code == 200 and r.json()["pinned"] is True and r.json()["uuid"] == uids[0]
    assert [c["pinned"] for c in api.get(base).json()] == [True, False]  # survives listing
    body = error(api.delete(f"{base}/{uids[0]}"), 409, "conflict")
    assert "pinned" in body["message"]
    assert api.queue.executed == []
    error(api.patch(f"{base}/{uids[0]}", json={"pinned": "maybe"}), 422, "invalid_request")
    assert api.patch(f"{base}/{uids[0]}", json={"pinned": False}).json()["pinned"] is False
    r = api.delete(f"{base}/{uids[0]}")
    assert r.status_code == 202 and r.json()["kind"] == "delete_checkpoint"
    assert api.queue.executed == [r.json()["id"]]


# -- offline operations (the worker's path for a stopped pipeline) -------------------------


def manifest_uuids(api: Api, name: str) -> list[str]:
    return [c.uuid for c in cps.manifest(api.storage(name))]


def test_offline_gc_deletes_the_oldest_unpinned_checkpoint(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    uids = build_checkpoints(api.storage(CLICKS), 4)
    base = f"pipelines/{CLICKS}/checkpoints"
    api.patch(f"{base}/{uids[0]}", json={"pinned": True})
    op_id = api.post(f"{base}/gc").json()["id"]
    op = api.run_offline(op_id)
    assert op["status"] == "succeeded", op
    assert op["result"]["deleted"] == [uids[1]]
    assert op["result"]["files_removed"] == 1 and op["result"]["bytes_freed"] > 0
    assert op["started_at"] is not None and op["finished_at"] is not None
    assert manifest_uuids(api, CLICKS) == [uids[0], uids[2], uids[3]]
    listed = api.get(base).json()
    assert [(c["uuid"], c["pinned"]) for c in listed] == [
        (uids[0], True),
        (uids[2], False),
        (uids[3], False),
    ]
    # Performed once: running the task again changes nothing.
    assert api.run_offline(op_id) == op
    assert manifest_uuids(api, CLICKS) == [uids[0], uids[2], uids[3]]


def test_offline_gc_to_zero_keeps_pinned_and_newest(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    uids = build_checkpoints(api.storage(CLICKS), 5)
    base = f"pipelines/{CLICKS}/checkpoints"
    api.patch(f"{base}/{uids[1]}", json={"pinned": True})
    op = api.run_offline(api.post(f"{base}/gc", json={"keep": 0}).json()["id"])
    assert op["status"] == "succeeded", op
    assert op["result"]["deleted"] == [uids[0], uids[2], uids[3]]
    assert op["result"]["files_removed"] == 3
    assert manifest_uuids(api, CLICKS) == [uids[1], uids[4]]
    # Nothing left to collect.
    op = api.run_offline(api.post(f"{base}/gc", json={"keep": 0}).json()["id"])
    assert op["result"] == {"deleted": [], "files_removed": 0, "bytes_freed": 0}


def test_offline_delete_checkpoint(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    uids = build_checkpoints(api.storage(CLICKS), 3)
    op = api.run_offline(api.delete(f"pipelines/{CLICKS}/checkpoints/{uids[2]}").json()["id"])
    assert op["status"] == "succeeded", op
    assert op["result"]["deleted"] == [uids[2]] and op["result"]["bytes_freed"] > 0
    assert manifest_uuids(api, CLICKS) == uids[:2]
    assert [c["uuid"] for c in api.get(f"pipelines/{CLICKS}/checkpoints").json()] == uids[:2]


def test_offline_restore_applies_at_the_next_start(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    uids = build_checkpoints(api.storage(CLICKS), 3)
    op = api.run_offline(api.post(f"pipelines/{CLICKS}/checkpoints/{uids[1]}/restore").json()["id"])
    assert op["status"] == "succeeded", op
    assert op["result"] == {"checkpoint": uids[1], "step": 2, "applies": "at the next start"}
    assert api.get(f"pipelines/{CLICKS}").json()["restore_point"] == uids[1]
    assert manifest_uuids(api, CLICKS) == uids  # nothing deleted
    assert api.post(f"pipelines/{CLICKS}/start").status_code == 202
    assert [r.from_checkpoint for r in api.runs(CLICKS)] == [uids[1]]
    # An explicit choice wins over the restore point.
    end_run(api, CLICKS, exits.EXIT_SPEC)
    assert api.post(f"pipelines/{CLICKS}/start?from_checkpoint=none").status_code == 202
    assert [r.from_checkpoint for r in api.runs(CLICKS)] == [uids[1], "none"]


def test_offline_restore_of_a_vanished_checkpoint_fails(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    uids = build_checkpoints(api.storage(CLICKS), 2)
    op_id = api.post(f"pipelines/{CLICKS}/checkpoints/{uids[0]}/restore").json()["id"]
    with StorageLocation.open(str(api.storage(CLICKS)), checkpoint="none") as loc:
        loc.delete_checkpoint(uids[0])
    op = api.run_offline(op_id)
    assert op["status"] == "failed" and uids[0] in op["error"]
    assert api.get(f"pipelines/{CLICKS}").json()["restore_point"] is None


def test_offline_commit_fails_clearly(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    build_checkpoints(api.storage(CLICKS), 1)
    op_id = api.add_operation(CLICKS, OperationKind.commit, {"identifier": None})
    op = api.run_offline(op_id)
    assert op["status"] == "failed" and op["result"] is None
    assert "not running" in op["error"] and "no live state" in op["error"]
    assert len(manifest_uuids(api, CLICKS)) == 1


def test_offline_operation_waits_for_a_live_run(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    uids = build_checkpoints(api.storage(CLICKS), 3)
    op_id = api.post(f"pipelines/{CLICKS}/checkpoints/gc").json()["id"]
    api.post(f"pipelines/{CLICKS}/start")  # a run appeared before the worker got to it
    op = api.run_offline(op_id)
    assert (op["status"], op["started_at"], op["result"]) == ("pending", None, None)
    assert manifest_uuids(api, CLICKS) == uids


def test_offline_gc_truncates_the_input_log(api: Api) -> None:
    api.create_pipeline(log_spec())
    for i in range(3):
        r = api.post(f"pipelines/{BIDS}/ingest/bids", content=ndjson([bid(2 * i), bid(2 * i + 1)]))
        assert r.json()["first_offset"] == 2 * i
    log = input_log(api.storage(BIDS))
    assert (log.start(), log.end()) == (0, 6)
    uids = build_checkpoints(api.storage(BIDS), 3, offsets=[2, 4, 6])
    op = api.run_offline(api.post(f"pipelines/{BIDS}/checkpoints/gc").json()["id"])
    assert op["result"]["deleted"] == [uids[0]]
    # The oldest checkpoint left starts at offset 4: the segments below it are gone.
    assert (log.start(), log.end()) == (4, 6)
    got = [b.to_pylist() for b in log.read(4, 6)]
    assert [r["bidder"] for batch in got for r in batch] == [104, 105]


# -- ingest ----------------------------------------------------------------------------------


def test_ingest_ndjson_returns_offsets(api: Api) -> None:
    api.create_pipeline(log_spec())
    url = f"pipelines/{BIDS}/ingest/bids"
    first = [bid(i) for i in range(3)]
    r = api.post(url, content=ndjson(first), headers=NDJSON)
    assert r.status_code == 200, r.text
    assert r.json() == {"stream": "bids", "records": 3, "first_offset": 0, "end_offset": 3}
    second = [bid(i) for i in range(3, 8)]
    r = api.post(url, content=ndjson(second), headers=NDJSON)
    assert r.json() == {"stream": "bids", "records": 5, "first_offset": 3, "end_offset": 8}
    log = input_log(api.storage(BIDS))
    assert log.end() == 8
    rows = [r for b in log.read(0, 8) for r in b.to_pylist()]
    assert [r["bidder"] for r in rows] == [100 + i for i in range(8)]
    assert rows[5]["price"] == 7.5 and rows[5]["auction"] == 2
    assert rows[5]["ts"] == dt.datetime(2024, 1, 1, 0, 0, 5, tzinfo=dt.UTC)


def test_ingest_after_the_log_was_lost_continues_after_the_consumed_offset(api: Api) -> None:
    """The storage was restored (moved, or pulled from the object store) without its input
    log: the checkpoint has consumed records 0-5. New records got offsets from 0 again,
    which the pipeline skipped as already read."""
    api.create_pipeline(log_spec())
    build_checkpoints(api.storage(BIDS), 2, offsets=[4, 6])
    url = f"pipelines/{BIDS}/ingest/bids"
    r = api.post(url, content=ndjson([bid(1), bid(2)]), headers=NDJSON)
    assert (r.json()["first_offset"], r.json()["end_offset"]) == (6, 8)
    r = api.post(url, content=ndjson([bid(3)]), headers=NDJSON)
    assert r.json()["first_offset"] == 8
    log = input_log(api.storage(BIDS))
    assert [x["bidder"] for b in log.read(6, 9) for x in b.to_pylist()] == [101, 102, 103]


def test_ingest_csv(api: Api) -> None:
    api.create_pipeline(log_spec())
    url = f"pipelines/{BIDS}/ingest/bids"
    csv = b"ts,auction,bidder,price\n2024-01-01T00:00:09Z,7,42,9.25\n2024-01-01T00:01:00Z,8,43,1\n"
    r = api.post(url, content=csv, headers={"Content-Type": "text/csv"})
    assert r.status_code == 200, r.text
    assert (r.json()["first_offset"], r.json()["end_offset"]) == (0, 2)
    r = api.post(url, params={"format": "csv"}, content=csv, headers={"Content-Type": "text/plain"})
    assert (r.json()["first_offset"], r.json()["end_offset"]) == (2, 4)
    rows = [r for b in input_log(api.storage(BIDS)).read(0, 4) for r in b.to_pylist()]
    assert [(r["auction"], r["bidder"], r["price"]) for r in rows] == [
        (7, 42, 9.25),
        (8, 43, 1.0),
    ] * 2
    assert rows[1]["ts"] == dt.datetime(2024, 1, 1, 0, 1, 0, tzinfo=dt.UTC)


BAD_RECORDS = [
    (ndjson([bid(1), {**bid(2), "price": "cheap"}]), "application/x-ndjson"),
    (ndjson([bid(1), {**bid(2), "auction": "x"}]), "application/x-ndjson"),
    (ndjson([{**bid(1), "surprise": 1}]), "application/x-ndjson"),
    (b"not json at all\n", "application/x-ndjson"),
    (b"auction,bidder,price,ts\n1,2,3.0,2024-01-01T00:00:00Z\n1,x,3,2024\n", "text/csv"),
    (b"\n  \n", "application/x-ndjson"),
    # Arrow's JSON reader segfaulted on a bare null: the whole server process died.
    (b"null", "application/x-ndjson"),
    (ndjson([bid(1)]) + b"null\n[1, 2]\n", "application/x-ndjson"),
    (b'"text"\n', "application/x-ndjson"),
    # Invalid UTF-8 was stored, then every read of the view answered 500.
    (ndjson([bid(1)]) + b'{"auction": 2, "s": "bad\xff\xfe"}\n', "application/x-ndjson"),
    (b"ts,auction,bidder,price\n2024-01-01T00:00:09Z,7,42,9.25\xff\n", "text/csv"),
]


def test_ingest_errors_name_the_line_and_the_field(api: Api) -> None:
    api.create_pipeline(log_spec())
    url = f"pipelines/{BIDS}/ingest/bids"
    cases = [
        (ndjson([bid(1), bid(2)]) + b"null\n", "line 3", 3, None),
        (ndjson([bid(1)]) + b'{"auction": "\xff"}\n', "line 2: not valid UTF-8", 2, None),
        (ndjson([bid(1), {**bid(2), "surprise": 1}]), "unknown field 'surprise'", 2, "surprise"),
        (ndjson([bid(1)]) + b"{oops\n", "line 2: not JSON", 2, None),
    ]
    for content, text, line, field in cases:
        body = error(api.post(url, content=content, headers=NDJSON), 422, "invalid_input")
        assert text in body["message"], body
        assert body["details"]["line"] == line
        assert body["details"].get("field") == field
    assert input_log(api.storage(BIDS)).end() == 0


def test_ingest_rejects_bad_records_whole(api: Api) -> None:
    api.create_pipeline(log_spec())
    url = f"pipelines/{BIDS}/ingest/bids"
    assert api.post(url, content=ndjson([bid(0)]), headers=NDJSON).status_code == 200
    log = input_log(api.storage(BIDS))
    for content, content_type in BAD_RECORDS:
        r = api.post(url, content=content, headers={"Content-Type": content_type})
        error(r, 422, "invalid_input")
        assert log.end() == 1 and len(log.segments()) == 1, content
    # The stream still takes good records, at the next offset.
    assert api.post(url, content=ndjson([bid(5)]), headers=NDJSON).json()["first_offset"] == 1


def test_ingest_unknown_stream(api: Api) -> None:
    api.create_pipeline(log_spec())
    api.create_pipeline(clicks_spec())
    body = error(
        api.post(f"pipelines/{BIDS}/ingest/asks", content=ndjson([bid(0)]), headers=NDJSON),
        404,
        "not_found",
    )
    assert "'bids'" in body["message"]
    error(
        api.post(f"pipelines/{CLICKS}/ingest/bids", content=ndjson([bid(0)]), headers=NDJSON),
        404,
        "not_found",
    )
    assert not (api.storage(BIDS) / "input-log" / "asks").exists()
    viewer = api.token(Role.viewer)
    r = api.post(f"pipelines/{BIDS}/ingest/bids", token=viewer, content=ndjson([bid(0)]))
    error(r, 403, "forbidden")


def padded(limit: int) -> bytes:
    """A valid NDJSON body of exactly `limit` bytes."""
    body = ndjson([bid(i) for i in range(5)])
    assert len(body) < limit
    return body[:-1] + b" " * (limit - len(body)) + b"\n"


def test_ingest_body_limit(api: Api) -> None:
    api.create_pipeline(log_spec())
    url = f"pipelines/{BIDS}/ingest/bids"
    exact = padded(MAX_INGEST_BYTES)
    r = api.post(url, content=exact, headers=NDJSON)
    assert r.status_code == 200, r.text
    assert r.json()["end_offset"] == 5
    too_big = padded(MAX_INGEST_BYTES + 1)
    body = error(api.post(url, content=too_big, headers=NDJSON), 413, "payload_too_large")
    assert body["details"] == {"limit_bytes": MAX_INGEST_BYTES}

    def chunks(data: bytes) -> Iterator[bytes]:
        for i in range(0, len(data), 100):
            yield data[i : i + 100]

    r = api.post(url, content=chunks(too_big), headers=NDJSON)
    assert "content-length" not in r.request.headers  # really streamed
    error(r, 413, "payload_too_large")
    r = api.post(url, content=chunks(exact), headers=NDJSON)
    assert r.status_code == 200, r.text
    assert (r.json()["first_offset"], r.json()["end_offset"]) == (5, 10)
    assert input_log(api.storage(BIDS)).end() == 10


def test_json_body_limit(api: Api) -> None:
    doc = {"spec": clicks_spec(), "description": "x" * MAX_BODY_BYTES}
    error(api.post("pipelines", json=doc), 413, "payload_too_large")

    def stream() -> Iterator[bytes]:
        yield json.dumps(doc).encode()

    r = api.post("pipelines", content=stream(), headers={"Content-Type": "application/json"})
    error(r, 413, "payload_too_large")
    assert api.get("pipelines").json() == []
    # The larger ingest limit applies to ingest only.
    assert MAX_INGEST_BYTES < MAX_BODY_BYTES
    api.create_pipeline(with_changes(clicks_spec(), name="a" * 20))


# -- views -------------------------------------------------------------------------------------


def test_a_view_holding_invalid_utf8_still_reads(api: Api) -> None:
    """State stored before ingest checked UTF-8 is served with replacement characters."""
    api.create_pipeline(clicks_spec())
    schema = pa.schema([("user", pa.string()), ("clicks", pa.int64())])
    data = b"okbad\xff\xfe"
    users = pa.Array.from_buffers(
        pa.string(), 2, [None, pa.py_buffer(np.array([0, 2, 7], np.int32)), pa.py_buffer(data)]
    )
    d = pa.table({"user": users, "clicks": [1, 2], WEIGHT: pa.array([1, 1], pa.int64())})
    with StorageLocation.open(str(api.storage(CLICKS))) as loc:
        sink = ViewSink(ViewSinkSpec(name="v", kind="view", **{"from": "per_user"}), schema, loc)
        sink.write(1, d)
        loc.commit(step=1)
    r = api.get(f"pipelines/{CLICKS}/views/v")
    assert r.status_code == 200, r.text
    assert r.json()["rows"] == [
        {"user": "bad\ufffd\ufffd", "clicks": 2},
        {"user": "ok", "clicks": 1},
    ]


def test_view_reads(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    url = f"pipelines/{CLICKS}/views/v"
    empty = api.get(url)
    assert empty.status_code == 200
    assert empty.json() == {"view": "v", "step": None, "checkpoint": None, "rows": []}
    uid = write_view(
        api.storage(CLICKS),
        "v",
        [
            delta([(1, 1, 1), (2, 1, 1), (3, 1, 1), (5, 1, 1)]),
            delta([(1, 1, -1), (1, 2, 1), (3, 1, -1), (3, 2, 1), (4, 5, 1), (5, 1, -1)]),
        ],
        step=7,
    )
    everything = [
        {"user": 1, "clicks": 2},
        {"user": 2, "clicks": 1},
        {"user": 3, "clicks": 2},
        {"user": 4, "clicks": 5},
    ]
    got = api.get(url).json()
    assert got == {"view": "v", "step": 7, "checkpoint": uid, "rows": everything}
    assert api.get(url, params={"offset": 1, "limit": 2}).json()["rows"] == everything[1:3]
    assert api.get(url, params={"offset": 3, "limit": 10}).json()["rows"] == everything[3:]
    assert api.get(url, params={"offset": 9}).json()["rows"] == []
    by_key = api.get(url, params={"key": "3"}).json()
    assert by_key == {"view": "v", "step": 7, "checkpoint": uid, "rows": [everything[2]]}
    assert api.get(url, params={"key": ["3", "2"]}).json()["rows"] == [everything[2]]
    assert api.get(url, params={"key": ["3", "1"]}).json()["rows"] == []
    assert api.get(url, params={"key": "5"}).json()["rows"] == []  # retracted to zero
    assert api.get(url, params={"key": "99"}).json()["rows"] == []

    error(api.get(url, params={"key": "three"}), 422, "invalid_input")
    error(api.get(url, params={"key": ["1", "2", "3"]}), 422, "invalid_input")
    error(api.get(url, params={"limit": 0}), 422, "invalid_request")
    error(api.get(f"pipelines/{CLICKS}/views/nope"), 404, "not_found")
    error(api.get(f"pipelines/{CLICKS}/views/out"), 404, "not_found")  # a files sink

    # The newest checkpoint is what is served.
    uid2 = write_view(api.storage(CLICKS), "v", [delta([(2, 1, -1), (6, 3, 1)])], step=9)
    got = api.get(url).json()
    assert (got["step"], got["checkpoint"]) == (9, uid2)
    assert got["rows"] == [everything[0], everything[2], everything[3], {"user": 6, "clicks": 3}]

    # A corrupt file is an error naming it, never an empty or partial answer.
    storage = api.storage(CLICKS)
    batch = max(storage.glob("*.batch"), key=lambda f: f.stat().st_mtime)
    raw = bytearray(batch.read_bytes())
    raw[len(raw) // 3] ^= 0xFF
    batch.write_bytes(bytes(raw))
    body = error(api.get(url), 503, "state_unavailable")
    assert batch.name in body["message"]
    batch.unlink()
    body = error(api.get(url), 503, "state_unavailable")
    assert batch.name in body["message"]


# -- metrics --------------------------------------------------------------------------------


def samples(n: int, t0: float, step0: int = 1) -> list[dict[str, Any]]:
    return [
        {"ts": t0 + i, "step": step0 + i, "rows_in": 10 * (i + 1), "step_ms": 100.0 + i}
        for i in range(n)
    ]


def test_metrics_history(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    api.create_pipeline(log_spec())
    pid = api.pipeline_id(CLICKS)
    t0 = time.time() - 100
    ids = add_samples(api.db, pid, samples(5, t0))
    add_samples(api.db, api.pipeline_id(BIDS), samples(2, t0))
    url = f"pipelines/{CLICKS}/metrics"
    got = api.get(url).json()
    assert [m["id"] for m in got] == ids
    assert [m["step"] for m in got] == [1, 2, 3, 4, 5]
    assert got[0]["rows_in"] == 10 and got[0]["resolution_s"] == 0 and got[0]["run_id"] is None
    since = api.get(url, params={"since": t0 + 2}).json()
    assert [m["step"] for m in since] == [3, 4, 5]
    newest = api.get(url, params={"limit": 2}).json()
    assert [m["step"] for m in newest] == [4, 5]
    assert api.get(f"pipelines/{BIDS}/metrics", params={"since": t0 + 1}).json()[0]["step"] == 2


def metric(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    raise AssertionError(f"no sample {name}{labels}")


def test_prometheus_exposition(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    api.create_pipeline(log_spec())
    add_samples(api.db, api.pipeline_id(CLICKS), samples(4, time.time() - 30))
    add_samples(api.db, api.pipeline_id(BIDS), [{"ts": time.time(), "step": 3, "rows_in": 7}])
    build_checkpoints(api.storage(CLICKS), 3)
    api.get(f"pipelines/{CLICKS}/checkpoints")
    api.set_state(BIDS, PipelineState.running)
    r = api.get("/metrics", token=api.token(Role.viewer))
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'spindle_pipeline_rows_in_total{pipeline="clicks-per-user"} 100.0' in text
    assert metric(text, "spindle_pipeline_rows_in_total", pipeline=BIDS) == 7
    assert metric(text, "spindle_checkpoints", pipeline=CLICKS) == 3
    assert metric(text, "spindle_checkpoints", pipeline=BIDS) == 0
    assert metric(text, "spindle_pipeline_last_step", pipeline=CLICKS) == 4
    assert metric(text, "spindle_pipeline_up", pipeline=BIDS) == 1
    assert metric(text, "spindle_pipeline_up", pipeline=CLICKS) == 0
    assert metric(text, "spindle_pipeline_state", pipeline=CLICKS, state="stopped") == 1
    assert metric(text, "spindle_pipeline_state", pipeline=CLICKS, state="running") == 0
    # rows in over the last minute / 60 s
    assert metric(text, "spindle_pipeline_throughput_rows_per_second", pipeline=CLICKS) == (
        pytest.approx(100 / 60)
    )


def stream_url(name: str, **params: Any) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"/api/v1/pipelines/{name}/metrics/stream" + (f"?{query}" if query else "")


def test_metrics_stream_backlog_live_and_resume(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    pid = api.pipeline_id(CLICKS)
    ids = add_samples(api.db, pid, samples(3, time.time() - 10))
    with api.client.stream("GET", stream_url(CLICKS, backlog=2), headers=api.auth()) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        reader = LineReader(resp)
        first = reader.next_event(timeout=10)
        assert (first["event"], first["id"]) == ("step", str(ids[1]))
        data = json.loads(first["data"])
        assert (data["id"], data["step"], data["rows_in"]) == (ids[1], 2, 20)
        assert reader.next_event(timeout=10)["id"] == str(ids[2])
        # A row landing while connected arrives next.
        (live,) = add_samples(api.db, pid, [{"ts": time.time(), "step": 42, "rows_in": 5}])
        event = reader.next_event(timeout=10)
        assert (event["event"], event["id"]) == ("step", str(live))
        assert json.loads(event["data"])["step"] == 42
    reader.join(timeout=10)

    # Reconnecting with Last-Event-ID resumes right after it.
    headers = {**api.auth(), "Last-Event-ID": str(ids[0])}
    with api.client.stream("GET", stream_url(CLICKS, backlog=1), headers=headers) as resp:
        reader = LineReader(resp)
        got = [reader.next_event(timeout=10)["id"] for _ in range(3)]
        assert got == [str(ids[1]), str(ids[2]), str(live)]
    reader.join(timeout=10)


def test_metrics_stream_without_backlog_sends_only_new_steps(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    api.create_pipeline(log_spec())
    pid = api.pipeline_id(CLICKS)
    add_samples(api.db, pid, samples(3, time.time() - 10))
    with api.client.stream("GET", stream_url(CLICKS), headers=api.auth()) as resp:
        reader = LineReader(resp)
        add_samples(api.db, api.pipeline_id(BIDS), [{"ts": time.time(), "step": 7}])
        (new,) = add_samples(api.db, pid, [{"ts": time.time(), "step": 8}])
        event = reader.next_event(timeout=10)
        assert event["id"] == str(new)
        assert json.loads(event["data"])["step"] == 8
    reader.join(timeout=10)
    r = api.get(stream_url(CLICKS), headers={"Last-Event-ID": "soon"})
    error(r, 422, "invalid_request")


# -- health ---------------------------------------------------------------------------------


def test_health(api: Api) -> None:
    r = api.get("/healthz", token=None)
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    r = api.get("/readyz", token=None)
    assert r.status_code == 200
    assert r.json() == {
        "status": "ok",
        "checks": {"database": "ok", "broker": "ok", "object_store": "ok", "storage": "ok"},
    }


def test_readyz_reports_a_broker_that_is_down(db_url: str, tmp_path: Path) -> None:
    with make_api(db_url, tmp_path / "data", RecordingQueue("error: down")) as api:
        r = api.get("/readyz", token=None)
        assert r.status_code == 503
        assert r.json() == {
            "status": "unavailable",
            "checks": {
                "database": "ok",
                "broker": "error: down",
                "object_store": "ok",
                "storage": "ok",
            },
        }
        assert api.get("/healthz", token=None).status_code == 200
        api.queue.status = "ok"
        assert api.get("/readyz", token=None).status_code == 200


def test_readyz_reports_a_missing_data_dir(db_url: str, tmp_path: Path) -> None:
    with make_api(db_url, tmp_path / "data") as api:
        os.rmdir(api.settings.data_path)
        r = api.get("/readyz", token=None)
        assert r.status_code == 503
        assert r.json()["checks"]["storage"] == "error: not writable"
        assert r.json()["checks"]["database"] == "ok"
