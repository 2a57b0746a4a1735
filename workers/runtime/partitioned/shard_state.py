"""Operator-shards' state (issue 50): each (stateful operator, shard) is a storage location
of its own, `<root>/shards/<operator id>/<shard>`, with the pipeline's object store (when
there is one) under `shards/<operator id>/<shard>/` as its durable tier.

A shard step starts from exactly the checkpoint its coordinator names (its base), never
from whatever the directory holds last: a task that Spark re-runs (a lost executor, a
zombie attempt) redoes the same step from the same base and gives the same rows, and a
step is never applied twice to one state. Opening an older checkpoint than the newest
keeps the newer ones (the location moves its head; a commit then branches off the base),
until the coordinator says which ones no manifest needs (`collect`).

The local directory is a cache of the store: when it lacks the base (the shard last ran
elsewhere) or the store holds checkpoints it does not know (it would refuse to write
there), it is dropped and the base pulled lazily from the store.

A step waits for its operator-shard's lock (`LOCK_WAIT_S`): a task that Spark re-runs after
it gave an executor up can find the shard still locked by the attempt it replaces, on the
same machine (or a volume the machines share), until that executor's Spark worker has
killed it (SIGTERM, then SIGKILL 10 s later); failing at once would spend Spark's few
attempts of the task (`spark.task.maxFailures`, 4) within seconds and fail the step.

Open locations are kept per process (`_Open`), with the checkpoint their state is at: the
next step on the same process from that checkpoint skips the open. Nothing depends on it
for correctness: any other base reopens from disk or the store.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence, Set
from dataclasses import dataclass

import tenacity

from storage_engine import EngineSettings, MemoryBudget, StorageLocation
from storage_engine.circuit.circuit import FINGERPRINTS_KEY, STATE_KEY
from storage_engine.circuit.operator import Operator
from storage_engine.errors import CheckpointNotFoundError, LockedError, StorageError
from storage_engine.fileio import FileLayer, PosixFileLayer
from storage_engine.manifest import MANIFEST, Manifest, read_doc
from storage_engine.objstore import ObjectStoreLike
from storage_engine.remote import DivergedError, read_remote_manifest
from storage_engine.remote_pull import pull

from .prefixed_store import PrefixedStore

LOCK_WAIT_S = 60.0  # how long a step waits for its operator-shard's lock


@dataclass
class _Open:
    loc: StorageLocation
    op: Operator
    checkpoint: str | None  # the state's checkpoint; None with `dirty`: being stepped
    dirty: bool = False


class ShardStates:
    """The operator-shards of one root that this process opens."""

    def __init__(
        self,
        root: str,
        store: ObjectStoreLike | None = None,
        settings: EngineSettings | None = None,
        fs: FileLayer | None = None,
    ) -> None:
        self.root = os.path.abspath(root)
        self.store = store
        self.settings = settings or EngineSettings()
        self.fs = fs or PosixFileLayer()
        self._open: dict[tuple[str, int], _Open] = {}
        # Per shard: the memory budget its operators' locations share (the spec's
        # `engine.memory_budget` is a shard's).
        self._budgets: dict[int, MemoryBudget] = {}
        self.opened = 0  # locations opened (not found open): for tests and metrics
        self.lock_wait_s = LOCK_WAIT_S

    def path(self, op_id: str, shard: int) -> str:
        return os.path.join(self.root, "shards", op_id, str(shard))

    def memory(self, shard: int) -> int:
        """Bytes of the shard's state batches in memory in this process."""
        budget = self._budgets.get(shard)
        return 0 if budget is None else budget.used

    def _budget(self, shard: int) -> MemoryBudget:
        budget = self._budgets.get(shard)
        if budget is None:
            budget = self._budgets[shard] = MemoryBudget(self.settings.memory_budget_bytes)
        return budget

    def _store(self, op_id: str, shard: int) -> ObjectStoreLike | None:
        if self.store is None:
            return None
        return PrefixedStore(self.store, f"shards/{op_id}/{shard}")

    def acquire(self, op: Operator, fingerprint: str, shard: int, base: str | None) -> None:
        """Bind `op` to its shard's state at checkpoint `base` (None: empty state), for a
        step that `commit` or `discard` ends."""
        key = (op.id, shard)
        held = self._open.get(key)
        if held is not None and held.op is op and not held.dirty and held.checkpoint == base:
            held.dirty = True
            return
        self.discard(op.id, shard)
        opening = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(LockedError),
            stop=tenacity.stop_after_delay(self.lock_wait_s),
            wait=tenacity.wait_fixed(0.1),
            reraise=True,
        )
        loc = opening(self.open_location, op.id, shard, fingerprint, base)
        try:
            saved = loc.metadata.get(STATE_KEY, {}) if loc.restored is not None else {}
            op.open(loc, saved.get(op.id, {}))
        except BaseException:
            loc.close()
            raise
        self.opened += 1
        self._open[key] = _Open(loc, op, None, dirty=True)

    def commit(self, ops: Sequence[tuple[Operator, str]], shard: int, step: int) -> list[str]:
        """Checkpoint the shard's state of these (operator, fingerprint)s after `step`,
        each durable locally (and in the store, when there is one) before this returns
        their uuids. The operator-shards' commits run at once, each on its location's
        commit thread."""
        handles = []
        for op, fingerprint in ops:
            held = self._open[(op.id, shard)]
            meta = {
                STATE_KEY: {op.id: op.checkpoint_state()},
                FINGERPRINTS_KEY: {op.id: fingerprint},
            }
            handles.append(held.loc.commit_async(step=step, metadata=meta))
        uids = []
        for (op, _), handle in zip(ops, handles, strict=True):
            uid = handle.wait_local() if self.store is None else handle.wait_remote()
            held = self._open[(op.id, shard)]
            held.checkpoint, held.dirty = uid, False
            uids.append(uid)
        return uids

    def location(self, op_id: str, shard: int) -> StorageLocation:
        """The open location of an operator-shard (acquired, or committed and still open)."""
        return self._open[(op_id, shard)].loc

    def discard(self, op_id: str, shard: int) -> None:
        """Close the shard's location (its uncommitted state is dropped)."""
        held = self._open.pop((op_id, shard), None)
        if held is not None:
            with contextlib.suppress(StorageError):
                held.loc.close()

    def close(self) -> None:
        for op_id, shard in list(self._open):
            self.discard(op_id, shard)

    def collect(
        self, op_id: str, shard: int, keep: Set[str], below_step: int | None = None
    ) -> list[str]:
        """Delete the operator-shard's checkpoints that are not in `keep`, only those of
        steps before `below_step` if given; returns those deleted. Opens the shard if this
        process does not hold it at a kept checkpoint (nothing if another process holds
        it: it is collected another time)."""
        held = self._open.get((op_id, shard))
        if held is not None:
            if held.dirty:
                return []
            if held.checkpoint in keep:
                return _delete_unnamed(held.loc, keep, below_step)
            self.discard(op_id, shard)  # state nobody names any more: to be collected
        try:
            loc = self._open_any(op_id, shard)
        except LockedError:
            return []
        if loc is None:
            return []
        try:
            return _delete_unnamed(loc, keep, below_step)
        finally:
            loc.close()

    def _open_any(self, op_id: str, shard: int) -> StorageLocation | None:
        """The operator-shard's location at no checkpoint, to delete some (None: it has
        none anywhere)."""
        path, store = self.path(op_id, shard), self._store(op_id, shard)
        if store is None:
            if not self._has_manifest(path):
                return None
            return self._open_local(path, shard, "", None, None)
        if not self._has_manifest(path):
            _, remote = read_remote_manifest(store)
            if not remote.checkpoints:
                return None
        return self.open_location(op_id, shard, "", None)

    def open_location(
        self, op_id: str, shard: int, fingerprint: str, base: str | None
    ) -> StorageLocation:
        """The operator-shard's location at checkpoint `base` (None: empty state), its
        local copy made current first; the caller closes it."""
        path, store = self.path(op_id, shard), self._store(op_id, shard)
        if store is None:
            return self._open_local(path, shard, fingerprint, base, None)
        try:
            if not self._has_manifest(path):
                self._pull(store, path, base)
            else:
                self._forget_unstored(path, shard, store)
            return self._open_local(path, shard, fingerprint, base, store)
        except (CheckpointNotFoundError, DivergedError):
            # The local copy is stale (the shard ran elsewhere since): it is only a cache.
            self.fs.rmtree(path)
            self._pull(store, path, base)
            return self._open_local(path, shard, fingerprint, base, store)

    def _forget_unstored(self, path: str, shard: int, store: ObjectStoreLike) -> None:
        """Delete the local copy's checkpoints that the store does not hold: with a store,
        a shard checkpoint counts once it is there, so these are a failed task's or were
        collected meanwhile; opening with the store would upload them again."""
        _, remote = read_remote_manifest(store)
        stored = {c.uuid for c in remote.checkpoints}
        local = Manifest.from_json(read_doc(self.fs, os.path.join(path, MANIFEST)), path)
        extra = [c.uuid for c in local.checkpoints if c.uuid not in stored]
        if extra:
            loc = self._open_local(path, shard, "", None, None)
            try:
                loc.delete_checkpoints(extra)
            finally:
                loc.close()

    def _open_local(
        self,
        path: str,
        shard: int,
        fingerprint: str,
        base: str | None,
        store: ObjectStoreLike | None,
    ) -> StorageLocation:
        return StorageLocation.open(
            path,
            fingerprint=fingerprint,
            checkpoint=base if base is not None else "none",
            settings=self.settings,
            fs=self.fs,
            remote=store,
            budget=self._budget(shard),
        )

    def _has_manifest(self, path: str) -> bool:
        return self.fs.isdir(path) and MANIFEST in self.fs.listdir(path)

    def _pull(self, store: ObjectStoreLike, path: str, base: str | None) -> None:
        """Make `path` a lazy copy of the store's checkpoints (nothing if it has none and
        the base is empty state: a new shard)."""
        if base is None:
            _, remote = read_remote_manifest(store)
            if not remote.checkpoints:
                return
            base = remote.checkpoints[-1].uuid  # any: the caller opens no checkpoint
        pull(store, path, self.fs, base)


def _delete_unnamed(loc: StorageLocation, keep: Set[str], below_step: int | None) -> list[str]:
    victims = [
        c.uuid
        for c in loc.list_checkpoints()
        if c.uuid not in keep and (below_step is None or c.step < below_step)
    ]
    if victims:
        loc.delete_checkpoints(victims)
    return victims


__all__ = ["ShardStates"]
