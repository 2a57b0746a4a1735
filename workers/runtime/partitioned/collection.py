"""Which operator-shard checkpoints are garbage (issue 50): those no kept manifest names.

A shard step commits a checkpoint of every operator-shard it changes, one per step, but a
manifest (the commit point of the driver's checkpoint) names only some of them. The rest
are collected in two ways:
- each shard task deletes, after its commit, its operator-shards' checkpoints of earlier
  steps that no kept manifest names (`ShardHost.step`'s request carries what to keep);
- `sweep` opens operator-shards no task touched (after the driver's checkpoints were
  deleted, and when a run opens, for what a crashed run left) and deletes the same.
Checkpoints of the step being taken are never collected: Spark may run a task twice, and
the driver keeps whichever attempt's result reached it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from storage_engine.errors import StorageError
from storage_engine.objstore import ObjectStoreLike

from .shard_state import ShardStates

log = logging.getLogger(__name__)

Named = dict[tuple[str, int], set[str]]


def named(manifests: Iterable[Mapping[str, Any]]) -> Named:
    """Every (operator id, shard)'s checkpoints that these manifests name."""
    out: Named = {}
    for m in manifests:
        for op, uids in m["operators"].items():
            for s, uid in enumerate(uids):
                out.setdefault((op, s), set())
                if uid is not None:
                    out[(op, s)].add(uid)
    return out


def sweep(
    states: ShardStates,
    keep: Named,
    pairs: Iterable[tuple[str, int]],
    below_step: int | None = None,
) -> int:
    """Delete the checkpoints of these operator-shards that `keep` does not name (only
    those of steps before `below_step`, if given); returns how many. A shard that fails
    (its store unreachable, say) is logged and left for the next sweep."""
    deleted = 0
    for op, s in sorted(set(pairs)):
        try:
            deleted += len(states.collect(op, s, keep.get((op, s), set()), below_step))
        except (OSError, StorageError) as e:
            log.warning("collecting shard %s/%d failed, left for later: %s", op, s, e)
    return deleted


def collect_stopped(
    root: str,
    store: ObjectStoreLike | None,
    left: Iterable[Mapping[str, Any]],
    gone: Iterable[Mapping[str, Any]] = (),
) -> int:
    """After a stopped pipeline's driver checkpoints were deleted: collect every
    operator-shard checkpoint that the manifests `left` (the remaining checkpoints') do
    not name, in the shards they or `gone` (the deleted ones') name or that have a
    directory under `root`; returns how many."""
    states = ShardStates(root, store)
    try:
        keep = named(left)
        pairs = set(keep) | set(named(gone)) | set(local_pairs(states))
        return sweep(states, keep, pairs)
    finally:
        states.close()


def local_pairs(states: ShardStates) -> list[tuple[str, int]]:
    """The operator-shards with a directory under the states' root."""
    fs = states.fs
    base = f"{states.root}/shards"
    if not fs.isdir(base):
        return []
    return [
        (op, int(s))
        for op in fs.listdir(base)
        if fs.isdir(f"{base}/{op}")
        for s in fs.listdir(f"{base}/{op}")
        if s.isdigit()
    ]


__all__ = ["Named", "collect_stopped", "local_pairs", "named", "sweep"]
