"""The REST API: checkpoints and operations, and the operations the worker performs for a stopped
pipeline. Over a real metadata database, each test on SQLite and on PostgreSQL; no Spark and no
Celery (the TaskQueue is a recording double), storage locations built with the engine itself
(conftest.py)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from backend.models import (
    OperationKind,
    Pipeline,
)
from backend.services import checkpoints as cps
from pipeline_spec import exits
from storage_engine import StorageLocation

from ..api_fixtures import (
    BIDS,
    CLICKS,
    UNKNOWN_UUID,
    Api,
    bid,
    build_checkpoints,
    clicks_spec,
    end_run,
    error,
    fields,
    input_log,
    log_spec,
    ndjson,
)

pytestmark = pytest.mark.timeout(120)


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
    assert [c["source_offsets"] for c in listed] == [{"input": n} for n in (10, 20, 30)]
    assert all(c["size_bytes"] > 0 and c["local_durable"] and not c["pinned"] for c in listed)
    api.reads_expire()  # the manifest changed outside the API: its own answer is a read old
    assert api.get(f"pipelines/{CLICKS}").json()["checkpoints"] == 3
    # The manifest wins: a checkpoint deleted behind the API's back disappears.
    with StorageLocation.open(str(api.storage(CLICKS)), checkpoint="none") as loc:
        loc.delete_checkpoint(uids[1])
    api.reads_expire()
    listed = api.get(f"pipelines/{CLICKS}/checkpoints").json()
    assert [c["uuid"] for c in listed] == [uids[0], uids[2]]


def test_a_checkpoint_of_a_one_source_release_lists_its_offset_as_the_first_tables(
    api: Api,
) -> None:
    """Such a checkpoint holds `source_offset` alone: the offset of the table the spec gives
    first, whatever it names it. The database keeps it per table, as every checkpoint's."""
    spec = clicks_spec()
    spec["source"]["table"] = "clicks"
    api.create_pipeline(spec)
    with StorageLocation.open(str(api.storage(CLICKS)), checkpoint="none") as loc:
        loc.commit(step=1, metadata={"source_offset": 7})
        loc.commit(step=2, metadata={"source_offsets": {"clicks": 9}})
    (old, new) = api.get(f"pipelines/{CLICKS}/checkpoints").json()
    assert (old["source_offset"], old["source_offsets"]) == (7, {"clicks": 7})
    assert (new["source_offset"], new["source_offsets"]) == (9, {"clicks": 9})
    with api.db.session() as s:
        (p,) = s.scalars(select(Pipeline).where(Pipeline.name == CLICKS))
        assert [r.source_offsets for r in cps.rows(s, p.id)] == [{"clicks": 7}, {"clicks": 9}]


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


def manifest_uuids(api: Api, name: str) -> list[str]:
    return [c.uuid for c in cps.manifest(api.storage(name))]


def test_offline_gc_deletes_the_oldest_unpinned_checkpoint(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    uids = build_checkpoints(api.storage(CLICKS), 4, fingerprint="a-circuit")
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
    # The next start still resumes the newest checkpoint.
    with StorageLocation.open(
        str(api.storage(CLICKS)), read_only=True, check_fingerprint=False
    ) as loc:
        assert loc.restored is not None and loc.restored.uuid == uids[3]


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
