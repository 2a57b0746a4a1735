"""Forks with the object-store tier, against a real S3 server (SeaweedFS): the fork's prefix
borrows the origin's objects (none is copied), and the origin's gc, retention and deletion
keep them until the fork releases them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from storage_engine import StorageLocation
from storage_engine.forks import BORROWED, REFS, fork_location, referenced_keys
from storage_engine.forks import delete_prefix as delete_remote
from storage_engine.input_log import LOG_DIR, InputLog
from storage_engine.objstore import ObjectStore, ObjectStoreSettings
from storage_engine.remote import BATCHES, MANIFESTS
from storage_engine.remote_log import PREFIX as LOG_PREFIX
from tests.storage_engine.test_location import INT, rows, state

from .test_remote_tier import SETTINGS, model

SCHEMA = pa.schema([("k", pa.int64())])


def prefix_store(s3_server: Any, bucket: str, prefix: str) -> ObjectStore:
    return ObjectStore(
        ObjectStoreSettings(
            endpoint=s3_server.endpoint,
            bucket=bucket,
            prefix=prefix,
            access_key=s3_server.access_key,
            secret_key=s3_server.secret_key,
            timeout_s=5.0,
            retry_max_wait_s=0.3,
        )
    )


@pytest.fixture
def stores(s3_server: Any, s3_bucket: str) -> tuple[ObjectStore, ObjectStore, ObjectStore]:
    """The whole bucket, the origin's prefix and the fork's."""
    return (
        prefix_store(s3_server, s3_bucket, ""),
        prefix_store(s3_server, s3_bucket, "pipelines/origin"),
        prefix_store(s3_server, s3_bucket, "pipelines/fork"),
    )


def open_remote(path: Path, store: ObjectStore, **kw: Any) -> StorageLocation:
    return StorageLocation.open(str(path), fingerprint="fp", remote=store, settings=SETTINGS, **kw)


def batch_objects(bucket: ObjectStore) -> set[str]:
    return {o.key for o in bucket.list("") if "/" + BATCHES in "/" + o.key}


def origin_with_history(path: Path, store: ObjectStore) -> tuple[list[str], set[str]]:
    """Three remote-durable checkpoints ([0,100), [0,200), [0,300)); the batch files of the
    first; an input log mirrored with them."""
    log = InputLog(str(path / LOG_DIR / "s"), SCHEMA)
    uids = []
    with open_remote(path, store) as loc:
        sp = loc.spine("op", INT)
        for i in range(3):
            sp.insert(rows(i * 100, (i + 1) * 100))
            log.append(pa.table({"k": list(range(i * 10, (i + 1) * 10))}))
            uids.append(loc.commit_async(step=i + 1).wait_remote(timeout=60))
        first = set().union(*(m.batches for m in loc.checkpoint_spines(uids[0]).values()))
    return uids, first


def test_a_fork_borrows_objects_and_the_origin_keeps_them_until_released(
    tmp_path: Path, stores: tuple[ObjectStore, ObjectStore, ObjectStore]
) -> None:
    bucket, o_store, f_store = stores
    a, f = tmp_path / "a", tmp_path / "f"
    uids, first = origin_with_history(a, o_store)
    before = {o.key for o in bucket.list("")}
    batches_before = batch_objects(bucket)
    assert {BATCHES + n for n in first} <= {o.key for o in o_store.list(BATCHES)}

    res = fork_location(str(a), str(f), uids[0], origin_store=o_store, fork_store=f_store)
    after = {o.key for o in bucket.list("")}
    # Nothing copied: no new batch or log object anywhere; only small documents are new.
    assert batch_objects(bucket) == batches_before
    assert not f_store.list(BATCHES) and not f_store.list(LOG_PREFIX)
    new = sorted(after - before)
    assert [k for k in new if not k.startswith("pipelines/fork/")] == [
        k for k in new if k.startswith(f"pipelines/origin/{REFS}")
    ]
    assert len([k for k in new if k.startswith(f"pipelines/origin/{REFS}")]) == 1
    assert {k.removeprefix("pipelines/fork/").split("/")[0] for k in new if "fork" in k} == {
        BORROWED,
        "checkpoints",
        "manifests",
    }
    assert res.borrowed_objects == len(first) + 3  # and the 3 log segments
    held = referenced_keys(o_store)
    assert {BATCHES + n for n in first} <= held

    # The fork runs: opens as the writer of its prefix, uploads only its own new files.
    with open_remote(f, f_store) as fork:
        assert state(fork) == model((0, 100))
        fork.spine("op", INT).insert(rows(5000, 5010))
        fork.commit_async(step=2).wait_remote(timeout=60)
    assert batch_objects(bucket) > batches_before

    # The origin's gc and retention remove the forked checkpoint: its objects stay.
    with open_remote(a, o_store) as loc:
        loc.delete_checkpoint(uids[0])
        assert loc.remote is not None and loc.remote.wait_idle(60)
    assert all(o_store.size(BATCHES + n) is not None for n in first)
    # The origin is deleted altogether (pipeline delete): still there for the fork.
    delete_remote(o_store)
    shutil.rmtree(a)
    assert not o_store.list(MANIFESTS)
    assert {o.key for o in o_store.list(BATCHES)} == {BATCHES + n for n in first}
    # The fork restores on an empty machine, reading the borrowed objects at their owner.
    with open_remote(tmp_path / "f2", f_store, from_remote=True, checkpoint=uids[0]) as fork:
        assert state(fork) == model((0, 100))
        assert fork.remote is not None and fork.remote.cache.fetched_bytes > 0
    log = InputLog(str(tmp_path / "f2" / LOG_DIR / "s"), SCHEMA)
    assert log.end() == 30
    # The fork releases its last reference (its pipeline is deleted): the objects go.
    delete_remote(f_store)
    assert not list(bucket.list(""))


def test_the_origins_gc_collects_what_the_fork_released(
    tmp_path: Path, stores: tuple[ObjectStore, ObjectStore, ObjectStore]
) -> None:
    bucket, o_store, f_store = stores
    a, f = tmp_path / "a", tmp_path / "f"
    with open_remote(a, o_store) as loc:
        loc.spine("op", INT).insert(rows(0, 100))
        forked = loc.commit_async(step=1).wait_remote(timeout=60)
        first = set().union(*(m.batches for m in loc.checkpoint_spines(forked).values()))
    fork_location(str(a), str(f), forked, origin_store=o_store, fork_store=f_store)
    # The origin goes on from fresh state (none of its files shared with the fork's), and
    # its retention removes the forked checkpoint: the fork still holds the objects.
    with open_remote(a, o_store, checkpoint="none") as loc:
        loc.spine("op", INT).insert(rows(1000, 1100))
        loc.commit_async(step=1).wait_remote(timeout=60)
        loc.delete_checkpoint(forked)
        assert loc.remote is not None and loc.remote.wait_idle(60)
    shared = {BATCHES + n for n in first}
    assert all(o_store.size(k) is not None for k in shared)
    with open_remote(f, f_store) as fork:
        assert state(fork) == model((0, 100))
    # The fork releases them (its pipeline is deleted); the origin exists, so it collects
    # them at its next gc.
    delete_remote(f_store)
    shutil.rmtree(f)
    assert not referenced_keys(o_store) and not f_store.list("")
    assert all(o_store.size(k) is not None for k in shared)
    with open_remote(a, o_store) as loc:
        loc.spine("op", INT).insert(rows(2000, 2001))
        loc.commit_async(step=2).wait_remote(timeout=60)
        assert len(loc.gc_checkpoint().deleted) == 1
        assert loc.remote is not None and loc.remote.wait_idle(60)
        assert state(loc) == {**model((1000, 1100)), (2000, 2000 % 3): 1}
    assert all(o_store.size(k) is None for k in shared)
    assert batch_objects(bucket) == {"pipelines/origin/" + o.key for o in o_store.list(BATCHES)}


def test_a_fork_of_a_fork_borrows_from_the_owner(
    tmp_path: Path, s3_server: Any, s3_bucket: str, stores: tuple[ObjectStore, ...]
) -> None:
    """The grandchild references the objects where they are (the origin's prefix), so the
    middle fork's deletion does not take them; the last release does."""
    bucket, o_store, f_store = stores
    g_store = prefix_store(s3_server, s3_bucket, "pipelines/grandchild")
    a, f, g = tmp_path / "a", tmp_path / "f", tmp_path / "g"
    uids, first = origin_with_history(a, o_store)
    fork_location(str(a), str(f), uids[0], origin_store=o_store, fork_store=f_store)
    res = fork_location(str(f), str(g), uids[0], origin_store=f_store, fork_store=g_store)
    assert res.borrowed_objects == len(first) + 3
    assert len(o_store.list(REFS)) == 2 and not f_store.list(REFS)
    delete_remote(o_store)
    shutil.rmtree(a)
    delete_remote(f_store)  # the middle fork goes: its reference is released
    shutil.rmtree(f)
    assert len(o_store.list(REFS)) == 1
    with open_remote(tmp_path / "g2", g_store, from_remote=True) as fork:
        assert state(fork) == model((0, 100))
    shutil.rmtree(g)
    delete_remote(g_store)
    assert not list(bucket.list(""))
