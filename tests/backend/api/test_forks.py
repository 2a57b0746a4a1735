"""The REST API: forking a pipeline at a retained checkpoint (`POST /pipelines/{name}/fork`),
its validation, lineage and shared storage. Over a real metadata database (SQLite and
PostgreSQL), storage locations built with the engine itself."""

from __future__ import annotations

import os
from typing import Any

import pytest

from backend.models import Role
from storage_engine import StorageLocation

from ..api_fixtures import CLICKS, Api, build_checkpoints, clicks_spec, error, fields

pytestmark = pytest.mark.timeout(120)

FORK = "clicks-fork"


def view_only(name: str = CLICKS) -> dict[str, Any]:
    """clicks-per-user with only its `view` sink: a fork of it writes nowhere it does."""
    spec = clicks_spec(name)
    spec["sinks"] = [s for s in spec["sinks"] if s["kind"] == "view"]
    return spec


def origin(api: Api, n: int = 3) -> list[str]:
    api.create_pipeline(view_only())
    return build_checkpoints(api.storage(CLICKS), n)


def fork(api: Api, token: str = "admin", **body: Any) -> Any:
    return api.post(f"pipelines/{CLICKS}/fork", token=token, json={"name": FORK, **body})


def test_a_fork_holds_the_origins_checkpoint_and_shows_its_lineage(api: Api) -> None:
    uids = origin(api)
    r = fork(api, checkpoint="2")  # a step; a uuid, an identifier or `latest` work too
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["name"] == FORK and out["state"] == "stopped" and out["checkpoints"] == 1
    lineage = out["forked_from"]
    assert {k: lineage[k] for k in ("pipeline", "checkpoint", "step")} == {
        "pipeline": CLICKS,
        "checkpoint": uids[1],
        "step": 2,
    }
    assert lineage["forked_at"]
    assert out["spec"] == {**view_only(), "name": FORK}
    assert api.runs(FORK) == []
    listed = api.get(f"pipelines/{FORK}/checkpoints").json()
    assert [(c["uuid"], c["step"], c["parent"]) for c in listed] == [(uids[1], 2, None)]
    assert listed[0]["source_offsets"] == {"input": 20}
    assert api.get(f"pipelines/{FORK}").json()["forked_from"] == lineage
    assert api.get(f"pipelines/{CLICKS}").json()["forked_from"] is None
    assert {p["name"]: p["forked_from"] for p in api.get("pipelines").json()} == {
        CLICKS: None,
        FORK: lineage,
    }
    # The files are shared, not copied.
    with StorageLocation.open(str(api.storage(FORK)), read_only=True) as loc:
        files = {b for m in loc.checkpoint_spines(uids[1]).values() for b in m.batches}
    assert files
    for f in files:
        a, b = os.stat(api.storage(CLICKS) / f), os.stat(api.storage(FORK) / f)
        assert a.st_ino == b.st_ino and a.st_nlink == 2

    # The origin deleted: the fork keeps its checkpoint, its files and its lineage.
    api.reads_expire()
    assert api.delete(f"pipelines/{CLICKS}").status_code == 204
    assert not api.storage(CLICKS).exists()
    api.reads_expire()
    assert [c["uuid"] for c in api.get(f"pipelines/{FORK}/checkpoints").json()] == [uids[1]]
    assert api.get(f"pipelines/{FORK}").json()["forked_from"] == lineage
    with StorageLocation.open(str(api.storage(FORK)), checkpoint="latest") as loc:
        assert loc.restored is not None and loc.restored.uuid == uids[1]
        assert all(os.stat(api.storage(FORK) / f).st_nlink == 1 for f in files)


def test_a_fork_started_at_once_drops_the_state_that_no_longer_fits(api: Api) -> None:
    uids = origin(api)
    r = fork(api, checkpoint=uids[0], start=True, description="trying a change")
    assert r.status_code == 201, r.text
    runs = api.runs(FORK)
    assert [(x.from_checkpoint, x.drop_state) for x in runs] == [("latest", ["*"])]
    assert api.queue.launched == [runs[0].id]
    assert r.json()["description"] == "trying a change"


def test_a_forks_first_start_drops_the_state_that_no_longer_fits(api: Api) -> None:
    origin(api)
    assert fork(api, checkpoint="latest").status_code == 201
    assert api.post(f"pipelines/{FORK}/start").status_code == 202
    assert [x.drop_state for x in api.runs(FORK)] == [["*"]]


def test_fork_validation(api: Api) -> None:
    uids = origin(api)
    url = f"pipelines/{CLICKS}/fork"
    for body, status, code, field in (
        ({"name": "Not A Slug", "checkpoint": "1"}, 422, "invalid_request", "name"),
        ({"name": "../escape", "checkpoint": "1"}, 422, "invalid_request", "name"),
        ({"name": FORK}, 422, "invalid_request", "checkpoint"),
        ({"name": FORK, "checkpoint": "../../etc"}, 422, "invalid_request", "checkpoint"),
        ({"name": FORK, "checkpoint": "1", "extra": 1}, 422, "invalid_request", "extra"),
        ({"name": FORK, "checkpoint": "1", "spec": {**view_only(), "name": "x"}},
         422, "invalid_spec", "spec.name"),
        ({"name": FORK, "checkpoint": "1", "spec": {**view_only(FORK), "trigger": 5}},
         422, "invalid_spec", "spec.trigger"),
        ({"name": FORK, "checkpoint": "9"}, 404, "not_found", "checkpoint"),
        ({"name": FORK, "checkpoint": "nope"}, 404, "not_found", "checkpoint"),
        ({"name": CLICKS, "checkpoint": "1"}, 409, "conflict", "name"),
    ):  # fmt: skip
        body_ = error(api.post(url, json=body), status, code)
        assert any(f == field or f.startswith(field + ".") for f in fields(body_)), body_
    # An unknown checkpoint's answer lists the retained ones.
    body = error(api.post(url, json={"name": FORK, "checkpoint": "nope"}), 404, "not_found")
    assert all(u in body["message"] for u in uids)
    # Writing into the origin's sinks (its spec's files sink, unchanged) is refused.
    api.create_pipeline(clicks_spec("with-files"))
    build_checkpoints(api.storage("with-files"), 1)
    r = api.post("pipelines/with-files/fork", json={"name": FORK, "checkpoint": "1"})
    assert fields(error(r, 422, "invalid_spec")) == ["spec.sinks[0]"]
    # An origin that never ran has no checkpoint to fork.
    api.create_pipeline(view_only("never-ran"))
    for ref in ("latest", "1", uids[0]):
        r = api.post("pipelines/never-ran/fork", json={"name": FORK, "checkpoint": ref})
        assert "retained: none" in error(r, 404, "not_found")["message"]
    # The same role as creating a pipeline; an unknown origin is a 404.
    assert fork(api, api.token(Role.viewer), checkpoint="1").status_code == 403
    assert error(api.post("pipelines/nope/fork", json={"name": FORK, "checkpoint": "1"}),
                 404, "not_found")  # fmt: skip
    # Nothing was left behind by the refusals.
    assert not api.storage(FORK).exists()
    assert [p["name"] for p in api.get("pipelines").json()] == [CLICKS, "never-ran", "with-files"]
    # A changed spec (the view's own query is another) is accepted.
    changed = view_only(FORK)
    changed["sinks"] = [*changed["sinks"], {"name": "out", "kind": "discard", "from": "per_user"}]
    r = api.post(url, json={"name": FORK, "checkpoint": uids[2], "spec": changed})
    assert r.status_code == 201, r.text
    assert r.json()["spec"] == changed
    assert error(fork(api, checkpoint="1"), 409, "conflict")
