"""Rescaling a stopped pipeline's partitioned state (issue 50): the state a manifest names
at P shards, split anew into P' shards, by key group.

Every state row of an operator belongs to the key group of its partition columns (the
columns its input rows were routed by, `Partitioning.state_keys`, which each spine holds
under the same names; `Operator.spine_input` says which input a spine's rows came from).
Shard s of P owns the groups `[s*K//P, (s+1)*K//P)` and K stays, so each old shard's rows
go whole groups at a time to the new shards owning them. An operator without a key keeps
all its state on the shard owning the empty key's group, with its small checkpoint state
(a window aggregate's watermark); a keyed operator's small state must be the same on every
shard (it is empty for every SQL operator), or the rescale refuses.

Per operator, every old operator-shard is read once (at its manifest checkpoint, from
local disk or lazily from the store) and its rows written to one spill file per new shard
and spine; then each new operator-shard is written from its files, as a new checkpoint at
the manifest's step (in the location of the same number, beside its old checkpoints, which
the old manifest still names), durable in the store when there is one. The driver does the
work while the pipeline is stopped: memory stays within a chunk of rows per spine, but all
of the state passes through this one process. The new manifest is the coordinator's state
until the run's next checkpoint names it; the old one stays restorable.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from spindle_sql.dataflow import Dataflow
from spindle_sql.partitioning import Partitioning
from spindle_sql.shard_level import empty_key_shard
from storage_engine.batch import Batch
from storage_engine.circuit.circuit import FINGERPRINTS_KEY, STATE_KEY
from storage_engine.circuit.operator import Operator
from storage_engine.key_groups import key_groups, shard_of_groups

from .shard_state import ShardStates


class RescaleError(ValueError):
    """State that cannot be split anew (an operator whose small state differs by shard)."""


def rescale(
    manifest: Mapping[str, Any],
    factory: Callable[[], Dataflow],
    shards: int,
    states: ShardStates,
) -> dict[str, Any]:
    """The manifest of `manifest`'s state split into `shards` shards (written by `states`)."""
    groups = int(manifest["key_groups"])
    flow = factory()
    part = Partitioning(flow)
    fps = flow.circuit.operator_fingerprints
    # One object per operator, bound to each old and new location in turn (as a shard
    # host rebinds its operators step after step).
    ops = {op.id: op for op in flow.operators}
    step = int(manifest["step"])
    operators: dict[str, list[str | None]] = {}
    owner = empty_key_shard(shards, groups)
    os.makedirs(states.root, exist_ok=True)  # a stateless pipeline's shards made none
    with tempfile.TemporaryDirectory(prefix="spindle-rescale-", dir=states.root) as tmp:
        for op_id, bases in manifest["operators"].items():
            keys = part.state_keys(op_id)
            split = _Split(os.path.join(tmp, op_id), shards)
            op = ops[op_id]
            saved = _read(op, bases, fps[op_id], states, keys, split, groups)
            keyless = not any(keys)
            operators[op_id] = [
                _write(
                    op,
                    s,
                    fps[op_id],
                    states,
                    split,
                    saved if (not keyless or s == owner) else {},
                    step,
                )
                for s in range(shards)
            ]
    return {**manifest, "shards": shards, "operators": operators}


class _Split:
    """One Arrow spill file per (new shard, spine) of one operator."""

    def __init__(self, root: str, shards: int) -> None:
        os.makedirs(root)
        self.root, self.shards = root, shards
        self._writers: dict[tuple[int, str], pa.ipc.RecordBatchStreamWriter] = {}

    def path(self, shard: int, spine: str) -> str:
        return os.path.join(self.root, f"{shard}.{spine}.arrow")

    def add(self, shard: int, spine: str, rows: pa.RecordBatch) -> None:
        w = self._writers.get((shard, spine))
        if w is None:
            w = self._writers[(shard, spine)] = pa.ipc.new_stream(
                self.path(shard, spine), rows.schema
            )
        w.write_batch(rows)

    def close(self) -> None:
        for w in self._writers.values():
            w.close()
        self._writers.clear()

    def spines(self, shard: int) -> list[str]:
        prefix = f"{shard}."
        names = sorted(os.listdir(self.root))
        return [n[len(prefix) : -len(".arrow")] for n in names if n.startswith(prefix)]


def _read(
    op: Operator,
    bases: list[str | None],
    fingerprint: str,
    states: ShardStates,
    keys: list[tuple[str, ...]],
    split: _Split,
    groups: int,
) -> dict[str, Any]:
    """Every old operator-shard's rows into `split`; returns the operator's small state."""
    small: list[dict[str, Any]] = []
    for s, base in enumerate(bases):
        if base is None:
            continue  # never stepped: empty
        loc = states.open_location(op.id, s, fingerprint, base)
        try:
            saved = loc.metadata.get(STATE_KEY, {}).get(op.id, {})
            small.append(saved)
            op.open(loc, saved)
            for spine in loc.spines():
                columns = keys[op.spine_input(spine.op_id)]
                for chunk in spine.scan():
                    rows = chunk.data
                    to = shard_of_groups(key_groups(rows, columns, groups), split.shards, groups)
                    for t in np.unique(to):
                        mask = pa.array(to == t)
                        split.add(int(t), spine.op_id, rows.filter(mask))
        finally:
            loc.close()
    split.close()
    if any(x != small[0] for x in small[1:]):
        raise RescaleError(f"operator {op.id}: its shards' checkpoint states differ")
    return small[0] if small else {}


def _write(
    op: Operator,
    shard: int,
    fingerprint: str,
    states: ShardStates,
    split: _Split,
    saved: dict[str, Any],
    step: int,
) -> str | None:
    """New operator-shard `shard` from its spill files; its checkpoint (None: no state)."""
    names = split.spines(shard)
    if not names and not saved:
        return None
    loc = states.open_location(op.id, shard, fingerprint, None)
    try:
        op.open(loc, saved)
        spines = {sp.op_id: sp for sp in loc.spines()}
        for name in names:
            spine = spines[name]
            with pa.ipc.open_stream(split.path(shard, name)) as reader:
                for rows in reader:
                    spine.insert(Batch(spine.schema, rows))
        meta = {STATE_KEY: {op.id: op.checkpoint_state()}, FINGERPRINTS_KEY: {op.id: fingerprint}}
        handle = loc.commit_async(step=step, metadata=meta)
        return handle.wait_local() if loc.remote is None else handle.wait_remote()
    finally:
        loc.close()


__all__ = ["RescaleError", "rescale"]
