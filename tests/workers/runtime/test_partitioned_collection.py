"""Collecting operator-shard checkpoints (issue 50): a step's shard tasks delete their
earlier checkpoints that no kept manifest names, shards no task touched are swept when a
manifest stops naming them, and a sweep removes what a failed step left; every kept
manifest still resumes to the single-process run's deltas. With an object store, the store
is collected too, and a stale local copy never uploads collected checkpoints again."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from storage_engine import StorageLocation
from storage_engine.objstore import DirectoryObjectStore
from storage_engine.remote import read_remote_manifest
from workers.runtime.partitioned import PartitionedDataflow
from workers.runtime.partitioned.collection import collect_stopped, named
from workers.runtime.partitioned.prefixed_store import PrefixedStore

from .partitioned_check import FS, SETTINGS, outputs, plain_run
from .test_partitioned_nexmark import _query
from .test_partitioned_nexmark import stream as stream  # a fixture

Manifest = Mapping[str, Any]


def on_disk(part: PartitionedDataflow) -> dict[tuple[str, int], set[str]]:
    """Every operator-shard's checkpoints in its local directory."""
    out = {}
    for op in part.checkpoints:
        for s in range(part.shards):
            path = part.host.states.path(op, s)
            held = part.host.states._open.get((op, s))
            if held is not None:
                out[(op, s)] = {c.uuid for c in held.loc.list_checkpoints()}
            elif Path(path).is_dir():
                with StorageLocation.open(path, checkpoint="none", fs=FS) as loc:
                    out[(op, s)] = {c.uuid for c in loc.list_checkpoints()}
    return out


def in_store(
    store: DirectoryObjectStore, part: PartitionedDataflow
) -> dict[tuple[str, int], set[str]]:
    """Every operator-shard's checkpoints in the store, once the open ones' deletions
    (which their upload threads apply) are done."""
    for held in part.host.states._open.values():
        if held.loc.remote is not None:
            held.loc.remote.wait_idle()
    out = {}
    for op in part.checkpoints:
        for s in range(part.shards):
            _, m = read_remote_manifest(PrefixedStore(store, f"shards/{op}/{s}"))
            out[(op, s)] = {c.uuid for c in m.checkpoints}
    return out


def covered(found: dict[tuple[str, int], set[str]], manifests: Sequence[Manifest]) -> bool:
    want = named(manifests)
    return all(uids <= want.get(pair, set()) for pair, uids in found.items())


@pytest.mark.parametrize("with_store", [False, True])
def test_steps_keep_only_what_retained_manifests_name(
    stream: pa.Table,
    tmp_path: Path,
    with_store: bool,
) -> None:
    """A run's retention in miniature: a manifest every second step, the last two kept.
    After each step every shard holds only checkpoints that the kept manifests, the state's
    or the state before the step's name; each kept manifest resumes exactly."""
    make, steps = _query("q4", stream.slice(0, 8_000), 500)
    expected = plain_run(make, steps, tmp_path / "plain")
    store = DirectoryObjectStore(tmp_path / "store") if with_store else None
    kept: list[tuple[int, Manifest]] = []
    part = PartitionedDataflow(
        make,
        2,
        str(tmp_path / "p2"),
        settings=SETTINGS,
        fs=FS,
        store=store,
        retain=lambda: [m for _, m in kept],
    )
    before = part.checkpoint()
    for i, d in enumerate(steps, start=1):
        assert outputs(part.step(d)) == expected[i - 1][0], f"step {i}"
        # What the step kept: the manifests retained while it ran.
        allowed = [m for _, m in kept] + [part.checkpoint(), before]
        assert covered(on_disk(part), allowed), f"step {i}: unnamed checkpoints on disk"
        if store is not None:
            assert covered(in_store(store, part), allowed), f"step {i}: unnamed in the store"
        before = part.checkpoint()
        if i % 2 == 0:
            kept = [*kept, (i, part.checkpoint())][-2:]
    total = sum(len(u) for u in on_disk(part).values())
    assert total <= 4 * len(on_disk(part)), "checkpoints pile up"
    for i, manifest in kept:
        if i < len(steps):
            part.open(manifest)
            assert outputs(part.step(steps[i])) == expected[i][0], f"resumed after step {i}"
    part.close()


class FailingAfterTasks(PartitionedDataflow):
    """Its step's tasks commit, then the step fails before the coordinator records them,
    as a driver that dies mid-step leaves them."""

    fail = False

    def _collect_untouched(self, *a: Any) -> None:
        if self.fail:
            raise RuntimeError("the driver died")
        super()._collect_untouched(*a)


def test_a_sweep_removes_what_a_failed_step_left(stream: pa.Table, tmp_path: Path) -> None:
    make, steps = _query("q5", stream.slice(0, 6_000), 2_000)
    expected = plain_run(make, steps, tmp_path / "plain")
    part = FailingAfterTasks(make, 2, str(tmp_path / "p2"), settings=SETTINGS, fs=FS, retain=list)
    part.step(steps[0])
    manifest = part.checkpoint()
    part.fail = True
    with pytest.raises(RuntimeError):
        part.step(steps[1])
    part.fail = False
    part.open(manifest)
    assert not covered(on_disk(part), [manifest]), "the failed step left nothing: proves nothing"
    assert part.sweep() > 0
    assert covered(on_disk(part), [manifest])
    assert outputs(part.step(steps[1])) == expected[1][0]
    assert outputs(part.step(steps[2])) == expected[2][0]
    part.close()


def test_a_stopped_pipeline_is_collected_in_the_store(stream: pa.Table, tmp_path: Path) -> None:
    """`collect_stopped` (an offline gc's): with no local copy left, the store alone holds
    the shards; what the remaining manifests do not name goes from it, and the remaining
    manifest resumes. A stale local copy that still has collected checkpoints forgets them
    instead of uploading them again."""
    make, steps = _query("q5", stream.slice(0, 8_000), 2_000)
    expected = plain_run(make, steps, tmp_path / "plain")
    store = DirectoryObjectStore(tmp_path / "store")
    root = tmp_path / "p2"
    part = PartitionedDataflow(make, 2, str(root), settings=SETTINGS, fs=FS, store=store)
    manifests = []
    for d in steps[:3]:
        part.step(d)
        manifests.append(part.checkpoint())
    part.close()
    stale = tmp_path / "stale"
    shutil.copytree(root / "shards", stale)
    shutil.rmtree(root / "shards")
    assert not covered(in_store(store, part), manifests[1:])
    assert collect_stopped(str(root), store, manifests[1:], manifests[:1]) > 0
    assert covered(in_store(store, part), manifests[1:])
    # An executor whose cache predates the collection.
    shutil.rmtree(root / "shards", ignore_errors=True)
    shutil.copytree(stale, root / "shards")
    again = PartitionedDataflow(make, 2, str(root), settings=SETTINGS, fs=FS, store=store)
    again.open(manifests[2])
    assert outputs(again.step(steps[3])) == expected[3][0]
    assert covered(in_store(store, again), [*manifests[1:], again.checkpoint()])
    again.close()
