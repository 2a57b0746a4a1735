"""Write failures (EIO) during commit, gc, delete and background merges.

- A single transient failure at ANY durable operation of a commit is retried with backoff
  and the commit succeeds, with exactly the committed state after reopening.
- Persistent failures make commit raise CommitFailedError; the manifest is unchanged, earlier
  checkpoints restore intact, and commits work again once the fault clears.
- A failed fsync is never retried on the same file object: the file is closed and its
  `.mut` removed, and the retry writes a new file.
- gc / delete whose manifest write fails delete nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from storage_engine import (
    CommitFailedError,
    EngineSettings,
    StorageError,
    StorageLocation,
)
from tests.conftest import trials
from tests.storage_engine.crash_worker import (
    FINGERPRINT,
    Model,
    apply_step,
    check_location,
    dense_state,
    same_state,
    small_settings,
    storage_names,
)
from tests.storage_engine.faulty_fs import FaultyFileLayer

SEED = 777
SETTINGS = small_settings(memory_budget_bytes=64 << 20, write_attempts=4, write_backoff_s=0.001)
MANIFEST = "checkpoints.manifest"
MODEL = Model(SEED)
FOREVER = 10**9


def prepare(
    path: Path, fs: FaultyFileLayer, settings: EngineSettings = SETTINGS
) -> StorageLocation:
    """Checkpoints at steps 2 and 4, uncommitted steps 5 and 6, merges settled."""
    loc = StorageLocation.open(str(path), fingerprint=FINGERPRINT, settings=settings, fs=fs)
    for s in range(1, 7):
        apply_step(loc, SEED, s)
        loc.wait_idle()
        if s in (2, 4):
            loc.commit(step=s)
    return loc


def tree(path: Path) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for n in storage_names(str(path)):
        if n == "LOCK":
            continue
        out[n] = None if n.endswith("/") else (path / n).read_bytes()
    return out


def assert_checkpoints_intact(path: Path, steps: list[int]) -> None:
    with StorageLocation.open(
        str(path), fingerprint=FINGERPRINT, settings=SETTINGS, read_only=True
    ) as ro:
        cps = ro.list_checkpoints()
    assert [c.step for c in cps] == steps
    for c in cps:
        with StorageLocation.open(
            str(path),
            fingerprint=FINGERPRINT,
            checkpoint=c.uuid,
            settings=SETTINGS,
            read_only=True,
        ) as ro:
            assert same_state(dense_state(ro), MODEL.view(c.step)), f"checkpoint {c.step}"


def commit_ops(tmp_path: Path) -> list[tuple[str, str]]:
    """The (op, path) sequence of one fault-free commit of `prepare`'s state."""
    fs = FaultyFileLayer()
    loc = prepare(tmp_path / "count", fs)
    start = len(fs.trace)
    loc.commit(step=6)
    ops = fs.trace[start:]
    loc.close()
    return ops


def test_any_single_transient_failure_during_commit_is_retried(tmp_path: Path) -> None:
    ops = commit_ops(tmp_path)
    kinds = {op for op, _ in ops}
    assert {"create", "write", "sync", "rename", "mkdir", "sync_dir"} <= kinds, kinds
    cases = []
    for i, (op, _) in enumerate(ops):
        nth = sum(1 for o, _ in ops[: i + 1] if o == op)
        cases.append((op, nth))
    n = trials(len(cases), 30)
    picks = sorted({int(x) for x in np.linspace(0, len(cases) - 1, n).round()})
    for j in picks:
        op, nth = cases[j]
        path = tmp_path / f"c{j}"
        fs = FaultyFileLayer()
        loc = prepare(path, fs)
        fs.fail(op, nth=nth)
        where = f"EIO on {op} #{nth} of the commit ({ops[j][1]})"
        try:
            loc.commit(step=6)
        except Exception as e:
            raise AssertionError(f"{where}: commit was not retried: {e!r}") from e
        finally:
            loc.close()
        assert fs.injected, f"{where}: the fault never fired"
        assert not fs.violations(), f"{where}: {fs.violations()}"
        try:
            check_location(str(path), MODEL, settings=SETTINGS, allowed_latest={6})
        except AssertionError as e:
            raise AssertionError(f"{where}: {e}") from e


def _checkpoint_doc(path: str) -> bool:
    name = os.path.basename(path).removesuffix(".mut")
    return name == "checkpoint.json" or (name.startswith("spine-") and name.endswith(".json"))


def _manifest_rename_then(fs: FaultyFileLayer) -> Callable[[str], bool]:
    """Matches the directory sync right after checkpoints.manifest was renamed into place."""

    def when(_path: str) -> bool:
        prev = fs.trace[-2] if len(fs.trace) > 1 else ("", "")
        return prev[0] == "rename" and prev[1].endswith(os.sep + MANIFEST)

    return when


PERSISTENT: dict[str, Callable[[FaultyFileLayer], tuple[str, Callable[[str], bool] | None]]] = {
    "every-write": lambda fs: ("write", None),
    "every-sync": lambda fs: ("sync", None),
    "every-create": lambda fs: ("create", None),
    "checkpoint-dir-mkdir": lambda fs: ("mkdir", None),
    "checkpoint-doc-sync": lambda fs: ("sync", _checkpoint_doc),
    "manifest-write": lambda fs: ("write", lambda p: p.endswith(MANIFEST + ".mut")),
    "manifest-sync": lambda fs: ("sync", lambda p: p.endswith(MANIFEST + ".mut")),
    "manifest-rename": lambda fs: ("rename", lambda p: p.endswith(os.sep + MANIFEST)),
    "dir-sync-after-manifest-rename": lambda fs: ("sync_dir", _manifest_rename_then(fs)),
}


@pytest.mark.parametrize("fault", sorted(PERSISTENT))
def test_persistent_failure_fails_commit_and_keeps_earlier_checkpoints(
    tmp_path: Path, fault: str
) -> None:
    path = tmp_path / "loc"
    fs = FaultyFileLayer()
    loc = prepare(path, fs)
    try:
        before = (path / MANIFEST).read_bytes()
        listed = loc.list_checkpoints()
        op, when = PERSISTENT[fault](fs)
        fs.fail(op, times=FOREVER, when=when)
        with pytest.raises(CommitFailedError):
            loc.commit(step=6)
        assert fs.injected, "the fault never fired"
        assert (path / MANIFEST).read_bytes() == before, "a failed commit changed the manifest"
        assert loc.list_checkpoints() == listed
        assert not fs.violations(), fs.violations()
        assert_checkpoints_intact(path, [2, 4])
        fs.clear()
        loc.commit(step=6)  # works again once the fault clears
        assert [c.step for c in loc.list_checkpoints()] == [2, 4, 6]
    finally:
        loc.close()
    check_location(str(path), MODEL, settings=SETTINGS, allowed_latest={6})


def test_failed_fsync_is_never_retried_on_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "loc"
    fs = FaultyFileLayer()
    loc = prepare(path, fs)
    try:
        first = len(fs.files)
        fs.fail("sync", nth=1, times=2)  # the first two fsyncs of the commit (batch files)
        fs.fail("sync", when=lambda p: p.endswith(MANIFEST + ".mut"))  # and the manifest's
        loc.commit(step=6)
    finally:
        loc.close()
    assert len(fs.injected) == 3, fs.injected
    assert not fs.violations(), fs.violations()
    records = fs.files[first:]
    failed = [i for i, r in enumerate(records) if r.sync_failed]
    assert len(failed) == 3
    for i in failed:
        r = records[i]
        assert r.syncs == 1 and r.closed and not os.path.exists(r.current), r
        # the retry wrote a new file object that synced fine
        assert any(s.syncs and not s.sync_failed for s in records[i + 1 :]), r
    manifest_files = [r for r in records if r.path.endswith(MANIFEST + ".mut")]
    # the failed write, the durable restore of the previous manifest, the retry's write
    assert len(manifest_files) == 3 and len({id(r) for r in manifest_files}) == 3
    check_location(str(path), MODEL, settings=SETTINGS, allowed_latest={6})


GC_FAULTS = {
    "manifest-create": ("create", lambda p: p.endswith(MANIFEST + ".mut")),
    "manifest-write": ("write", lambda p: p.endswith(MANIFEST + ".mut")),
    "manifest-sync": ("sync", lambda p: p.endswith(MANIFEST + ".mut")),
    "manifest-rename": ("rename", lambda p: p.endswith(os.sep + MANIFEST)),
}


@pytest.mark.parametrize("action", ["gc", "delete"])
@pytest.mark.parametrize("fault", sorted(GC_FAULTS))
def test_gc_with_failing_manifest_write_deletes_nothing(
    tmp_path: Path, fault: str, action: str
) -> None:
    path = tmp_path / "loc"
    fs = FaultyFileLayer()
    loc = prepare(path, fs)
    try:
        loc.commit(step=6)
        for s in (7, 8):
            apply_step(loc, SEED, s)
            loc.wait_idle()
        loc.commit(step=8)
        assert [c.step for c in loc.list_checkpoints()] == [2, 4, 6, 8]
        before = tree(path)
        listed = loc.list_checkpoints()
        op, when = GC_FAULTS[fault]
        fs.fail(op, times=FOREVER, when=when)

        def run() -> None:
            if action == "gc":
                loc.gc_checkpoint()
            else:
                loc.delete_checkpoint(listed[1].uuid)

        with pytest.raises((OSError, StorageError)):
            run()
        assert fs.injected
        after = tree(path)
        lost = sorted(set(before) - set(after))
        assert not lost, f"{action} deleted {lost} although its manifest write failed"
        changed = sorted(n for n in before if not n.endswith(".mut") and before[n] != after[n])
        assert not changed, changed
        assert loc.list_checkpoints() == listed
        assert not fs.violations(), fs.violations()
        assert_checkpoints_intact(path, [2, 4, 6, 8])
        fs.clear()
        res = loc.gc_checkpoint() if action == "gc" else loc.delete_checkpoint(listed[1].uuid)
        assert len(res.deleted) == 1
        want = [2, 4, 6, 8]
        want.remove(2 if action == "gc" else 4)
        assert [c.step for c in loc.list_checkpoints()] == want
    finally:
        loc.close()
    check_location(str(path), MODEL, settings=SETTINGS, allowed_latest={8})


def test_write_failures_in_background_merges_and_spills_lose_nothing_committed(
    tmp_path: Path,
) -> None:
    """Persistent EIO while merges and spills write files: the error surfaces on a later
    insert; the files being written are removed, and reopening restores the last commit."""
    path = tmp_path / "loc"
    fs = FaultyFileLayer()
    settings = small_settings(memory_budget_bytes=32 << 10, write_attempts=2)
    loc = prepare(path, fs, settings)
    try:
        loc.commit(step=6)
        fs.fail("write", times=FOREVER, when=lambda p: p.endswith(".batch.mut"))
        with pytest.raises((StorageError, OSError)):
            for s in range(7, 60):
                apply_step(loc, SEED, s)
            loc.wait_idle()
        assert fs.injected
        assert_checkpoints_intact(path, [2, 4, 6])
    finally:
        fs.clear()
        loc.close()
    assert not fs.violations(), fs.violations()
    check_location(str(path), MODEL, settings=settings, allowed_latest={6})


def test_failed_deferred_fsync_of_merge_outputs_and_spills_is_rewritten_at_commit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Merge outputs and spills are fsynced in the background, after their rename. When
    that fsync fails, the next commit writes the rows to a new file instead of naming the
    file or syncing it again, and the failed file is removed."""
    path = tmp_path / "loc"
    fs = FaultyFileLayer()
    settings = small_settings(memory_budget_bytes=32 << 10)
    loc = prepare(path, fs, settings)
    try:
        loc.commit(step=6)
        # Only deferred syncs see the final name: a commit's own files sync as `.mut`.
        fs.fail("sync", times=FOREVER, when=lambda p: p.endswith(".batch"))
        for s in range(7, 20):
            apply_step(loc, SEED, s)
        loc.wait_idle()
        fs.clear()
        loc.commit(step=19)
    finally:
        loc.close()
    assert fs.injected, "no merge or spill wrote a file"
    assert any("writing its rows to a new file" in r.getMessage() for r in caplog.records)
    assert not fs.violations(), fs.violations()
    check_location(str(path), MODEL, settings=settings, allowed_latest={19})
