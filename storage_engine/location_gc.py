"""Deleting from a location: checkpoints (`gc_checkpoint`, `delete_checkpoints`, and the
retention a commit asks for), batch files merges replaced, and at open what a crash left.

A deletion replaces the manifest durably before it removes any file, removes only names the
engine creates, and never a file a remaining checkpoint, a live spine or a requested commit
still uses. While some checkpoint's metadata is unreadable no batch file is removed at all:
which files it needs is unknown.

`Collector` is mixed into `StorageLocation`, whose state it shares (see location.py).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from .errors import CheckpointNotFoundError
from .file_format import BatchFile
from .fileio import FileLayer
from .manifest import BATCH_RE, CHECKPOINT_RE, MANIFEST, Manifest, write_doc
from .remote import RemoteTier
from .spine import Spine

T = TypeVar("T")


@dataclass(frozen=True)
class GcResult:
    deleted: list[str]
    files_removed: int
    bytes_freed: int


class Collector:
    """Deletes checkpoints and the batch files nothing needs any more."""

    path: str
    fs: FileLayer
    read_only: bool
    remote: RemoteTier | None
    _lock: threading.RLock
    _spines: dict[str, Spine]
    _manifest: Manifest
    _refs: dict[str, set[str]]
    _unreadable: set[str]
    _parent: str | None

    if TYPE_CHECKING:  # StorageLocation's and `location_commit.CheckpointWriter`'s

        def _p(self, *parts: str) -> str: ...
        def _check_writable(self) -> None: ...
        def _retrying(self, fn: Callable[[], T]) -> T: ...
        def _pinned_files(self) -> set[str]: ...

    def _cleanup(self, names: list[str]) -> None:
        fs, removed = self.fs, False
        known = {c.uuid for c in self._manifest.checkpoints}
        referenced = set().union(*self._refs.values()) if self._refs else set()
        for n in names:
            p = self._p(n)
            if n.endswith(".mut") and (BATCH_RE.match(n[:-4]) or n[:-4] == MANIFEST):
                fs.remove(p)
                removed = True
            elif CHECKPOINT_RE.match(n) and fs.isdir(p) and n not in known:
                fs.rmtree(p)
                removed = True
            elif CHECKPOINT_RE.match(n) and fs.isdir(p):
                for m in fs.listdir(p):
                    if m.endswith(".mut"):
                        fs.remove(os.path.join(p, m))
            elif BATCH_RE.match(n) and n not in referenced and not self._unreadable:
                fs.remove(p)
                removed = True
        if removed:
            fs.sync_dir(self.path)

    def retire_files(self, names: Sequence[str]) -> None:
        """Files a merge replaced: delete now unless a checkpoint still references them."""
        if not names or self.read_only:
            return
        with self._lock:
            referenced = set().union(*self._refs.values()) if self._refs else set()
            keep = referenced | self._pinned_files()
            for n in names:
                if n not in keep and not self._unreadable:
                    self._remove_batch(n)

    def discard_file(self, f: BatchFile) -> None:
        """Delete a batch file just written that nothing references (a lost write race)."""
        f.evict()
        self._remove_batch(f.name)

    def _remove_batch(self, name: str) -> int:
        p = self._p(name)
        try:
            size = self.fs.size(p)
            self.fs.remove(p)
        except FileNotFoundError:
            return 0
        return size

    def gc_checkpoint(self, protect: Iterable[str] = ()) -> GcResult:
        """Delete the oldest checkpoint not in `protect`, never the newest one nor the head,
        and every batch file no remaining checkpoint or live spine uses."""
        keep = {*protect, self._manifest.head}
        cands = [c for c in self._manifest.checkpoints[:-1] if c.uuid not in keep]
        if not cands:
            return GcResult([], 0, 0)
        return self._delete([cands[0].uuid])

    def delete_checkpoint(self, uid: str) -> GcResult:
        return self.delete_checkpoints([uid])

    def delete_checkpoints(self, uids: Sequence[str]) -> GcResult:
        """Delete these checkpoints with one manifest write (the newest may go too: the
        live state does not depend on it)."""
        known = {c.uuid for c in self._manifest.checkpoints}
        for uid in uids:
            if uid not in known:
                raise CheckpointNotFoundError(f"{self.path}: no checkpoint {uid!r}")
        return self._delete(list(dict.fromkeys(uids))) if uids else GcResult([], 0, 0)

    def _delete(self, victims: list[str]) -> GcResult:
        self._check_writable()
        with self._lock:
            remaining = self._manifest.without(set(victims))
            self._retrying(lambda: write_doc(self.fs, self._p(MANIFEST), remaining.to_json()))
            self._manifest = remaining
            dropped: set[str] = set()
            for v in victims:
                dropped |= self._refs.pop(v, set())
                self._unreadable.discard(v)
                self._discard_dir(v)
            still = set().union(*self._refs.values()) if self._refs else set()
            live = set().union(*(s.live_files() for s in self._spines.values()))
            live |= self._pinned_files()
            freed = removed = 0
            if not self._unreadable:
                for n in sorted(dropped - still - live):
                    size = self._remove_batch(n)
                    freed += size
                    removed += 1 if size else 0
            self.fs.sync_dir(self.path)
            if self._parent in victims:
                self._parent = remaining.head
            if self.remote is not None:
                self.remote.delete(victims)
        return GcResult(list(victims), removed, freed)

    def _discard_dir(self, uid: str) -> None:
        p = self._p(uid)
        if self.fs.exists(p):
            self.fs.rmtree(p)
