"""The object-store tier against a real S3 server (SeaweedFS): upload, sharing, restore on an
empty machine, remote gc, fencing, and faults (server stopped, objects corrupted or gone)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from storage_engine import CorruptionError, EngineSettings, StorageLocation
from storage_engine.fileio import PosixFileLayer
from storage_engine.input_log import LOG_DIR, InputLog
from storage_engine.objstore import ObjectMissingError, ObjectStore, ObjectStoreSettings
from storage_engine.remote import (
    BATCHES,
    CHECKPOINTS,
    MANIFESTS,
    DivergedError,
    FencedError,
    read_remote_manifest,
)
from storage_engine.remote_log import PREFIX as LOG_PREFIX
from storage_engine.remote_pull import pull
from tests.polling import wait_until
from tests.storage_engine.test_location import INT, rows, state

ROOT = Path(__file__).resolve().parents[3]
SETTINGS = EngineSettings(block_rows=64, merge_base_rows=10**6, remote_close_timeout_s=2.0)


@pytest.fixture
def store(s3_server: Any, s3_bucket: str) -> ObjectStore:
    return ObjectStore(
        ObjectStoreSettings(
            endpoint=s3_server.endpoint,
            bucket=s3_bucket,
            prefix="pipelines/p1",
            access_key=s3_server.access_key,
            secret_key=s3_server.secret_key,
            timeout_s=5.0,
            retry_max_wait_s=0.3,
            upload_concurrency=3,
        )
    )


def open_remote(path: Path, store: ObjectStore, **kw: Any) -> StorageLocation:
    kw.setdefault("settings", SETTINGS)
    return StorageLocation.open(str(path), fingerprint="fp", remote=store, **kw)


def model(*ranges: tuple[int, int]) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for lo, hi in ranges:
        for k in range(lo, hi):
            out[(k, k % 3)] = out.get((k, k % 3), 0) + 1
    return out


def keys(store: ObjectStore, prefix: str) -> set[str]:
    return {o.key for o in store.list(prefix)}


def test_commit_is_uploaded_and_restored_lazily_on_an_empty_machine(
    tmp_path: Path, store: ObjectStore
) -> None:
    loc = open_remote(tmp_path / "a", store)
    sp = loc.spine("op", INT)
    sp.insert(rows(0, 150_000))  # one file of several 1 MiB chunks
    for i in range(150, 154):
        sp.insert(rows(i * 1000, (i + 1) * 1000))
    h = loc.commit_async(identifier="first", step=4)
    uid = h.wait_remote(timeout=60)
    assert h.state == "remote_durable"
    assert h.local_ms is not None and h.remote_ms is not None and h.remote_ms >= h.local_ms
    assert loc.status()["remote"]["checkpoints"] == [uid]
    files = {n.name for n in (tmp_path / "a").iterdir() if n.suffix == ".batch"}
    assert {BATCHES + f for f in files} == keys(store, BATCHES)
    assert keys(store, f"{CHECKPOINTS}{uid}/") == {
        f"{CHECKPOINTS}{uid}/checkpoint.json",
        f"{CHECKPOINTS}{uid}/spine-op.json",
    }
    _, remote = read_remote_manifest(store)
    assert [c.uuid for c in remote.checkpoints] == [uid]
    loc.close()

    # Machine B: nothing local. Reads are served at once; batch files come on demand.
    b = open_remote(tmp_path / "b", store, from_remote=True)
    assert b.restored is not None and b.restored.uuid == uid and b.step == 4
    assert not [n for n in (tmp_path / "b").iterdir() if n.suffix == ".batch"]
    got = b.spine("op", INT).seek([5, 2500, 999_999])
    assert got.to_dict() == {(5, 2): 1, (2500, 1): 1}
    fetched = b.remote.cache.fetched_bytes if b.remote else 0
    total = sum(f.stat().st_size for f in (tmp_path / "a").iterdir() if f.suffix == ".batch")
    assert 0 < fetched < total  # only the blocks the lookups needed
    assert state(b) == model((0, 154_000))
    # B is now the writer: its commits go to the same prefix, sharing A's files.
    b.spine("op", INT).insert(rows(4000, 4100))
    uid2 = b.commit_async(step=5).wait_remote(timeout=60)
    assert [c.uuid for c in read_remote_manifest(store)[1].checkpoints] == [uid, uid2]
    b.close()


def test_batch_files_are_uploaded_once_and_shared(tmp_path: Path, store: ObjectStore) -> None:
    loc = open_remote(tmp_path / "a", store)
    sp = loc.spine("op", INT)
    sp.insert(rows(0, 3000))
    loc.commit_async(step=1).wait_remote(timeout=60)
    assert loc.remote is not None
    sent = loc.remote.uploaded_bytes
    assert sent > 0
    loc.commit_async(step=2).wait_remote(timeout=60)  # nothing changed: metadata only
    assert loc.remote.uploaded_bytes == sent
    sp.insert(rows(3000, 3100))
    loc.commit_async(step=3).wait_remote(timeout=60)
    assert 0 < loc.remote.uploaded_bytes - sent < sent  # only the new batch
    loc.close()


def test_eager_pull_downloads_and_verifies_everything(tmp_path: Path, store: ObjectStore) -> None:
    loc = open_remote(tmp_path / "a", store)
    loc.spine("op", INT).insert(rows(0, 5000))
    uid = loc.commit_async(step=1).wait_remote(timeout=60)
    loc.close()
    seen: list[tuple[int, int]] = []
    res = pull(
        store,
        str(tmp_path / "b"),
        PosixFileLayer(),
        eager=True,
        progress=lambda d, t: seen.append((d, t)),
    )
    assert res.checkpoint.uuid == uid and res.downloaded_bytes > 0
    assert seen and seen[-1][0] == seen[-1][1] == res.downloaded_bytes
    # A plain local location now, usable without the object store.
    with StorageLocation.open(str(tmp_path / "b"), fingerprint="fp", settings=SETTINGS) as b:
        assert state(b) == model((0, 5000))


def test_remote_gc_mirrors_local_gc(tmp_path: Path, store: ObjectStore) -> None:
    merging = SETTINGS.model_copy(update={"merge_base_rows": 100, "merge_fanout": 2})
    loc = open_remote(tmp_path / "a", store, settings=merging)
    sp = loc.spine("op", INT)
    uids = []
    for i in range(3):
        sp.insert(rows(i * 500, (i + 1) * 500))
        loc.wait_idle()
        uids.append(loc.commit_async(step=i + 1).wait_remote(timeout=60))
    assert loc.remote is not None
    before = keys(store, BATCHES)
    loc.gc_checkpoint()
    assert loc.remote.wait_idle(timeout=60)
    assert [c.uuid for c in read_remote_manifest(store)[1].checkpoints] == uids[1:]
    assert not keys(store, f"{CHECKPOINTS}{uids[0]}/")
    # Remote batch objects = what the remaining checkpoints or the live spine reference.
    local = {n.name for n in (tmp_path / "a").iterdir() if n.suffix == ".batch"}
    after = keys(store, BATCHES)
    assert after < before
    assert {k[len(BATCHES) :] for k in after} <= local
    loc.close()
    b = open_remote(tmp_path / "b", store, from_remote=True)
    assert state(b) == model((0, 1500))
    b.close()


def test_server_stopped_mid_upload_delays_the_remote_copy_only(
    tmp_path: Path, store: ObjectStore, s3_server: Any
) -> None:
    slow = ObjectStore(store.settings.model_copy(update={"upload_concurrency": 1}))
    settings = SETTINGS.model_copy(update={"max_batches_per_spine": 10**6})
    loc = open_remote(tmp_path / "a", slow, settings=settings)
    sp = loc.spine("op", INT)
    sp.insert(rows(0, 2000))
    first = loc.commit_async(step=1).wait_remote(timeout=60)
    for i in range(30):  # thirty files of ~0.5 MB: an upload long enough to cut
        sp.insert(rows(2000 + i * 20_000, 2000 + (i + 1) * 20_000))
    known = keys(store, BATCHES)
    h = loc.commit_async(step=2)
    second = h.wait_local(timeout=60)  # local durability does not wait for S3
    wait_until(lambda: len(keys(store, BATCHES)) >= len(known) + 2, 60, "the upload", every=0.01)
    s3_server.stop(grace=0)  # SIGKILL: a graceful stop could let the upload finish
    try:
        assert loc.remote is not None
        assert not loc.remote.wait_idle(timeout=2.0)
        assert h.state == "local_durable"
        status = loc.status()["remote"]
        assert status["last_error"] and "retrying" in status["last_error"]
        assert status["checkpoints"] == [first]
    finally:
        s3_server.start()
    assert h.wait_remote(timeout=120) == second
    assert [c.uuid for c in read_remote_manifest(store)[1].checkpoints] == [first, second]
    loc.close()
    b = open_remote(tmp_path / "b", store, from_remote=True)
    assert state(b) == model((0, 2000), (2000, 602_000))
    b.close()


def test_a_stopped_server_is_reported_until_it_is_back(
    tmp_path: Path, store: ObjectStore, s3_server: Any
) -> None:
    """The run's durability watch (workers.runtime.durability) turns the outage into events: before,
    it showed nowhere but the tier's own status."""
    from workers.runtime.durability import DurabilityWatch

    loc = open_remote(tmp_path / "a", store)
    events: list[dict[str, Any]] = []
    watch = DurabilityWatch(events.append, lambda: loc.remote)
    sp = loc.spine("op", INT)
    sp.insert(rows(0, 100))
    watch.track(h1 := loc.commit_async(step=1))
    h1.wait_remote(timeout=60)
    s3_server.stop(grace=0)
    try:
        sp.insert(rows(100, 200))
        watch.track(h2 := loc.commit_async(step=2))
        h2.wait_local(timeout=60)
        assert loc.remote is not None
        remote = loc.remote
        wait_until(lambda: remote.last_error, 60, "the failed upload to be noticed", every=0.05)
        watch.check()
        watch.check()
        (down,) = events
        assert down["event"] == "remote_unavailable"
        assert "checkpoints from step 2 are local only" in down["message"]
    finally:
        s3_server.start()
    h2.wait_remote(timeout=120)
    watch.check()
    assert [e["event"] for e in events] == ["remote_unavailable", "remote_available"]
    loc.close()


def test_uploads_resume_after_a_restart(tmp_path: Path, store: ObjectStore, s3_server: Any) -> None:
    loc = open_remote(tmp_path / "a", store)
    loc.spine("op", INT).insert(rows(0, 1000))
    first = loc.commit_async(step=1).wait_remote(timeout=60)
    s3_server.stop()
    try:
        loc.spine("op", INT).insert(rows(1000, 2000))
        h = loc.commit_async(step=2)
        second = h.wait_local(timeout=60)
        loc.close()  # gives up after remote_close_timeout_s; the upload is still owed
        assert h.state == "remote_failed"
    finally:
        s3_server.start()
    assert [c.uuid for c in read_remote_manifest(store)[1].checkpoints] == [first]
    again = open_remote(tmp_path / "a", store)  # catches up at open
    assert again.remote is not None and again.remote.wait_idle(timeout=120)
    assert [c.uuid for c in read_remote_manifest(store)[1].checkpoints] == [first, second]
    again.close()


def _corrupt(store: ObjectStore, key: str) -> None:
    data = bytearray(store.get_bytes(key))
    data[len(data) // 3] ^= 0xFF  # inside the first blocks, not the footer
    store.put_bytes(key, bytes(data))


def _two_checkpoints(tmp_path: Path, store: ObjectStore) -> tuple[str, str, str]:
    """Two checkpoints; returns (older, newer, a batch file only the newer one has)."""
    loc = open_remote(tmp_path / "a", store)
    sp = loc.spine("op", INT)
    sp.insert(rows(0, 2000))
    old = loc.commit_async(step=1).wait_remote(timeout=60)
    before = {n.name for n in (tmp_path / "a").iterdir() if n.suffix == ".batch"}
    sp.insert(rows(2000, 4000))
    new = loc.commit_async(step=2).wait_remote(timeout=60)
    after = {n.name for n in (tmp_path / "a").iterdir() if n.suffix == ".batch"}
    loc.close()
    (only_new,) = after - before
    return old, new, only_new


@pytest.mark.parametrize("eager", [True, False])
def test_a_corrupt_object_is_named_and_fallback_restores_the_older(
    tmp_path: Path, store: ObjectStore, eager: bool
) -> None:
    old, _new, victim = _two_checkpoints(tmp_path, store)
    _corrupt(store, BATCHES + victim)
    if eager:
        with pytest.raises(CorruptionError, match=victim) as e:
            open_remote(tmp_path / "b", store, from_remote=True, eager=True)
        assert store.url(BATCHES + victim) in str(e.value)
    else:
        # Lazy: header, footer and index are intact, so the restore opens; the first read
        # of the damaged block fails, naming the object and the block.
        b = open_remote(tmp_path / "b", store, from_remote=True)
        with pytest.raises(CorruptionError, match=r"block \d+") as e:
            state(b)
        assert store.url(BATCHES + victim) in str(e.value)
        b.close()
        return
    c = open_remote(tmp_path / "c", store, from_remote=True, eager=True, remote_fallback=True)
    assert c.restored is not None and c.restored.uuid == old
    assert state(c) == model((0, 2000))
    c.close()


def test_a_missing_object_is_named_and_fallback_restores_the_older(
    tmp_path: Path, store: ObjectStore
) -> None:
    old, new, victim = _two_checkpoints(tmp_path, store)
    store.remove([BATCHES + victim])
    with pytest.raises(ObjectMissingError, match=victim):
        open_remote(tmp_path / "b", store, from_remote=True)
    c = open_remote(tmp_path / "c", store, from_remote=True, remote_fallback=True)
    assert c.restored is not None and c.restored.uuid == old
    assert state(c) == model((0, 2000))
    # Taking over after a fallback drops the broken checkpoint from the remote manifest.
    c.commit_async(step=3).wait_remote(timeout=60)
    remote = [x.uuid for x in read_remote_manifest(store)[1].checkpoints]
    assert new not in remote and remote[0] == old
    c.close()


def test_a_location_pulled_with_fallback_opens_with_its_object_store(
    tmp_path: Path, store: ObjectStore
) -> None:
    """`pull --fallback` left the broken newest checkpoint out; opening the pulled location
    with the store was refused (DivergedError, recommending that very pull)."""
    old, new, victim = _two_checkpoints(tmp_path, store)
    store.remove([BATCHES + victim])
    res = pull(store, str(tmp_path / "b"), PosixFileLayer(), fallback=True)
    assert res.checkpoint.uuid == old and new in res.skipped
    with open_remote(tmp_path / "b", store) as b:
        assert b.restored is not None and b.restored.uuid == old
        b.commit_async(step=3).wait_remote(timeout=60)
    remote = [x.uuid for x in read_remote_manifest(store)[1].checkpoints]
    assert remote[0] == old and new not in remote
    assert not (tmp_path / "b" / "pull-skipped.json").exists()


def test_a_failed_pull_leaves_the_directory_as_it_was(tmp_path: Path, store: ObjectStore) -> None:
    _, _, victim = _two_checkpoints(tmp_path, store)
    store.remove([BATCHES + victim])
    dst = tmp_path / "dst"
    with pytest.raises(ObjectMissingError):
        pull(store, str(dst), PosixFileLayer(), eager=True)
    assert not dst.exists() or list(dst.iterdir()) == []
    assert pull(store, str(dst), PosixFileLayer(), eager=True, fallback=True).skipped


def test_the_input_log_travels_with_the_checkpoints(tmp_path: Path, store: ObjectStore) -> None:
    """Records ingested but not yet consumed by a checkpoint are not lost with the disk: the
    log's segments are uploaded with each checkpoint, truncated with the local log, and come
    back with a pull."""
    schema = pa.schema([("k", pa.int64())])

    def ingest(log: InputLog, *values: int) -> None:
        log.append(pa.table({"k": list(values)}, schema=schema))

    a = tmp_path / "a"
    loc = open_remote(a, store)
    log = InputLog(str(a / LOG_DIR / "bids"), schema)
    ingest(log, 0, 1)
    ingest(log, 2)
    ingest(log, 3, 4, 5)
    loc.commit_async(step=1, metadata={"source_offsets": {"bids": 2}}).wait_remote(timeout=60)
    ingest(log, 6)  # after the upload: on this disk only, until the next checkpoint
    assert keys(store, LOG_PREFIX) == {f"{LOG_PREFIX}bids/{s.name}" for s in log.segments()[:3]}
    # Machine B: the checkpoint and the records it has not consumed.
    b = tmp_path / "b"
    pull(store, str(b), PosixFileLayer())
    moved = InputLog(str(b / LOG_DIR / "bids"), schema)
    assert (moved.start(), moved.end()) == (0, 6)
    assert [r["k"] for x in moved.read(2, 6) for r in x.to_pylist()] == [2, 3, 4, 5]
    # The local log truncated below the oldest checkpoint's offset: so is the copy.
    assert log.truncate_below(3) == 2
    loc.commit_async(step=2, metadata={"source_offsets": {"bids": 7}}).wait_remote(timeout=60)
    assert keys(store, LOG_PREFIX) == {f"{LOG_PREFIX}bids/{s.name}" for s in log.segments()}
    loc.close()


def test_a_missing_bucket_is_created_by_the_writer(tmp_path: Path, store: ObjectStore) -> None:
    """`--remote s3://<missing bucket>/p` failed with a NoSuchBucket traceback."""
    missing = ObjectStore(
        store.settings.model_copy(update={"bucket": f"fresh-{uuid.uuid4().hex[:10]}"})
    )
    assert missing.list("manifests/") == []
    with open_remote(tmp_path / "a", missing) as a:
        a.spine("op", INT).insert(rows(0, 10))
        a.commit_async(step=1).wait_remote(timeout=60)
    assert read_remote_manifest(missing)[1].checkpoints


def test_a_claim_collects_the_uploads_a_fenced_writer_left(
    tmp_path: Path, store: ObjectStore
) -> None:
    """A writer fenced (or killed) between uploading a checkpoint's batch objects and its
    manifest left objects no checkpoint names, which nothing ever deleted."""
    _two_checkpoints(tmp_path, store)
    named = keys(store, BATCHES)
    store.put_bytes(BATCHES + "0000orphan.batch", b"uploaded, never named")
    with open_remote(tmp_path / "b", store, from_remote=True) as b:
        assert b.restored is not None
    assert keys(store, BATCHES) == named


def test_a_second_writer_fences_the_first(tmp_path: Path, store: ObjectStore) -> None:
    a = open_remote(tmp_path / "a", store)
    a.spine("op", INT).insert(rows(0, 1000))
    first = a.commit_async(step=1).wait_remote(timeout=60)
    # Machine B restores from the prefix and becomes its writer.
    b = open_remote(tmp_path / "b", store, from_remote=True)
    b.spine("op", INT).insert(rows(1000, 1100))
    from_b = b.commit_async(step=2).wait_remote(timeout=60)
    # A does not know: its next commit is durable locally, but the upload is refused.
    a.spine("op", INT).insert(rows(5000, 6000))
    h = a.commit_async(step=2)
    h.wait_local(timeout=60)
    with pytest.raises(FencedError, match="claimed by another writer"):
        h.wait_remote(timeout=60)
    assert a.status()["remote"]["fenced"] is True
    assert [c.uuid for c in read_remote_manifest(store)[1].checkpoints] == [first, from_b]
    a.close()
    # Reopening A as the writer would throw B's history away: refused.
    with pytest.raises(DivergedError, match=from_b):
        open_remote(tmp_path / "a", store)
    b.close()
    c = open_remote(tmp_path / "c", store, from_remote=True)
    assert state(c) == model((0, 1100))
    c.close()


def test_opening_an_empty_directory_against_a_used_prefix_is_refused(
    tmp_path: Path, store: ObjectStore
) -> None:
    a = open_remote(tmp_path / "a", store)
    a.spine("op", INT).insert(rows(0, 100))
    a.commit_async(step=1).wait_remote(timeout=60)
    a.close()
    with pytest.raises(DivergedError, match="from_remote"):
        open_remote(tmp_path / "fresh", store)


def test_manifest_keys_are_epoch_ordered(tmp_path: Path, store: ObjectStore) -> None:
    a = open_remote(tmp_path / "a", store)
    a.spine("op", INT).insert(rows(0, 100))
    a.commit_async(step=1).wait_remote(timeout=60)
    assert a.remote is not None and a.remote.epoch == 1
    a.close()
    a = open_remote(tmp_path / "a", store)
    assert a.remote is not None and a.remote.epoch == 2
    latest = sorted(keys(store, MANIFESTS))[-1]
    assert latest.startswith(f"{MANIFESTS}{2:010d}-")
    a.close()


def test_lazy_cache_stays_within_its_budget(tmp_path: Path, store: ObjectStore) -> None:
    a = open_remote(tmp_path / "a", store)
    sp = a.spine("op", INT)
    for i in range(6):
        sp.insert(rows(i * 20_000, (i + 1) * 20_000))
    a.commit_async(step=1).wait_remote(timeout=60)
    a.close()
    small = ObjectStore(store.settings.model_copy(update={"cache_bytes": 1 << 20}))
    b = StorageLocation.open(
        str(tmp_path / "b"), fingerprint="fp", settings=SETTINGS, remote=small, from_remote=True
    )
    assert b.remote is not None
    b.remote.cache.chunk = 64 << 10
    assert state(b) == model((0, 120_000))
    assert b.remote.cache.used <= (1 << 20) + 6 * (64 << 10)
    assert b.remote.cache.fetched_bytes > b.remote.cache.used
    b.close()


def test_concurrent_readers_of_a_lazy_file(tmp_path: Path, store: ObjectStore) -> None:
    a = open_remote(tmp_path / "a", store)
    a.spine("op", INT).insert(rows(0, 50_000))
    a.commit_async(step=1).wait_remote(timeout=60)
    a.close()
    b = open_remote(tmp_path / "b", store, from_remote=True)
    sp = b.spine("op", INT)
    errors: list[BaseException] = []

    def probe(lo: int) -> None:
        try:
            for k in range(lo, 50_000, 997):
                assert sp.seek([k]).to_dict() == {(k, k % 3): 1}
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=probe, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    b.close()


def test_sigkill_during_an_upload_leaves_no_visible_checkpoint_and_resumes(
    tmp_path: Path, store: ObjectStore
) -> None:
    """A writer killed mid-upload: the remote manifest still names only the earlier
    checkpoint, a restore gets that one, and reopening the location finishes the upload."""
    path = tmp_path / "a"
    with open_remote(path, store) as loc:
        loc.spine("op", INT).insert(rows(0, 10_000))
        first = loc.commit_async(step=1).wait_remote(timeout=60)
    slow = store.settings.model_copy(update={"upload_concurrency": 1})
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.storage_engine.remote.upload_worker",
            str(path),
            slow.model_dump_json(exclude={"secret_key"}),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "SPINDLE_S3_SECRET_KEY": slow.secret_key.get_secret_value(),
        },
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("LOCAL "), line
        second = line.split()[1]
        known = keys(store, BATCHES)
        # Some new files are up, not all.
        wait_until(lambda: len(keys(store, BATCHES)) >= len(known) + 3, 60, "the upload", 0.01)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    # What makes a checkpoint visible is the remote manifest: the kill may come after the
    # second's own documents went up (a fast upload outruns the poll), never after the
    # manifest names it.
    assert [c.uuid for c in read_remote_manifest(store)[1].checkpoints] == [first]
    with open_remote(tmp_path / "b", store, from_remote=True) as b:
        assert b.restored is not None and b.restored.uuid == first
        assert state(b) == model((0, 10_000))
    # The first machine comes back: it uploads what it still owes at open.
    with open_remote(path, store) as again:
        assert again.remote is not None and again.remote.wait_idle(timeout=120)
        assert [c.uuid for c in read_remote_manifest(store)[1].checkpoints] == [first, second]
    with open_remote(tmp_path / "c", store, from_remote=True) as c:
        assert c.restored is not None and c.restored.uuid == second
        assert state(c) == model((0, 10_000), (10_000, 810_000))
