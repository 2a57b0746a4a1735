"""Simulated power loss at every durable operation of a scripted workload.

The workload (inserts into two spines, background merges and spills, commits, gc, delete,
close and reopen) runs on a `PowerLossFileLayer` that cuts the power at its N-th mutating
call. The tree is then rewritten to what the disk would hold (`crash()`), and the location is
reopened with the normal `PosixFileLayer`. For every N the engine must be crash-consistent:

- opening succeeds (never ManifestMissingError or CorruptionError);
- the latest checkpoint is the last one whose `commit()` returned before the crash, or the
  one being committed (if its manifest rename had become durable), with exactly that state;
- every retained checkpoint restores to its reference state;
- startup cleanup leaves no `*.mut`, unreferenced batch file or stray checkpoint directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from storage_engine import EngineSettings, FileLayer, StorageLocation
from tests.conftest import trials
from tests.storage_engine.crash_worker import (
    FINGERPRINT,
    Model,
    apply_step,
    check_location,
    small_settings,
)
from tests.storage_engine.powerloss import PowerLossFileLayer, SimulatedCrash

SEED = 4242
LAST_STEP = 30
COMMITS = {3, 5, 8, 11, 14, 17, 19, 22, 25, 28, 30}
GC_AFTER = {8, 14, 19, 25, 30}  # gc_checkpoint() once after these commits
DELETE_AFTER = {22}  # delete the second-newest checkpoint
REOPEN_AT = {10, 21}  # close and reopen after these steps (uncommitted steps are redone)

MODES = {
    # merges stream to files; wait_idle after each step keeps the operation order fixed
    "steady": (small_settings(memory_budget_bytes=64 << 20), True, trials(170, 17)),
    # a tiny memory budget adds spills from both threads (operation order may vary)
    "spilling": (small_settings(memory_budget_bytes=32 << 10), False, trials(60, 8)),
}

_models: dict[int, Model] = {}


def model() -> Model:
    return _models.setdefault(SEED, Model(SEED))


@dataclass
class Events:
    committed: list[int] = field(default_factory=list)  # steps whose commit() returned
    committing: int | None = None  # step of a commit in flight


def workload(path: str, fs: FileLayer, settings: EngineSettings, settle: bool, ev: Events) -> None:
    def open_loc() -> StorageLocation:
        return StorageLocation.open(path, fingerprint=FINGERPRINT, settings=settings, fs=fs)

    loc = open_loc()
    reopened: set[int] = set()
    try:
        step = loc.step + 1
        while step <= LAST_STEP:
            apply_step(loc, SEED, step)
            if settle:
                loc.wait_idle()
            if step in COMMITS:
                ev.committing = step
                loc.commit(step=step)
                ev.committed.append(step)
                ev.committing = None
                if step in GC_AFTER:
                    loc.gc_checkpoint()
                cps = loc.list_checkpoints()
                if step in DELETE_AFTER and len(cps) > 1:
                    loc.delete_checkpoint(cps[-2].uuid)
            if step in REOPEN_AT and step not in reopened:
                reopened.add(step)
                loc.close()
                loc = open_loc()
                step = loc.step
            step += 1
        loc.wait_idle()
    finally:
        loc.close()


def run_until_crash(
    root: Path, n: int | None, settings: EngineSettings, settle: bool
) -> tuple[PowerLossFileLayer, Events]:
    root.mkdir()
    layer = PowerLossFileLayer(str(root), crash_after=n)
    ev = Events()
    try:
        workload(str(root / "loc"), layer, settings, settle, ev)
    except Exception as e:
        if not layer.crashed or not _caused_by_crash(e):
            raise
    return layer, ev


def _caused_by_crash(e: BaseException | None) -> bool:
    while e is not None:
        if isinstance(e, SimulatedCrash):
            return True
        e = e.__cause__ or e.__context__
    return False


def verify_after_crash(
    root: Path, layer: PowerLossFileLayer, ev: Events, settings: EngineSettings, variant: str
) -> int:
    layer.crash(variant, np.random.default_rng(len(layer.log)))
    allowed = {ev.committed[-1] if ev.committed else 0}
    if ev.committing is not None:
        allowed.add(ev.committing)
    where = f"crash at operation #{layer.crash_after} ({variant}); last ops: {layer.log[-4:]}"
    loc = root / "loc"
    if not loc.exists():
        assert not ev.committed, f"{where}: the location vanished after a commit returned"
        return 0
    try:
        latest, _ = check_location(str(loc), model(), settings=settings, allowed_latest=allowed)
    except Exception as e:
        raise AssertionError(f"{where}: {type(e).__name__}: {e}") from e
    return latest


def _count_ops(tmp_path: Path, settings: EngineSettings, settle: bool) -> int:
    layer, ev = run_until_crash(tmp_path / "count", None, settings, settle)
    assert ev.committed == sorted(COMMITS)
    assert not layer.crashed
    # No crash at all: after a power cut the final commit must be there, exactly.
    assert verify_after_crash(tmp_path / "count", layer, ev, settings, "empty") == LAST_STEP
    return layer.ops


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(MODES))
def test_power_loss_at_every_operation_is_crash_consistent(tmp_path: Path, mode: str) -> None:
    settings, settle, n_trials = MODES[mode]
    total = _count_ops(tmp_path, settings, settle)
    assert total > 500, f"workload too small to be interesting: {total} operations"
    points = sorted({int(x) for x in np.linspace(1, total + 1, n_trials).round()})
    restored = []
    for i, n in enumerate(points):
        root = tmp_path / f"n{n}"
        layer, ev = run_until_crash(root, n, settings, settle)
        restored.append(verify_after_crash(root, layer, ev, settings, ("empty", "prefix")[i % 2]))
    # Crashes landed everywhere: before the first commit and after later ones.
    assert 0 in restored and max(restored) >= max(COMMITS - {LAST_STEP}), restored


def test_crash_layer_models_unsynced_names_and_data(tmp_path: Path) -> None:
    """The fault layer itself: what survives a power cut."""
    (tmp_path / "old").write_bytes(b"old durable")
    layer = PowerLossFileLayer(str(tmp_path))
    d = str(tmp_path)
    f = layer.create(os.path.join(d, "a.mut"))
    f.write(b"hello")
    f.sync()
    f.write(b" world")  # never synced
    f.close()
    layer.rename(os.path.join(d, "a.mut"), os.path.join(d, "a"))
    layer.sync_dir(d)  # "a" -> the file, with "hello" durable
    g = layer.create(os.path.join(d, "b.mut"))
    g.write(b"new")
    g.sync()
    g.close()
    layer.rename(os.path.join(d, "b.mut"), os.path.join(d, "old"))  # not dir-synced
    layer.mkdir(os.path.join(d, "sub"))  # not synced in the parent
    layer.remove(os.path.join(d, "a"))  # not dir-synced: comes back
    image = layer.crash("empty")
    assert image == {"a": b"hello", "old": b"old durable"}
    assert sorted(os.listdir(d)) == ["a", "old"]
    assert (tmp_path / "old").read_bytes() == b"old durable"
    with pytest.raises(SimulatedCrash):
        layer.create(os.path.join(d, "c"))


def test_crash_after_nth_operation(tmp_path: Path) -> None:
    layer = PowerLossFileLayer(str(tmp_path), crash_after=3)
    f = layer.create(str(tmp_path / "x"))  # 1
    f.write(b"abc")  # 2
    with pytest.raises(SimulatedCrash):
        f.sync()  # 3: does not happen
    f.close()
    with pytest.raises(SimulatedCrash):
        layer.mkdir(str(tmp_path / "d"))
    assert layer.crash("prefix", np.random.default_rng(1)) == {}  # "x" was never dir-synced
