"""No durability failure is silent (`workers.runtime.durability`): failed commits and uploads, an
unreachable object store and fencing become events; commits failing in a row and fencing
end the run. Real storage locations and a real (directory) object store; a commit made to
fail by a file layer that refuses to write the manifest. (A stopped S3 server:
tests/storage_engine/remote/test_remote_tier.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from storage_engine import StorageLocation
from storage_engine.errors import CommitFailedError
from storage_engine.fileio import PosixFileLayer
from storage_engine.objstore import DirectoryObjectStore
from storage_engine.remote import FencedError
from tests.storage_engine.test_location import INT, rows
from workers.runtime.durability import DurabilityWatch


class _NoManifest(PosixFileLayer):
    """Writes of the manifest fail (as on a full disk) while `broken`."""

    broken = False

    def create(self, path: str) -> Any:
        if self.broken and "checkpoints.manifest" in path:
            raise OSError(28, "No space left on device")
        return super().create(path)


def _watch(loc: StorageLocation) -> tuple[DurabilityWatch, list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    return DurabilityWatch(events.append, lambda: loc.remote), events


def test_commits_failing_in_a_row_are_reported_then_end_the_run(tmp_path: Path) -> None:
    fs = _NoManifest()
    with StorageLocation.open(str(tmp_path), fingerprint="fp", fs=fs) as loc:
        watch, events = _watch(loc)
        sp = loc.spine("op", INT)
        fs.broken = True
        for step in (1, 2):
            sp.insert(rows(step * 10, step * 10 + 5))
            h = loc.commit_async(step=step)
            watch.track(h)
            with pytest.raises(CommitFailedError):
                h.wait_local(timeout=30)
            watch.check()  # reported, not yet fatal
        assert [e["event"] for e in events] == ["commit_failed", "commit_failed"]
        assert "step 2" in events[1]["message"] and "No space left" in events[1]["message"]
        fs.broken = False
        h = loc.commit_async(step=3)
        watch.track(h)
        h.wait_local(timeout=30)
        watch.check()
        assert events[-1]["event"] == "durable" and watch.commit_failures == 0
        fs.broken = True
        for step in (4, 5, 6):
            h = loc.commit_async(step=step)
            watch.track(h)
            with pytest.raises(CommitFailedError):
                h.wait_local(timeout=30)
        with pytest.raises(CommitFailedError, match="3 checkpoints failed in a row"):
            watch.check()


def test_fencing_stops_the_run_and_is_reported(tmp_path: Path) -> None:
    store = DirectoryObjectStore(tmp_path / "store")
    a = StorageLocation.open(str(tmp_path / "a"), fingerprint="fp", remote=store)
    try:
        watch, events = _watch(a)
        a.spine("op", INT).insert(rows(0, 10))
        h = a.commit_async(step=1)
        watch.track(h)
        h.wait_remote(timeout=30)
        watch.check()
        assert events == []
        # Another writer (a second machine restoring the pipeline) takes the prefix.
        StorageLocation.open(
            str(tmp_path / "b"), fingerprint="fp", remote=store, from_remote=True
        ).close()
        h = a.commit_async(step=2)
        watch.track(h)
        with pytest.raises(FencedError):
            h.wait_remote(timeout=30)
        with pytest.raises(FencedError, match="claimed by another writer"):
            watch.check()
        assert [e["event"] for e in events] == ["fenced"]
    finally:
        a.close()


def test_finished_uploads_are_timed_once(tmp_path: Path) -> None:
    """Each upload that `check` sees finish is handed out once, as the seconds from the
    checkpoint locally durable to the remote manifest naming it; a location without an
    object store uploads nothing."""
    store = DirectoryObjectStore(tmp_path / "store")
    with StorageLocation.open(str(tmp_path / "a"), fingerprint="fp", remote=store) as loc:
        watch, events = _watch(loc)
        handles = []
        for step in (1, 2):
            loc.spine("op", INT).insert(rows(step * 10, step * 10 + 5))
            handles.append(loc.commit_async(step=step))
            watch.track(handles[-1])
        for h in handles:
            h.wait_remote(timeout=30)
        watch.check()
        uploads = watch.take_uploads()
        assert len(uploads) == 2 and all(0 <= x < 30 for x in uploads)
        assert uploads == [pytest.approx(h.upload_ms / 1000) for h in handles if h.upload_ms]
        watch.check()
        assert watch.take_uploads() == [] and events == []
    with StorageLocation.open(str(tmp_path / "b"), fingerprint="fp") as loc:
        watch, _ = _watch(loc)
        h = loc.commit_async(step=1)
        watch.track(h)
        h.wait_remote(timeout=30)
        watch.check()
        assert h.upload_ms is None and watch.take_uploads() == []
