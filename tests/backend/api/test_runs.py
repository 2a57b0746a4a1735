"""The run endpoints (`/api/v1/runs/{run_id}/...`, a driver's control plane over HTTP):
authorised by the run's token only (another run's: 403; once its run ended: 401; API tokens
and malformed credentials: 401), and every bad request a 4xx, never a 500. The driver's side
against a real pipeline: tests/workers/runtime/test_control_rest.py."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from sqlalchemy import select

from backend.models import (
    Operation,
    OperationStatus,
    Pipeline,
    Role,
    Run,
    RunState,
    RunToken,
    utcnow,
)
from backend.services import lifecycle, run_tokens
from pipeline_spec.exits import EXIT_STOPPED

from ..api_fixtures import Api, clicks_spec, end_run, error

REPORT = {"pid": 4321, "step": 0}
OPENED = {
    "pid": 4321,
    "step": 0,
    "restored": None,
    "skipped": [],
    "checkpoints": {"listed": [], "remote": None},
}
FINISH = {"result": {"step": 1}, "error": None, "checkpoints": {"listed": [], "remote": None}}
UNKNOWN_OP = "00000000-0000-0000-0000-000000000000"


def started_run(api: Api, name: str) -> tuple[int, str]:
    """A new pipeline's starting run, prepared as the worker prepares its driver: its id and
    its token."""
    api.create_pipeline(clicks_spec(name))
    return restarted_run(api, name)


def restarted_run(api: Api, name: str) -> tuple[int, str]:
    assert api.post(f"pipelines/{name}/start").status_code == 202
    with api.db.session() as s:
        p = s.scalar(select(Pipeline).where(Pipeline.name == name))
        assert p is not None
        run = lifecycle.live_run(s, p)
        assert run is not None
        token = lifecycle.run_prepared(s, run, "/dev/null", "here")
        return run.id, token


def endpoints(run_id: int) -> list[tuple[str, dict[str, Any] | None]]:
    base = f"runs/{run_id}"
    return [
        (f"{base}/opened", OPENED),
        (f"{base}/report", REPORT),
        (f"{base}/claim", None),
        (f"{base}/operations/{UNKNOWN_OP}/finish", FINISH),
    ]


def test_a_run_token_opens_its_own_runs_endpoints_and_no_others(api: Api) -> None:
    a, token_a = started_run(api, "a")
    b, token_b = started_run(api, "b")
    assert token_a.startswith(run_tokens.PREFIX) and token_a != token_b
    for path, body in endpoints(a):
        error(api.post(path, token=token_b, json=body), 403, "forbidden")
    r = api.post(f"runs/{a}/opened", token=token_a, json=OPENED)
    assert r.status_code == 200, r.text
    assert r.json() == {"exit": False, "paused": False, "has_policy": True, "auto_commit_s": None}
    r = api.post(f"runs/{a}/report", token=token_a, json={**REPORT, "step": 3})
    assert r.status_code == 200, r.text
    with api.db.session() as s:
        run = s.get(Run, a)
        assert run is not None
        assert (run.state, run.pid, run.last_step) == (RunState.running, 4321, 3)
        other = s.get(Run, b)
        assert other is not None and other.state == RunState.starting  # untouched
    # Only the digest is stored.
    with api.db.session() as s:
        assert run_tokens.find(s, token_a) is not None
        stored = s.execute(select(RunToken.token_hash)).scalars().all()
        assert token_a not in stored and token_b not in stored


def test_api_tokens_do_not_open_run_endpoints(api: Api) -> None:
    """Not even an admin's: a run's endpoints are its driver's."""
    a, _ = started_run(api, "a")
    for token in ("admin", api.token(Role.operator)):
        for path, body in endpoints(a):
            body_ = error(api.post(path, token=token, json=body), 401, "unauthorized")
            assert "unknown run token" in body_["message"]


def test_a_run_token_is_revoked_when_its_run_ends(api: Api) -> None:
    a, token = started_run(api, "a")
    assert api.post(f"runs/{a}/opened", token=token, json=OPENED).status_code == 200
    end_run(api, "a", EXIT_STOPPED)
    for path, body in endpoints(a):
        body_ = error(api.post(path, token=token, json=body), 401, "unauthorized")
        assert "revoked" in body_["message"]
    # A run given up for lost (its heartbeats stopped): the same.
    second, token2 = restarted_run(api, "a")
    assert api.post(f"runs/{second}/report", token=token2, json=REPORT).status_code == 200
    with api.db.session() as s:
        run = s.get(Run, second)
        assert run is not None
        run.heartbeat_at = utcnow() - dt.timedelta(hours=1)
    with api.db.session() as s:
        lifecycle.reap(s, api.settings)
        run = s.get(Run, second)
        assert run is not None and run.state == RunState.lost
    error(api.post(f"runs/{second}/report", token=token2, json=REPORT), 401, "unauthorized")


def test_malformed_credentials_are_401(api: Api) -> None:
    a, token = started_run(api, "a")
    for headers in (
        {},
        {"Authorization": "Bearer "},
        {"Authorization": "Bearer spr_"},
        {"Authorization": f"Basic {token}"},
        {"Authorization": f"Bearer {token}x"},
        {"Authorization": "Bearer " + "x" * 20_000},
        {"Authorization": "Bearer a b c"},
        {"Authorization": token},
    ):
        r = api.post(f"runs/{a}/report", token=None, headers=headers, json=REPORT)
        error(r, 401, "unauthorized")
        assert r.headers["www-authenticate"] == "Bearer"


def test_bad_requests_from_a_run_are_client_errors(api: Api) -> None:
    a, token = started_run(api, "a")
    for run_id in ("abc", "0", "-1", str(2**40), "1.5"):
        error(api.post(f"runs/{run_id}/report", token=token, json=REPORT), 422, "invalid_request")
    sample = {"ts": 1.0, "step": 1}

    def shards(op: str, value: Any) -> dict[str, Any]:
        return {**REPORT, "samples": [{**sample, "operators": {op: {"shards": value}}}]}

    bodies: list[Any] = [
        {},
        [],
        "report",
        {"pid": 0, "step": 0},
        {"pid": 1, "step": -1},
        {"pid": 1, "step": 2**63},
        {**REPORT, "surprise": 1},
        {**REPORT, "samples": [{"ts": 1.0, "step": "one"}]},
        {**REPORT, "samples": [{**sample, "spine_batches": 2**31}]},
        {**REPORT, "samples": [{**sample, "rows_in": -1}]},
        {**REPORT, "samples": [{"step": 1}]},
        # A partitioned pipeline's operator-shards: counted, so checked.
        shards("a", "all"),
        shards("a", [{"rows_in": 1}]),
        shards("a", [{"shard": -1}]),
        shards("a", [{"shard": 0, "rows_in": -1}]),
        shards("a", [{"shard": 0, "step_ms": "slow"}]),
        shards("a" * 129, []),
        {**REPORT, "events": [{"message": "no kind"}]},
        {**REPORT, "events": [{"event": "x" * 65}]},
        {**REPORT, "checkpoints": {"listed": [{"uuid": "u"}]}},
        {**REPORT, "checkpoints": {"listed": [], "remote": ["x" * 37]}},
    ]
    for body in bodies:
        r = api.post(f"runs/{a}/report", token=token, json=body)
        error(r, 422, "invalid_request")
    for raw in (b'{"pid": 1, "step": NaN}', b"{not json", b"\xff\xfe"):
        r = api.post(
            f"runs/{a}/report",
            token=token,
            content=raw,
            headers={"Content-Type": "application/json"},
        )
        error(r, 422, "invalid_request")
    bad_checkpoint = {
        "uuid": "c",
        "step": 1,
        "fingerprint": "f",
        "created_at": 1.0,
        "source_offsets": {"t": 2**64},
    }
    r = api.post(
        f"runs/{a}/opened",
        token=token,
        json={**OPENED, "checkpoints": {"listed": [bad_checkpoint], "remote": None}},
    )
    error(r, 422, "invalid_request")
    error(api.post(f"runs/{a}/operations/{'x' * 37}/finish", token=token, json=FINISH), 422,
          "invalid_request")  # fmt: skip
    error(api.post(f"runs/{a}/operations/{UNKNOWN_OP}/finish", token=token, json=FINISH), 404,
          "not_found")  # fmt: skip


def test_a_run_claims_and_finishes_only_its_pipelines_operations(api: Api) -> None:
    a, token_a = started_run(api, "a")
    b, token_b = started_run(api, "b")
    for run_id, token in ((a, token_a), (b, token_b)):
        assert api.post(f"runs/{run_id}/opened", token=token, json=OPENED).status_code == 200
    op = api.post("pipelines/b/checkpoints").json()["id"]
    assert api.post(f"runs/{a}/claim", token=token_a).json() == []
    error(api.post(f"runs/{a}/operations/{op}/finish", token=token_a, json=FINISH), 404,
          "not_found")  # fmt: skip
    claimed = api.post(f"runs/{b}/claim", token=token_b).json()
    assert claimed == [{"id": op, "kind": "commit", "params": {"identifier": None}, "pinned": []}]
    r = api.post(f"runs/{b}/operations/{op}/finish", token=token_b, json=FINISH)
    assert r.status_code == 204, r.text
    with api.db.session() as s:
        row = s.get(Operation, op)
        assert row is not None
        assert (row.status, row.result) == (OperationStatus.succeeded, {"step": 1})


def test_a_drivers_reports_show_like_outside_changes_without_emptying_the_read_cache(
    api: Api,
) -> None:
    """A driver reports several times a second: its changes show within the read cache's
    lifetime, as when drivers wrote the database themselves, while a client's own write
    still shows at once."""
    a, token = started_run(api, "a")
    before = api.get("pipelines/a").json()
    assert before["state"] == "starting"
    assert api.post(f"runs/{a}/opened", token=token, json=OPENED).status_code == 200
    assert api.get("pipelines/a").json() == before
    api.reads_expire()
    assert api.get("pipelines/a").json()["state"] == "running"
    assert api.post("pipelines/a/pause").status_code == 202
    assert api.get("pipelines/a").json()["desired_state"] == "paused"


def test_checkpoint_offsets_are_mirrored_per_table_whatever_the_driver_reports(api: Api) -> None:
    """A driver reports every table's offsets; one of the previous release may send a
    checkpoint of a one-source release's `source_offset` alone, which is the pipeline's
    first table's. The database keeps the per-table offsets only; the listing's
    `source_offset` is the first table's, derived."""
    a, token = started_run(api, "a")
    listed = [
        {"uuid": "new", "step": 1, "fingerprint": "f", "created_at": 1.0},
        {"uuid": "old", "step": 2, "fingerprint": "f", "created_at": 2.0},
        {"uuid": "both", "step": 3, "fingerprint": "f", "created_at": 3.0},
    ]
    listed[0]["source_offsets"] = {"input": 4}
    listed[1]["source_offset"] = 9
    listed[2] |= {"source_offset": 11, "source_offsets": {"input": 11}}
    opened = {**OPENED, "checkpoints": {"listed": listed, "remote": None}}
    assert api.post(f"runs/{a}/opened", token=token, json=opened).status_code == 200
    api.reads_expire()
    got = api.get("pipelines/a/checkpoints").json()
    assert [(c["uuid"], c["source_offset"], c["source_offsets"]) for c in got] == [
        ("new", 4, {"input": 4}),
        ("old", 9, {"input": 9}),
        ("both", 11, {"input": 11}),
    ]


def test_step_commit_and_upload_durations_become_prometheus_histograms(api: Api) -> None:
    """A run's reported steps, their finished uploads and the checkpoints it mirrors fill
    the pipeline's step, upload and commit histograms: cumulative `le` buckets from 10 ms
    to 60 s and +Inf, counts and sums that only grow (a second report adds; a mirrored
    checkpoint counts once)."""
    from prometheus_client.parser import text_string_to_metric_families

    run, token = started_run(api, "timed")
    samples = [{"ts": 1.0, "step": i + 1, "step_ms": ms} for i, ms in enumerate((8, 40, 700))]
    samples[1]["uploads_s"] = [0.3, 2.5]
    checkpoint = {
        "uuid": "11111111-1111-1111-1111-111111111111",
        "step": 3,
        "fingerprint": "f",
        "created_at": 1.0,
        "duration_ms": 120.0,
    }
    listed = {"listed": [checkpoint], "remote": None}
    assert api.post(f"runs/{run}/opened", token=token, json=OPENED).status_code == 200
    body = {**REPORT, "step": 3, "samples": samples, "checkpoints": listed}
    assert api.post(f"runs/{run}/report", token=token, json=body).status_code == 200
    body = {**REPORT, "step": 4, "samples": [{"ts": 2.0, "step": 4, "step_ms": 90_000}]}
    r = api.post(f"runs/{run}/report", token=token, json={**body, "checkpoints": listed})
    assert r.status_code == 200

    def histogram(name: str) -> dict[str, float]:
        text = api.get("/metrics").text
        for family in text_string_to_metric_families(text):
            if family.name == name:
                return {
                    s.labels.get("le", s.name.rsplit("_", 1)[-1]): s.value
                    for s in family.samples
                    if s.labels["pipeline"] == "timed"
                }
        raise AssertionError(f"no {name}")

    step = histogram("spindle_pipeline_step_duration_seconds")
    assert [step[le] for le in ("0.01", "0.05", "0.5", "1", "60", "+Inf")] == [1, 2, 2, 3, 3, 4]
    assert step["count"] == 4 and step["sum"] == pytest.approx(90.748)
    commit = histogram("spindle_pipeline_commit_duration_seconds")
    assert [commit[le] for le in ("0.1", "0.25", "+Inf")] == [0, 1, 1]
    assert commit["sum"] == pytest.approx(0.12)
    upload = histogram("spindle_pipeline_upload_duration_seconds")
    assert [upload[le] for le in ("0.25", "0.5", "2.5", "+Inf")] == [0, 1, 2, 2]
    assert upload["sum"] == pytest.approx(2.8)
    bad = {**REPORT, "step": 5, "samples": [{"ts": 3.0, "step": 5, "uploads_s": [-1.0]}]}
    r = api.post(f"runs/{run}/report", token=token, json=bad)
    assert r.status_code == 422 and "uploads_s" in r.text
