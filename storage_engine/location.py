"""A storage location: one directory holding a circuit's batch files and checkpoints.

Layout (seed 002):

    LOCK                        flock'ed by the owning process (holds its pid)
    checkpoints.manifest        checksummed JSON: every checkpoint, oldest first
    <32 hex>.batch              immutable batch files, shared between checkpoints
    <uuid>/checkpoint.json      step, fingerprint, user metadata (source offsets, sinks...)
    <uuid>/spine-<op id>.json   one per spine: its batch files in order, lower bound, sizes
    *.mut                       files being written; removed at startup

Invariants:
- the atomic replace of `checkpoints.manifest` is the commit point of `commit`, `gc` and
  `delete`; everything a manifest entry references is durable before that replace;
- gc and delete make the new manifest durable before deleting any file, delete only names
  the engine itself creates, and never a file a remaining checkpoint or a live spine uses;
- startup removes `*.mut`, checkpoint directories missing from the manifest, and batch
  files no checkpoint references; without a manifest but with checkpoint directories it
  refuses to open (ManifestMissingError) rather than guess.

`StorageLocation` is this module (opening, the lock, restore, spines, batch file writes, the
commit requests) with two concerns mixed in from their own modules: writing the requested
checkpoints on the commit thread (`location_commit.CheckpointWriter`) and deleting
checkpoints and files (`location_gc.Collector`). The read-only view of a location, for the
API and the offline tools, is `location_view.py`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
import tenacity

from .batch import Batch
from .cache import BufferCache
from .commit import CommitHandle, CommitThread
from .errors import (
    CheckpointNotFoundError,
    CorruptionError,
    FingerprintMismatchError,
    LockedError,
    ManifestMissingError,
    SchemaMismatchError,
    StorageError,
)
from .file_format import BatchFile, BatchFileWriter, WriteOptions
from .fileio import FileLayer, PosixFileLayer
from .location_commit import CheckpointWriter, _CommitJob, decode_bound
from .location_gc import Collector
from .manifest import (
    CHECKPOINT_META,
    CHECKPOINT_RE,
    LOCK,
    MANIFEST,
    OP_ID_RE,
    CheckpointInfo,
    Manifest,
    read_doc,
    spine_file,
    write_doc,
)
from .merging import Merger
from .objstore import ObjectStoreLike
from .remote import RemoteTier
from .remote_pull import PULL_SKIPPED, pull, pulled_skipped
from .schema import ZSetSchema
from .settings import EngineSettings
from .spine import Spine
from .spine_store import MemoryBudget

T = TypeVar("T")


@dataclass(frozen=True)
class SpineMeta:
    op_id: str
    schema_fingerprint: str
    batches: list[str]
    lower_bound: list[Any] | None
    sizes: list[int] | None  # of each batch file (absent in checkpoints of older versions)
    rows: int
    bytes: int


class StorageLocation(CheckpointWriter, Collector):
    """Owns a storage directory: spines, commit, gc, delete, restore. Use `open()`."""

    def __init__(
        self,
        path: str,
        settings: EngineSettings,
        fs: FileLayer,
        clock: Callable[[], float],
        read_only: bool,
        budget: MemoryBudget | None = None,
    ) -> None:
        self.path = os.path.abspath(path)
        self.settings = settings
        self.fs = fs
        self.clock = clock
        self.read_only = read_only
        self.cache = BufferCache(settings.cache_budget_bytes)
        self.budget = MemoryBudget(settings.memory_budget_bytes) if budget is None else budget
        self._merger: Merger | None = None
        # Deferred fsyncs (`write_batch`); the executor starts its thread at the first one.
        self._syncer = ThreadPoolExecutor(1, thread_name_prefix="batch-file-sync")
        self._lock = threading.RLock()
        self._lock_fd: int | None = None
        self._spines: dict[str, Spine] = {}
        self._manifest = Manifest()
        self._refs: dict[str, set[str]] = {}
        self._unreadable: set[str] = set()
        self.restored: CheckpointInfo | None = None
        self.metadata: dict[str, Any] = {}
        self.step = 0
        self._parent: str | None = None
        self._fingerprint = ""
        self._restored_spines: dict[str, SpineMeta] = {}
        self.remote: RemoteTier | None = None
        self._committer: CommitThread[_CommitJob] | None = None
        self._pending: list[_CommitJob] = []  # requested, not yet durable or failed
        self._pending_lock = threading.Lock()  # taken after _lock, never before
        self.last_commit_error: str | None = None
        self._write_opts = WriteOptions(settings.block_rows, settings.compression, settings.bloom)

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str,
        *,
        fingerprint: str = "",
        checkpoint: str | None = "latest",
        allow_state_drop: bool = False,
        check_fingerprint: bool = True,
        settings: EngineSettings | None = None,
        fs: FileLayer | None = None,
        clock: Callable[[], float] = time.time,
        read_only: bool = False,
        remote: ObjectStoreLike | None = None,
        from_remote: bool = False,
        remote_fallback: bool = False,
        eager: bool = False,
        budget: MemoryBudget | None = None,
    ) -> StorageLocation:
        """Open (creating if needed) and restore `checkpoint`: "latest", "none"/None, a uuid
        or an identifier. `fingerprint` identifies the circuit's stateful part; restoring a
        checkpoint taken with another fingerprint fails unless `allow_state_drop`, which then
        starts from empty state, or unless not `check_fingerprint`: the caller then decides
        which of its state still fits (`start_empty`). `read_only` takes no lock, cleans
        nothing, and cannot commit.

        With `remote`, checkpoints are also uploaded to that object-store prefix, and this
        location becomes its only writer (fencing any other). `from_remote` first restores
        an absent or empty `path` from the prefix (see `remote_pull.pull`): lazily, fetching
        batch files on demand, or `eager`ly; `remote_fallback` falls back to the newest
        intact checkpoint if the requested one has a missing or corrupt object.
        `budget`: the memory budget of its in-memory batches, when it shares one with other
        locations (default: its own, of `settings.memory_budget_bytes`).
        """
        fs = fs or PosixFileLayer()
        skipped: set[str] = set()
        if from_remote:
            if remote is None:
                raise ValueError("from_remote=True needs remote=ObjectStore(...)")
            if not (fs.isdir(path) and MANIFEST in fs.listdir(path)):
                ref = "latest" if checkpoint in (None, "none", "latest") else checkpoint
                pulled = pull(remote, path, fs, ref, eager=eager, fallback=remote_fallback)
                checkpoint = pulled.checkpoint.uuid
                skipped = set(pulled.skipped)
        loc = cls(path, settings or EngineSettings(), fs, clock, read_only, budget)
        loc._fingerprint = fingerprint  # what its commits record
        try:
            if remote is not None:
                loc.remote = RemoteTier(
                    remote,
                    loc.path,
                    fs,
                    loc._needed_files,
                    lambda uid: loc._manifest.find(uid) is not None,
                    lambda: [c.uuid for c in loc._manifest.lineage(loc._manifest.head)],
                    cache_dir=tempfile.mkdtemp(prefix="spindle-cache-") if read_only else None,
                )
            loc._open(fingerprint if check_fingerprint else None, checkpoint, allow_state_drop)
            if loc.remote is not None and not read_only:
                loc.remote.claim(loc._manifest, drop=skipped | pulled_skipped(fs, loc.path))
                if fs.exists(loc._p(PULL_SKIPPED)):
                    fs.remove(loc._p(PULL_SKIPPED))
                loc.remote.start()
        except BaseException:
            loc.close()
            raise
        return loc

    def _open(
        self, fingerprint: str | None, checkpoint: str | None, allow_state_drop: bool
    ) -> None:
        """`fingerprint` None: restore whatever fingerprint the checkpoint has."""
        fs = self.fs
        if not fs.isdir(self.path):
            if self.read_only:
                raise StorageError(f"{self.path}: no such storage location")
            fs.mkdir(self.path)
            fs.sync_dir(os.path.dirname(self.path))
        if not self.read_only:
            self._take_lock()
        names = fs.listdir(self.path)
        if MANIFEST in names:
            mpath = self._p(MANIFEST)
            self._manifest = Manifest.from_json(read_doc(fs, mpath), mpath)
        elif any(CHECKPOINT_RE.match(n) for n in names):
            raise ManifestMissingError(
                f"{self.path}: checkpoint directories exist but {MANIFEST} is missing; "
                "refusing to guess which state is valid (restore the manifest or move the "
                "directory aside)"
            )
        for c in self._manifest.checkpoints:
            try:
                self._refs[c.uuid] = {
                    b for m in self._read_spine_metas(c.uuid).values() for b in m.batches
                }
            except CorruptionError:
                self._unreadable.add(c.uuid)
        if not self.read_only:
            self._cleanup(names)
            if MANIFEST not in names:
                # An (empty) manifest must exist before any checkpoint directory does, or a
                # crash in the first commit would leave directories without a manifest.
                write_doc(fs, self._p(MANIFEST), self._manifest.to_json())
        self._restore(fingerprint, checkpoint, allow_state_drop)

    def _take_lock(self) -> None:
        fd = os.open(self._p(LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise LockedError(
                f"storage location {self.path} is locked by another process (pid {holder})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def _restore(self, fingerprint: str | None, ref: str | None, allow_state_drop: bool) -> None:
        if ref in (None, "none"):
            self._move_head(None)
            return
        if ref == "latest":
            latest = self._manifest.latest()
            if latest is None:
                return
            info = latest
        else:
            found = self._manifest.find(ref)
            if found is None:
                raise CheckpointNotFoundError(f"{self.path}: no checkpoint {ref!r}")
            info = found
        if fingerprint is not None and info.fingerprint != fingerprint:
            if not allow_state_drop:
                raise FingerprintMismatchError(
                    f"checkpoint {info.uuid} was taken by a circuit with fingerprint "
                    f"{info.fingerprint!r}, not {fingerprint!r}: the stateful part of the "
                    "pipeline changed. Start from no checkpoint, or allow dropping state."
                )
            self._move_head(None)
            return
        meta = read_doc(self.fs, self._p(info.uuid, CHECKPOINT_META))
        self._restored_spines = self._read_spine_metas(info.uuid)
        self.restored = info
        self.metadata = dict(meta.get("metadata") or {})
        self.step = info.step
        self._parent = info.uuid
        self._move_head(info.uuid)

    def _move_head(self, uid: str | None) -> None:
        """Make `uid` the checkpoint "latest" restores, durably, before the caller rolls
        any sink back to it: a crash before this run's first commit must not resume a
        checkpoint from the timeline the sinks no longer reflect."""
        if self.read_only or self._manifest.head == uid:
            return
        manifest = Manifest(self._manifest.checkpoints, uid)
        write_doc(self.fs, self._p(MANIFEST), manifest.to_json())
        self._manifest = manifest

    def _read_spine_metas(self, uid: str) -> dict[str, SpineMeta]:
        meta = read_doc(self.fs, self._p(uid, CHECKPOINT_META))
        out = {}
        for op in meta.get("spines", []):
            d = read_doc(self.fs, self._p(uid, spine_file(op)))
            out[op] = SpineMeta(
                op_id=op,
                schema_fingerprint=d["schema_fingerprint"],
                batches=list(d["batches"]),
                lower_bound=d.get("lower_bound"),
                sizes=[int(x) for x in d["sizes"]] if "sizes" in d else None,
                rows=int(d.get("rows", 0)),
                bytes=int(d.get("bytes", 0)),
            )
        return out

    # -- spines --------------------------------------------------------------------------

    @property
    def merger(self) -> Merger:
        if self._merger is None:
            self._merger = Merger(self.settings.merge_threads)
        return self._merger

    def spine(self, op_id: str, schema: ZSetSchema) -> Spine:
        """The spine of operator `op_id`, restored from the opened checkpoint if it has one."""
        if not OP_ID_RE.match(op_id):
            raise ValueError(f"operator id {op_id!r} must match {OP_ID_RE.pattern}")
        existing = self._spines.get(op_id)
        if existing is not None:
            if existing.schema != schema:
                raise SchemaMismatchError(f"spine {op_id!r} already open with another schema")
            return existing
        files: list[BatchFile] = []
        lower: list[Any] | None = None
        meta = self._restored_spines.get(op_id)
        if meta is not None:
            if meta.schema_fingerprint != schema.fingerprint():
                raise SchemaMismatchError(
                    f"spine {op_id!r} in checkpoint {self.restored and self.restored.uuid} "
                    "has a different schema than the operator"
                )
            sizes: list[int | None] = [*meta.sizes] if meta.sizes else [None] * len(meta.batches)
            files = [
                self._open_batch(n, size, schema)
                for n, size in zip(meta.batches, sizes, strict=True)
            ]
            lower = decode_bound(schema, meta.lower_bound)
        sp = Spine(op_id, schema, self, files, lower)
        self._spines[op_id] = sp
        return sp

    @property
    def restored_spines(self) -> list[str]:
        """The ids of the spines the restored checkpoint holds."""
        return list(self._restored_spines)

    def start_empty(self, spine_ids: Iterable[str]) -> None:
        """These spines open empty, although the restored checkpoint has them (the state of
        an operator that no longer fits, dropped)."""
        for i in spine_ids:
            if i in self._spines:
                raise ValueError(f"spine {i!r} is already open")
            self._restored_spines.pop(i, None)

    def spines(self) -> list[Spine]:
        """The spines opened so far (for metrics and tools)."""
        return list(self._spines.values())

    # -- batch files ---------------------------------------------------------------------

    def _open_batch(self, name: str, size: int | None, schema: ZSetSchema) -> BatchFile:
        """A checkpointed batch file: local, or (after a lazy restore) in the object store."""
        p = self._p(name)
        if self.remote is not None and not self.fs.exists(p):
            return self.remote.batch_file(name, size, self.cache, schema)
        return BatchFile(self.fs, p, self.cache, schema)

    def _needed_files(self) -> set[str]:
        """Batch files a checkpoint, a live spine or a requested commit still uses."""
        with self._lock:
            out = set().union(*self._refs.values()) if self._refs else set()
            out |= self._pinned_files()
            for s in list(self._spines.values()):
                out |= s.live_files()
            return out

    def _retrying(self, fn: Callable[[], T]) -> T:
        """Run a durable write, retrying OSErrors with exponential backoff.

        Each attempt writes fresh files: a failed fsync is never retried on the same file.
        """
        retry = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.settings.write_attempts),
            wait=tenacity.wait_exponential(multiplier=self.settings.write_backoff_s, max=5.0),
            retry=tenacity.retry_if_exception_type(OSError),
            reraise=True,
        )
        return retry(fn)

    def _new_batch_path(self) -> str:
        return self._p(uuidlib.uuid4().hex + ".batch")

    def write_batch(self, batch: Batch, durable: bool = True) -> BatchFile:
        """Write a batch to a new file (its directory entry is synced at commit).

        `durable=False` (a spill): the file's fsync runs on the location's sync thread, off
        the caller's path; a commit waits for it (`BatchFile.durable()`) before naming the
        file, as Feldera commits a file only at checkpoint. Nothing else needs the bytes on
        disk: a file no manifest names is deleted at the next open.
        """
        self._check_writable()
        return self._retrying(lambda: self._write_batch_once(batch, durable))

    def _write_batch_once(self, batch: Batch, durable: bool = True) -> BatchFile:
        w = BatchFileWriter(self.fs, self._new_batch_path(), batch.schema, self._write_opts)
        w.write(batch.data)
        return self._finish(w, batch.schema, durable)

    def write_batch_stream(
        self, schema: ZSetSchema, chunks: Iterable[pa.RecordBatch], durable: bool = True
    ) -> BatchFile | None:
        """Stream sorted, consolidated chunks into one new file; None if they were empty.
        `durable` as for `write_batch`."""
        self._check_writable()
        w = BatchFileWriter(self.fs, self._new_batch_path(), schema, self._write_opts)
        try:
            for c in chunks:
                w.write(c)
        except BaseException:
            w.abort()
            raise
        if w.rows == 0 and not w.has_pending:
            w.abort()
            return None
        return self._finish(w, schema, durable)

    def _finish(self, w: BatchFileWriter, schema: ZSetSchema, durable: bool) -> BatchFile:
        if durable:
            w.finish(sync_dir=False)
            return BatchFile(self.fs, w.path, self.cache, schema)
        w.finish(sync_dir=False, sync=False)
        pending = self._syncer.submit(w.sync_and_close)
        return BatchFile(self.fs, w.path, self.cache, schema, pending_sync=pending)

    # -- checkpoints ---------------------------------------------------------------------

    def list_checkpoints(self) -> list[CheckpointInfo]:
        return list(self._manifest.checkpoints)

    @property
    def head(self) -> str | None:
        """The checkpoint a restore of "latest" takes (see `Manifest`)."""
        return self._manifest.head

    def checkpoint_metadata(self, uid: str) -> dict[str, Any]:
        """The caller's metadata stored with a checkpoint (source offsets, sink positions)."""
        if self._manifest.find(uid) is None:
            raise CheckpointNotFoundError(f"{self.path}: no checkpoint {uid!r}")
        return dict(read_doc(self.fs, self._p(uid, CHECKPOINT_META)).get("metadata") or {})

    def checkpoint_spines(self, uid: str) -> dict[str, SpineMeta]:
        if self._manifest.find(uid) is None:
            raise CheckpointNotFoundError(f"{self.path}: no checkpoint {uid!r}")
        return self._read_spine_metas(uid)

    def commit(
        self,
        identifier: str | None = None,
        step: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Take a checkpoint of every spine; returns its uuid once it is locally durable.

        Failing writes are retried with backoff; if they keep failing, CommitFailedError is
        raised and the manifest (so every earlier checkpoint) is unchanged.
        """
        return self.commit_async(identifier, step, metadata).wait_local()

    def commit_async(
        self,
        identifier: str | None = None,
        step: int | None = None,
        metadata: dict[str, Any] | None = None,
        keep_last: int | None = None,
    ) -> CommitHandle:
        """Request a checkpoint of the state as it is now; returns at once with a handle.

        The commit thread writes it while the caller goes on inserting; see `commit.py` for
        the ordering rules. Blocks only while `max_pending_commits` requests are queued.

        `keep_last`: once the checkpoint is locally durable (its handle says so first), the
        commit thread deletes the oldest checkpoints until this many remain, as
        `gc_checkpoint` would, with one manifest replace. Retention then never makes the
        caller wait: a `gc_checkpoint` on the caller's thread waits for a running commit
        (both replace the manifest). A failed deletion is logged and left to the next one.
        """
        if keep_last is not None and keep_last < 1:
            raise ValueError(f"keep_last must be at least 1, not {keep_last}")
        self._check_writable()
        step = self.step if step is None else step
        # Not the location lock: the commit thread holds that across the manifest's fsync.
        with self._pending_lock:
            job = _CommitJob(
                handle=CommitHandle(step, identifier, remote_expected=self.remote is not None),
                spines={op: (sp.snapshot(), sp.lower_bound) for op, sp in self._spines.items()},
                identifier=identifier,
                step=step,
                metadata=dict(metadata or {}),
                keep_last=keep_last,
            )
            self._pending.append(job)
        self.committer.submit(job.handle, job)
        return job.handle

    @property
    def committer(self) -> CommitThread[_CommitJob]:
        if self._committer is None:
            self._committer = CommitThread(self._run_commits, self.settings.max_pending_commits)
        return self._committer

    # -- housekeeping --------------------------------------------------------------------

    def wait_idle(self) -> None:
        for s in self._spines.values():
            s.wait_idle()

    def wait_commits(self) -> None:
        """Until every requested commit, and the retention it asked for, has run."""
        if self._committer is not None:
            self._committer.drain()

    def close(self) -> None:
        """Finish requested commits, stop merging, release memory and the lock.
        Uncommitted state is discarded."""
        if self._committer is not None:
            self._committer.close()
            self._committer = None
        if self.remote is not None:
            self.remote.close(self.settings.remote_close_timeout_s)
        for s in self._spines.values():
            with contextlib.suppress(StorageError):
                s.wait_idle()
        if self._merger is not None:
            self._merger.close()
            self._merger = None
        self._syncer.shutdown(wait=True)  # closes the files written unsynced
        for s in self._spines.values():
            s.release()
        self._spines.clear()
        self.cache.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> StorageLocation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def status(self) -> dict[str, Any]:
        """What the control plane shows: step, checkpoints, pending commits, the remote tier."""
        with self._lock:
            return {
                "path": self.path,
                "step": self.step,
                "checkpoints": len(self._manifest.checkpoints),
                "pending_commits": len(self._pending),
                "last_commit_error": self.last_commit_error,
                "remote": self.remote.status().to_json() if self.remote is not None else None,
            }

    def _check_writable(self) -> None:
        if self.read_only:
            raise StorageError(f"{self.path} is open read-only")

    def _p(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)
