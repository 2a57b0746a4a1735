"""Asynchronous commit: snapshot semantics, ordering, failures, files shared with merges."""

from __future__ import annotations

import abc
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from storage_engine import CommitFailedError, EngineSettings, PosixFileLayer, StorageLocation

from .faulty_fs import FaultyFileLayer
from .test_location import INT, open_loc, referenced, rows, state

# Small batches and tiers, so that merges run (and replace files) while commits are written.
SETTINGS = EngineSettings(
    block_rows=16, merge_base_rows=16, merge_fanout=2, memory_budget_bytes=64 << 10
)


class GatedSyncLayer(PosixFileLayer, abc.ABC):
    """While `gate` is set, every fsync first calls `hold()`: commits stay in flight."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    @abc.abstractmethod
    def hold(self) -> None:
        """What a gated fsync does before syncing (sleep, or wait to be released)."""

    def create(self, path: str) -> Any:
        f = super().create(path)
        layer = self
        inner_sync = f.sync

        def sync() -> None:
            if layer.gate.is_set():
                layer.hold()
            inner_sync()

        f.sync = sync  # type: ignore[method-assign]
        return f


class SlowSyncLayer(GatedSyncLayer):
    """fsync takes `delay` seconds while `gate` is set."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.syncs_while_gated = 0

    def hold(self) -> None:
        self.syncs_while_gated += 1
        time.sleep(self.delay)


class BlockingSyncLayer(GatedSyncLayer):
    """While `gate` is set, fsync blocks until `release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.blocked = threading.Event()  # a sync is waiting on `release`

    def hold(self) -> None:
        self.blocked.set()
        self.release.wait()


def model_after(steps: int) -> dict[Any, int]:
    """The state after inserting rows(0, 10*(i+1)) for i < steps: key k has weight
    (number of steps whose range covers k)."""
    out: dict[Any, int] = {}
    for i in range(steps):
        for k in range(0, 10 * (i + 1)):
            out[(k, k % 3)] = out.get((k, k % 3), 0) + 1
    return out


def test_commit_async_captures_the_state_at_request_time(tmp_path: Path) -> None:
    fs = SlowSyncLayer(delay=0.05)
    loc = open_loc(tmp_path, settings=SETTINGS, fs=fs)
    sp = loc.spine("op", INT)
    handles = []
    fs.gate.set()  # every fsync takes 50 ms from here on
    for step in range(1, 13):
        sp.insert(rows(0, 10 * step))
        if step % 4 == 0:
            h = loc.commit_async(identifier=f"s{step}", step=step)
            assert h.state == "pending"  # returned before anything was durable
            handles.append(h)
    uids = [h.wait_local(timeout=60) for h in handles]
    fs.gate.clear()
    assert fs.syncs_while_gated > 0
    assert [h.state for h in handles] == ["local_durable"] * 3
    assert all(h.local_ms is not None and h.local_ms > 0 for h in handles)
    assert h.remote_ms is None
    # Ordering: the manifest lists them in request order, each the parent of the next.
    infos = loc.list_checkpoints()
    assert [c.uuid for c in infos] == uids
    assert [c.parent for c in infos] == [None, uids[0], uids[1]]
    loc.close()
    for step, uid in zip((4, 8, 12), uids, strict=True):
        with open_loc(tmp_path, settings=SETTINGS, checkpoint=uid) as back:
            assert back.step == step
            assert state(back) == model_after(step)


def test_inserts_and_merges_during_a_commit_keep_its_files(tmp_path: Path) -> None:
    """Merges replace (and would delete) files a pending commit still has to reference."""
    fs = SlowSyncLayer(delay=0.02)
    loc = open_loc(tmp_path, settings=SETTINGS, fs=fs)
    sp = loc.spine("op", INT)
    for step in range(1, 6):
        sp.insert(rows(0, 10 * step))
    loc.commit(step=5)  # every batch is file-backed now
    fs.gate.set()
    h = loc.commit_async(step=5, identifier="during-merges")
    for step in range(6, 20):
        sp.insert(rows(0, 10 * step))
    fs.gate.clear()
    uid = h.wait_local(timeout=60)
    loc.wait_idle()
    assert state(loc) == model_after(19)
    names = {n for n in (tmp_path).iterdir() if n.suffix == ".batch"}
    loc.close()
    with open_loc(tmp_path, settings=SETTINGS, checkpoint=uid) as back:
        assert state(back) == model_after(5)
    # No file was leaked: everything on disk was a checkpoint's or a live spine's.
    assert {n for n in tmp_path.iterdir() if n.suffix == ".batch"} <= names


def test_a_failing_commit_is_reported_and_leaves_earlier_checkpoints(tmp_path: Path) -> None:
    fs = FaultyFileLayer()
    # No merges or spills here: only the commit meets the failing fsyncs.
    settings = EngineSettings(block_rows=16, write_attempts=2, write_backoff_s=0.0)
    loc = open_loc(tmp_path, settings=settings, fs=fs)
    sp = loc.spine("op", INT)
    sp.insert(rows(0, 10))
    first = loc.commit(step=1)
    sp.insert(rows(0, 20))
    fs.fail("sync", times=10**9)
    h = loc.commit_async(step=2)
    with pytest.raises(CommitFailedError, match="step 2"):
        h.wait_local(timeout=60)
    assert h.state == "failed" and h.uuid is None
    assert loc.last_commit_error is not None and "step 2" in loc.last_commit_error
    assert [c.uuid for c in loc.list_checkpoints()] == [first]
    fs.clear()
    # The engine goes on: the next commit works, with the last good one as its parent.
    second = loc.commit(step=2)
    assert loc.last_commit_error is None
    assert loc.list_checkpoints()[-1].parent == first
    loc.close()
    assert fs.violations() == []
    with open_loc(tmp_path, settings=settings, checkpoint=first) as back:
        assert state(back) == model_after(1)
    with open_loc(tmp_path, settings=settings, checkpoint=second) as back:
        assert state(back) == model_after(2)


def test_close_finishes_requested_commits(tmp_path: Path) -> None:
    fs = SlowSyncLayer(delay=0.05)
    loc = open_loc(tmp_path, settings=SETTINGS, fs=fs)
    loc.spine("op", INT).insert(rows(0, 50))
    fs.gate.set()
    h = loc.commit_async(step=1)
    loc.close()
    assert h.state == "local_durable"
    with StorageLocation.open(str(tmp_path), fingerprint="fp", settings=SETTINGS) as back:
        assert back.restored is not None and back.restored.uuid == h.uuid


def test_backpressure_bounds_queued_commits(tmp_path: Path) -> None:
    fs = SlowSyncLayer(delay=0.05)
    settings = SETTINGS.model_copy(update={"max_pending_commits": 1})
    loc = open_loc(tmp_path, settings=settings, fs=fs)
    sp = loc.spine("op", INT)
    fs.gate.set()
    handles = []
    for step in range(1, 5):
        sp.insert(rows(0, 10 * step))
        handles.append(loc.commit_async(step=step))
    # With one queue slot: a group being written (the request taken plus at most the one
    # queued behind it, drained together) and at most one more queued.
    assert sum(h.state == "pending" for h in handles) <= 3
    fs.gate.clear()
    for h in handles:
        h.wait_local(timeout=60)
    assert [c.step for c in loc.list_checkpoints()] == [1, 2, 3, 4]
    loc.close()


def test_merges_of_committed_batches_cost_commits_no_write(tmp_path: Path) -> None:
    """A merge whose inputs are all in files keeps its output in memory and checkpoints it as
    those files: the next commit writes only new batches, never the merge output."""
    wide = EngineSettings(block_rows=16, merge_base_rows=16, merge_fanout=8)
    with open_loc(tmp_path, settings=wide) as loc:
        sp = loc.spine("op", INT)
        for i in range(4):  # four tier-1 batches, not merged at fanout 8
            sp.insert(rows(100 * i, 100 * i + 20))
        first = loc.commit(step=1)
    narrow = EngineSettings(block_rows=16, merge_base_rows=16, merge_fanout=4)
    loc = open_loc(tmp_path, settings=narrow)
    sp = loc.spine("op", INT)
    sp.insert(rows(1000, 1005))  # tier 0: schedules the merge of the four restored files
    sp.wait_idle()
    merged = [e for e in sp.snapshot() if e.sources]
    assert len(merged) == 1 and len(merged[0].sources or ()) == 4 and merged[0].file is None
    before = {p.name for p in tmp_path.iterdir() if p.suffix == ".batch"}
    second = loc.commit(step=2)
    written = {p.name for p in tmp_path.iterdir() if p.suffix == ".batch"} - before
    assert len(written) == 1  # the tier-0 batch only
    expected = {(k, k % 3): 1 for i in range(4) for k in range(100 * i, 100 * i + 20)}
    expected.update({(k, k % 3): 1 for k in range(1000, 1005)})
    # The merge output gets a file of its own when it is spilled; its sources stay on disk
    # while the second checkpoint references them, and go once nothing does.
    loc.gc_checkpoint()
    assert [c.uuid for c in loc.list_checkpoints()] == [second]
    loc.close()
    with open_loc(tmp_path, settings=narrow, checkpoint=second) as back:
        assert state(back) == expected
    assert first not in {p.name for p in tmp_path.iterdir()}


def test_keep_last_deletes_the_oldest_checkpoints_once_the_new_one_is_durable(
    tmp_path: Path,
) -> None:
    loc = open_loc(tmp_path, settings=SETTINGS)
    sp = loc.spine("op", INT)
    handles = []
    for step in range(1, 7):
        sp.insert(rows(0, 10 * step))
        handles.append(loc.commit_async(step=step, keep_last=2))
    loc.wait_commits()
    assert all(h.state == "local_durable" for h in handles)
    assert [c.step for c in loc.list_checkpoints()] == [5, 6]
    # Every batch file left is one a checkpoint or the live state uses.
    on_disk = {p.name for p in tmp_path.iterdir() if p.suffix == ".batch"}
    assert on_disk <= referenced(loc) | set().union(sp.live_files())
    loc.close()
    for c in (5, 6):
        uid = handles[c - 1].uuid
        with open_loc(tmp_path, settings=SETTINGS, checkpoint=uid) as back:
            assert state(back) == model_after(c)
    with pytest.raises(ValueError, match="keep_last"):
        open_loc(tmp_path / "other", settings=SETTINGS).commit_async(keep_last=0)


def test_retention_never_makes_the_caller_wait_for_a_running_commit(tmp_path: Path) -> None:
    """gc_checkpoint on the caller's thread waits for a commit in flight (both replace the
    manifest); keep_last leaves the deletion to the commit thread, so a request returns
    while the previous commit is still stuck in an fsync."""
    fs = BlockingSyncLayer()
    loc = open_loc(tmp_path, settings=SETTINGS, fs=fs)
    sp = loc.spine("op", INT)
    for step in (1, 2):
        sp.insert(rows(0, 10 * step))
        loc.commit(step=step)
    fs.gate.set()
    sp.insert(rows(0, 30))
    stuck = loc.commit_async(step=3, keep_last=1)
    assert fs.blocked.wait(timeout=60)
    sp.insert(rows(0, 40))
    got: list[Any] = []
    # In a thread, so that a request that does wait fails the test instead of hanging it.
    t = threading.Thread(
        target=lambda: got.append(loc.commit_async(step=4, keep_last=1)), daemon=True
    )
    t.start()
    t.join(timeout=60)
    assert got, "commit_async waited for the commit in flight"
    later = got[0]
    assert stuck.state == "pending" and later.state == "pending"
    assert [c.step for c in loc.list_checkpoints()] == [1, 2]
    fs.gate.clear()
    fs.release.set()
    loc.wait_commits()
    assert [c.step for c in loc.list_checkpoints()] == [4]
    loc.close()
    with open_loc(tmp_path, settings=SETTINGS) as back:
        assert state(back) == model_after(4)
