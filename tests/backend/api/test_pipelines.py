"""The REST API: pipelines (create, read, update, delete, retention) and their lifecycle (start,
stop, pause, resume, logs). Over a real metadata database, each test on SQLite and on
PostgreSQL; no Spark and no Celery (the TaskQueue is a recording double), storage locations
built with the engine itself (conftest.py)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from backend.models import (
    Checkpoint,
    DesiredState,
    MetricSample,
    Operation,
    PipelineState,
    RetentionPolicy,
    Role,
    Run,
    RunState,
)
from pipeline_spec import exits
from workers.jobs.launch import prepare

from ..api_fixtures import (
    BIDS,
    CLICKS,
    NDJSON,
    UNKNOWN_UUID,
    Api,
    add_samples,
    bid,
    build_checkpoints,
    clicks_spec,
    end_run,
    error,
    fields,
    fill,
    log_spec,
    ndjson,
    protected_endpoints,
    with_changes,
)

pytestmark = pytest.mark.timeout(120)


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
        ("POST", "/api/v1/pipelines/{name}/fork"): {"json": {"name": "f", "checkpoint": "1"}},
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


def test_start_with_operators_state_dropped(api: Api) -> None:
    """`drop_state`: the run's driver gets one `--drop-state` per operator (the query's
    restarts keep them); a value that is no operator id nor `*` is refused, naming it."""
    api.create_pipeline(clicks_spec())
    bad = api.post(f"pipelines/{CLICKS}/start", params={"drop_state": ["ok.agg0", "no way"]})
    body = error(bad, 422, "invalid_request")
    assert any("drop_state" in f for f in fields(body)), body
    assert api.runs(CLICKS) == []
    params = {"drop_state": ["q5.agg0", "*"]}
    assert api.post(f"pipelines/{CLICKS}/start", params=params).status_code == 202
    (run,) = api.runs(CLICKS)
    assert run.drop_state == ["q5.agg0", "*"]
    history = api.get(f"pipelines/{CLICKS}/runs").json()
    assert history[0]["drop_state"] == ["q5.agg0", "*"]
    launch = prepare(api.db, api.settings, run.id)
    assert launch is not None
    assert launch.run[-4:] == ["--drop-state", "q5.agg0", "--drop-state", "*"]


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
