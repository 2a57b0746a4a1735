"""Writing checkpoints: the commit thread's side of a `StorageLocation`.

A group of requested commits (`_CommitJob`, each with the spines' snapshot taken when it was
requested) is written as one: each snapshot's batch files made durable (`Spine.persist`),
its `<uuid>/` directory written and fsynced, the base directory fsynced once, then one
manifest replace, the commit point. A failed attempt discards its directories and is
retried with fresh uuids; if the manifest write itself failed, the previous manifest is put
back first. After the commit, retention (`keep_last`) deletes the oldest checkpoints.

`CheckpointWriter` is mixed into `StorageLocation`, whose state it shares (see location.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from .batch import Batch
from .commit import CommitHandle
from .errors import CommitFailedError, StorageError
from .file_format import BatchFile
from .fileio import FileLayer
from .location_gc import GcResult
from .manifest import CHECKPOINT_META, MANIFEST, CheckpointInfo, Manifest, spine_file, write_doc
from .remote import RemoteTier
from .schema import ZSetSchema
from .spine import Spine
from .spine_entry import Entry

log = logging.getLogger(__name__)

T = TypeVar("T")


class _ManifestInDoubt(OSError):
    """A manifest write failed and the previous manifest could not be put back."""


@dataclass
class _CommitJob:
    """A requested commit: the snapshot it must write, taken at request time."""

    handle: CommitHandle
    spines: dict[str, tuple[tuple[Entry, ...], tuple[Any, ...] | None]]
    identifier: str | None
    step: int
    metadata: dict[str, Any]
    keep_last: int | None = None


class CheckpointWriter:
    """Writes requested commits in groups (on the commit thread) and applies retention."""

    path: str
    fs: FileLayer
    clock: Callable[[], float]
    step: int
    metadata: dict[str, Any]
    remote: RemoteTier | None
    last_commit_error: str | None
    _lock: threading.RLock
    _pending_lock: threading.Lock
    _pending: list[_CommitJob]
    _spines: dict[str, Spine]
    _manifest: Manifest
    _refs: dict[str, set[str]]
    _parent: str | None
    _fingerprint: str

    if TYPE_CHECKING:  # StorageLocation's and `location_gc.Collector`'s

        def _p(self, *parts: str) -> str: ...
        def _retrying(self, fn: Callable[[], T]) -> T: ...
        def _write_batch_once(self, batch: Batch, durable: bool = True) -> BatchFile: ...
        def retire_files(self, names: Sequence[str]) -> None: ...
        def _delete(self, victims: list[str]) -> GcResult: ...
        def _discard_dir(self, uid: str) -> None: ...

    def _run_commits(self, jobs: list[_CommitJob]) -> None:
        """Write a group of requested commits; one manifest replace makes them durable."""
        started = time.perf_counter()

        def attempt() -> list[CheckpointInfo]:
            # Each attempt has fresh uuids: no manifest on disk ever names a directory that
            # a retry is rebuilding.
            uids = [str(uuidlib.uuid4()) for _ in jobs]
            try:
                return self._write_checkpoints(list(zip(uids, jobs, strict=True)), started)
            except _ManifestInDoubt:
                raise  # the on-disk manifest may name them: keep their directories
            except OSError:
                for uid in uids:
                    with contextlib.suppress(OSError):
                        self._discard_dir(uid)
                raise

        try:
            try:
                infos = self._retrying(attempt)
            except OSError as e:
                steps = ", ".join(str(j.step) for j in jobs)
                raise CommitFailedError(f"commit of step {steps} failed: {e}") from e
        except BaseException as e:
            self.last_commit_error = f"{type(e).__name__}: {e}"
            for job in jobs:
                job.handle._fail(e)
            return
        finally:
            with self._lock:
                with self._pending_lock:
                    for job in jobs:
                        self._pending.remove(job)
                for job in jobs:
                    self._release_retired(job)
        self.last_commit_error = None
        for job, info in zip(jobs, infos, strict=True):
            job.handle._set_local(info.uuid)
            if self.remote is not None:
                self.remote.upload(info, job.handle)
        keep = jobs[-1].keep_last  # the newest request's policy
        if keep is not None:
            self._retain(keep)

    def _retain(self, keep_last: int) -> None:
        """Delete the oldest checkpoints until `keep_last` remain (on the commit thread)."""
        try:
            with self._lock:
                victims = [c.uuid for c in self._manifest.checkpoints[:-keep_last]]
                if victims:
                    self._delete(victims)
        except (OSError, StorageError) as e:
            log.warning("%s: deleting old checkpoints failed, left for later: %s", self.path, e)

    def _write_checkpoints(
        self, group: list[tuple[str, _CommitJob]], started: float
    ) -> list[CheckpointInfo]:
        fs = self.fs
        written = [(uid, job, self._write_checkpoint_dir(uid, job)) for uid, job in group]
        # One sync of the base directory makes every new batch file's and checkpoint
        # directory's name durable.
        fs.sync_dir(self.path)
        with self._lock:
            infos: list[CheckpointInfo] = []
            parent = self._parent
            old = set().union(*self._refs.values()) if self._refs else set()
            now = self.clock()
            for uid, job, (files, total, rows) in written:
                infos.append(
                    CheckpointInfo(
                        uuid=uid,
                        step=job.step,
                        fingerprint=self._fingerprint,
                        created_at=now,
                        identifier=job.identifier,
                        parent=parent,
                        duration_ms=(time.perf_counter() - started) * 1000,
                        total_bytes=total,
                        new_bytes=sum(f.size for f in files.values() if f.name not in old),
                        rows=rows,
                        files=len(files),
                    )
                )
                old |= set(files)
                parent = uid
            manifest = self._manifest.appended(infos)
            try:
                write_doc(fs, self._p(MANIFEST), manifest.to_json())  # commit point
            except OSError as e:
                # The rename may have happened before the failure: put the previous manifest
                # back durably so that a reported failure really leaves it unchanged.
                try:
                    write_doc(fs, self._p(MANIFEST), self._manifest.to_json())
                except OSError:
                    raise _ManifestInDoubt(str(e)) from e
                raise
            self._manifest = manifest
            for uid, job, (files, _, _) in written:
                self._refs[uid] = set(files)
                self.step = job.step
                self.metadata = dict(job.metadata)
            self._parent = parent
        return infos

    def _write_checkpoint_dir(
        self, uid: str, job: _CommitJob
    ) -> tuple[dict[str, BatchFile], int, int]:
        """The snapshot's batch files and `<uid>/`, durable; ({name: file}, bytes, rows)."""
        fs = self.fs
        spine_docs: dict[str, dict[str, Any]] = {}
        all_files: dict[str, BatchFile] = {}
        for op, (entries, lower) in job.spines.items():
            sp = self._spines[op]
            files = sp.persist(self._write_batch_once, entries)  # the whole commit is retried
            spine_docs[op] = {
                "op_id": op,
                "schema_fingerprint": sp.schema.fingerprint(),
                "batches": [f.name for f in files],
                "sizes": [f.size for f in files],
                "lower_bound": encode_bound(sp.schema, lower),
                "rows": sum(f.rows for f in files),
                "bytes": sum(f.size for f in files),
            }
            all_files.update((f.name, f) for f in files)
        # The checkpoint directory is unreferenced until the manifest names it, so its files
        # need no atomic rename: fsync each, then the directory once.
        ckdir = self._p(uid)
        if fs.exists(ckdir):
            fs.rmtree(ckdir)  # left over from a failed attempt
        fs.mkdir(ckdir)
        for op, doc in spine_docs.items():
            write_doc(fs, os.path.join(ckdir, spine_file(op)), doc, atomic=False)
        write_doc(
            fs,
            os.path.join(ckdir, CHECKPOINT_META),
            {
                "uuid": uid,
                "step": job.step,
                "identifier": job.identifier,
                "metadata": job.metadata,
                "spines": sorted(spine_docs),
            },
            atomic=False,
        )
        fs.sync_dir(ckdir)
        total = sum(f.size for f in all_files.values())
        rows = sum(f.rows for f in all_files.values())
        return all_files, total, rows

    def _pinned_files(self) -> set[str]:
        """Files of snapshots that requested commits still have to write."""
        with self._pending_lock:
            return {
                f.name
                for job in self._pending
                for entries, _ in job.spines.values()
                for e in entries
                for f in e.all_files()
            }

    def _release_retired(self, job: _CommitJob) -> None:
        """After a commit: delete files of its snapshot that merges replaced meanwhile and
        that nothing needs any more (caller holds _lock)."""
        names = [
            f.name
            for entries, _ in job.spines.values()
            for e in entries
            if e.retired
            for f in e.all_files()
        ]
        self.retire_files(names)


def _int_type(t: pa.DataType) -> pa.DataType:
    """The signed integer type a temporal type casts to losslessly (date32 -> int32)."""
    return pa.int32() if t.bit_width == 32 else pa.int64()


def encode_bound(schema: ZSetSchema, bound: Sequence[Any] | None) -> list[Any] | None:
    """JSON form of a key bound: temporal values as integers in their Arrow unit."""
    if bound is None:
        return None
    out = []
    for f, v in zip(schema.keys, bound, strict=False):
        if pa.types.is_temporal(f.type):
            out.append(pa.array([v], f.type).cast(_int_type(f.type))[0].as_py())
        else:
            out.append(v)
    return out


def decode_bound(schema: ZSetSchema, raw: list[Any] | None) -> list[Any] | None:
    if raw is None:
        return None
    out = []
    for f, v in zip(schema.keys, raw, strict=False):
        if pa.types.is_temporal(f.type):
            out.append(pa.array([v], _int_type(f.type)).cast(f.type)[0].as_py())
        else:
            out.append(v)
    return out
