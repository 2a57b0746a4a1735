"""The object-store tier: checkpoints uploaded after they are locally durable, remote gc,
fencing of a second writer. Restore ("pull") onto an empty machine is remote_pull.py.

Remote layout, under the store's prefix (seed 003: shared immutable files, checkpoints as
metadata):

    OWNER                                  {"owner", "epoch", ...}: the current writer
    manifests/<epoch:010>-<seq:012>.manifest   checksummed manifests; the greatest key wins
    batches/<32 hex>.batch                 immutable batch files, shared by checkpoints
    checkpoints/<uuid>/checkpoint.json     a checkpoint's metadata, as in the local layout
    checkpoints/<uuid>/spine-<op>.json
    input-log/<stream>/<segment>.arrow     the input log's segments (remote_log.py)
    offsets/step-<step>.json               a run's offset log (workers/runtime/offset_log.py)

Invariants:
- a checkpoint's batch files and metadata are uploaded before a manifest names it, so the
  remote commit point is the manifest PUT and a partial upload is never visible;
- a writer claims the prefix by writing OWNER with the next epoch and at once a manifest
  under that epoch; a manifest key starts with its writer's epoch, so a fenced writer's late
  manifest can never be the greatest key. A writer re-reads OWNER before each manifest and
  each deletion and stops with `FencedError` when another writer has claimed the prefix;
- remote gc writes the manifest without the victims first, then deletes only objects no
  remaining remote checkpoint, local checkpoint or live spine references.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import socket
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import tenacity

from .cache import BufferCache
from .commit import CommitHandle
from .errors import CorruptionError, StorageError
from .file_format import BatchFile
from .fileio import FileLayer
from .forks import SharedStore, removable
from .manifest import (
    CHECKPOINT_META,
    CheckpointInfo,
    Manifest,
    decode,
    encode,
    read_doc,
)
from .objstore import ObjectMissingError, ObjectStoreLike, RemoteUnavailableError
from .remote_cache import RemoteFileCache
from .remote_log import LogMirror

OWNER = "OWNER"
MANIFESTS = "manifests/"
BATCHES = "batches/"
CHECKPOINTS = "checkpoints/"
CACHE_DIR = ".remote-cache"


class FencedError(StorageError):
    """Another writer claimed the remote prefix: this one may no longer change it."""


class CheckpointGoneError(StorageError):
    """A checkpoint was deleted locally before it was uploaded: it never will be."""


class DivergedError(StorageError):
    """The remote prefix holds checkpoints this location does not know: opening it as the
    writer would discard them."""


def checkpoint_key(uid: str, name: str) -> str:
    return f"{CHECKPOINTS}{uid}/{name}"


def spine_names(meta: dict[str, Any]) -> list[str]:
    return [f"spine-{op}.json" for op in meta.get("spines", [])]


# -- reading the remote state --------------------------------------------------------------


def read_remote_manifest(store: ObjectStoreLike) -> tuple[str | None, Manifest]:
    """The newest remote manifest (greatest key) and its key; an empty one if none."""
    keys = sorted(o.key for o in store.list(MANIFESTS) if o.key.endswith(".manifest"))
    if not keys:
        return None, Manifest()
    key = keys[-1]
    return key, Manifest.from_json(decode(store.get_bytes(key), store.url(key)), store.url(key))


def _remote_doc(store: ObjectStoreLike, key: str) -> tuple[bytes, dict[str, Any]]:
    data = store.get_bytes(key)
    return data, decode(data, store.url(key))  # CorruptionError names the object


def _remote_batch_refs(store: ObjectStoreLike, uid: str) -> dict[str, int | None]:
    """{batch file name: size or None} of a remote checkpoint, from its metadata."""
    _, meta = _remote_doc(store, checkpoint_key(uid, CHECKPOINT_META))
    out: dict[str, int | None] = {}
    for sn in spine_names(meta):
        _, doc = _remote_doc(store, checkpoint_key(uid, sn))
        sizes = doc.get("sizes") or [None] * len(doc["batches"])
        out.update(zip(doc["batches"], sizes, strict=True))
    return out


# -- the uploader --------------------------------------------------------------------------


@dataclass
class RemoteStatus:
    url: str
    owner: str
    epoch: int
    fenced: bool
    checkpoints: list[str]
    queued: int
    last_error: str | None
    uploaded_bytes: int
    upload_seconds: float
    cache_bytes: int
    cache_fetched_bytes: int

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass
class _Upload:
    info: CheckpointInfo
    handle: CommitHandle | None


@dataclass
class _Delete:
    uuids: list[str]


@dataclass
class _State:
    manifest: Manifest = field(default_factory=Manifest)
    refs: dict[str, set[str]] = field(default_factory=dict)  # remote checkpoint -> batches
    batches: set[str] = field(default_factory=set)  # batch objects known to exist


class RemoteTier:
    """A location's link to its object-store prefix.

    Read-only use (`cache`, `batch_file`) needs nothing more; a writer calls `claim()` and
    then `start()`, after which committed checkpoints are queued with `upload()` and deleted
    ones with `delete()`; one thread applies them in order, retrying while the store is
    unreachable, so a stopped server only delays the remote copy.
    """

    def __init__(
        self,
        store: ObjectStoreLike,
        path: str,
        fs: FileLayer,
        protected: Callable[[], set[str]],
        is_local: Callable[[str], bool],
        timeline: Callable[[], list[str]],
        cache_dir: str | None = None,
    ) -> None:
        self.store: ObjectStoreLike = SharedStore.wrap(store)  # with what it borrows (forks.py)
        self.path = path
        self.fs = fs
        self._protected = protected  # batch files the local side still needs
        self._is_local = is_local  # is this checkpoint still in the local manifest?
        self._timeline = timeline  # the local head and its ancestors, newest first
        self.owner = uuidlib.uuid4().hex
        self.epoch = 0
        self._seq = 0
        self._stale_manifests: list[str] | None = None
        self._state = _State()
        self._q: queue.Queue[_Upload | _Delete | None] = queue.Queue()
        self._queued = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._idle = threading.Condition()
        self.fenced = False
        self._fenced_by: dict[str, Any] = {}  # the OWNER document that fenced us
        self.last_error: str | None = None
        self.uploaded_bytes = 0
        self.upload_seconds = 0.0
        self.cache = RemoteFileCache(
            self.store,
            cache_dir or os.path.join(path, CACHE_DIR),
            store.settings.cache_bytes,
            BATCHES,
        )
        self.log = LogMirror(self.store, path, fs)

    # -- reads --

    def batch_file(
        self, name: str, size: int | None, cache: BufferCache, expected: Any
    ) -> BatchFile:
        """A batch file that is only in the store, read on demand through the disk cache."""
        if size is None:
            size = self.store.size(BATCHES + name)
            if size is None:
                raise ObjectMissingError(self.store.url(BATCHES + name))
        return BatchFile(
            self.fs,
            self.store.url(BATCHES + name),
            cache,
            expected,
            source=self.cache.source(name, size),
        )

    # -- claiming the prefix --

    def claim(self, local: Manifest, drop: Iterable[str] = ()) -> None:
        """Become the prefix's writer (fencing any earlier one) and line the remote state up
        with the local manifest; refuses (DivergedError) if that would drop remote history,
        except for the checkpoints in `drop` (those a fallback restore found broken)."""
        store = self.store
        store.ensure_bucket()
        _, remote = read_remote_manifest(store)
        known = {c.uuid for c in local.checkpoints}
        latest = remote.checkpoints[-1].uuid if remote.checkpoints else None
        if latest is not None and latest not in known and latest not in set(drop):
            raise DivergedError(
                f"{store.url('')} holds checkpoint {remote.checkpoints[-1].uuid} (step "
                f"{remote.checkpoints[-1].step}) that {self.path} does not have: another "
                "machine wrote there. Restore it into an empty directory (open with "
                "from_remote=True, or `spindle storage pull`) instead of overwriting it."
            )
        try:
            prev = decode(store.get_bytes(OWNER), store.url(OWNER))
        except ObjectMissingError:
            prev = {}
        self.epoch = int(prev.get("epoch", 0)) + 1
        doc = {
            "owner": self.owner,
            "epoch": self.epoch,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "path": self.path,
            "claimed_at": time.time(),
        }
        store.put_bytes(OWNER, encode(doc))
        readable: dict[str, set[str] | None] = {
            c.uuid: self._refs_or_none(c.uuid) for c in remote.checkpoints
        }
        refs = {u: r or set() for u, r in readable.items()}
        batches = {o.key[len(BATCHES) :] for o in store.list(BATCHES)}
        self._state = _State(remote, refs, batches)
        self._write_manifest(remote)  # our epoch's first manifest outranks every earlier one
        if all(r is not None for r in readable.values()):
            # Objects no checkpoint names: uploads of a writer fenced mid-checkpoint (or
            # killed), which nobody else would ever delete.
            orphans = batches - set().union(*refs.values()) - self._protected()
            if orphans:
                store.remove(removable(store, [BATCHES + n for n in sorted(orphans)]))
                self._state.batches -= orphans
        # Line up: upload local checkpoints the remote lacks; delete what was gc'ed locally.
        remote_ids = {c.uuid for c in remote.checkpoints}
        gone = [c.uuid for c in remote.checkpoints if c.uuid not in known]
        if gone:
            self.delete(gone)
        for c in local.checkpoints:
            if c.uuid not in remote_ids:
                self.upload(c, None)

    def _refs_or_none(self, uid: str) -> set[str] | None:
        try:
            return set(_remote_batch_refs(self.store, uid))
        except (CorruptionError, ObjectMissingError):
            return None  # unreadable: what it names is unknown

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="spindle-upload", daemon=True)
        self._thread.start()

    # -- queueing --

    def upload(self, info: CheckpointInfo, handle: CommitHandle | None) -> None:
        with self._idle:
            self._queued += 1
        self._q.put(_Upload(info, handle))

    def delete(self, uuids: Iterable[str]) -> None:
        with self._idle:
            self._queued += 1
        self._q.put(_Delete(list(uuids)))

    def checkpoints(self) -> list[str]:
        return [c.uuid for c in self._state.manifest.checkpoints]

    def status(self) -> RemoteStatus:
        return RemoteStatus(
            url=self.store.url(""),
            owner=self.owner,
            epoch=self.epoch,
            fenced=self.fenced,
            checkpoints=self.checkpoints(),
            queued=self._queued,
            last_error=self.last_error,
            uploaded_bytes=self.uploaded_bytes,
            upload_seconds=self.upload_seconds,
            cache_bytes=self.cache.used,
            cache_fetched_bytes=self.cache.fetched_bytes,
        )

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every queued upload and delete has been applied (or given up)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while self._queued:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def close(self, timeout: float) -> None:
        """Give queued work `timeout` seconds, then stop; what is left resumes on next open."""
        if self._thread is not None:
            self.wait_idle(timeout)
            self._stop.set()
            self._q.put(None)
            self._thread.join()
            self._thread = None
        self.cache.close()

    # -- the upload thread --

    def _run(self) -> None:
        carry: _Upload | _Delete | None = None
        while True:
            task = carry if carry is not None else self._q.get()
            carry = None
            if task is None:
                return
            group: list[_Upload] = []
            if isinstance(task, _Upload):
                # Uploads queued behind this one share its manifest PUT (a group commit), so
                # the remote copy catches up however often checkpoints are taken.
                group.append(task)
                while True:
                    try:
                        nxt = self._q.get_nowait()
                    except queue.Empty:
                        break
                    if isinstance(nxt, _Upload):
                        group.append(nxt)
                    else:
                        carry = nxt  # a delete (or the stop marker) keeps its place
                        break
            try:
                if group:
                    self._apply_uploads(group)
                else:
                    assert isinstance(task, _Delete)
                    self._apply(functools.partial(self._delete, task.uuids))
            finally:
                with self._idle:
                    self._queued -= max(len(group), 1)
                    self._idle.notify_all()

    def _apply(self, work: Callable[[], None]) -> BaseException | None:
        """Run `work`, retrying while the store is unreachable; the final error, if any."""
        if self.fenced:
            return FencedError(self._fenced_message())

        def note(rs: tenacity.RetryCallState) -> None:
            exc = rs.outcome.exception() if rs.outcome else None
            self.last_error = f"{type(exc).__name__}: {exc} (retrying)"

        retry = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(RemoteUnavailableError),
            wait=tenacity.wait_exponential(
                multiplier=0.1, max=self.store.settings.retry_max_wait_s
            ),
            stop=lambda _: self._stop.is_set(),
            before_sleep=note,
            sleep=self._pause,
            reraise=True,
        )
        try:
            retry(work)
        except BaseException as e:  # reported, never raised on the upload thread
            self.last_error = f"{type(e).__name__}: {e}"
            if isinstance(e, FencedError):
                self.fenced = True
            return e
        self.last_error = None
        return None

    def _apply_uploads(self, group: list[_Upload]) -> None:
        st = self._state
        uploaded: dict[str, set[str]] = {}  # survives retries: files are not sent twice
        gone: dict[str, CheckpointGoneError] = {}

        def work() -> None:
            fresh = []
            for t in group:
                uid = t.info.uuid
                if uid in gone or uid in st.refs:
                    continue
                if uid not in uploaded:
                    try:
                        uploaded[uid] = self._upload_checkpoint(t.info)
                    except CheckpointGoneError as e:
                        gone[uid] = e
                        continue
                fresh.append(t.info)
            if fresh:
                # Input not consumed yet travels with the checkpoint that will read it.
                self.log.sync()
                self._write_manifest(st.manifest.appended(fresh))
                for info in fresh:
                    st.refs[info.uuid] = uploaded[info.uuid]

        error = self._apply(work)
        for t in group:
            if t.handle is None:
                continue
            failed = gone.get(t.info.uuid) or (None if t.info.uuid in st.refs else error)
            if failed is not None:
                t.handle._fail_remote(failed)
            else:
                t.handle._set_remote()

    def _pause(self, seconds: float) -> None:
        self._stop.wait(seconds)  # close() cuts a retry pause short

    def _upload_checkpoint(self, info: CheckpointInfo) -> set[str]:
        uid = info.uuid
        try:
            return self._upload_files(info)
        except (FileNotFoundError, CorruptionError) as e:
            if not self._is_local(uid):  # gc'ed while queued: its files may be gone
                raise CheckpointGoneError(
                    f"checkpoint {uid} was deleted locally before it was uploaded"
                ) from None
            raise StorageError(f"cannot upload checkpoint {uid}: {e}") from e

    def _upload_files(self, info: CheckpointInfo) -> set[str]:
        """Upload the checkpoint's missing batch files, then its documents."""
        st, store, uid = self._state, self.store, info.uuid
        ckdir = os.path.join(self.path, uid)
        meta = read_doc(self.fs, os.path.join(ckdir, CHECKPOINT_META))
        docs = [CHECKPOINT_META, *spine_names(meta)]
        batches: list[str] = []
        for d in docs[1:]:
            batches += read_doc(self.fs, os.path.join(ckdir, d))["batches"]
        todo = [b for b in dict.fromkeys(batches) if b not in st.batches]
        missing = [b for b in todo if not self.fs.exists(os.path.join(self.path, b))]
        if missing:
            raise FileNotFoundError(
                f"batch file {missing[0]} is neither in {self.path} nor in {store.url(BATCHES)}"
            )
        started = time.perf_counter()
        sent = 0

        def put(name: str) -> int:
            local = os.path.join(self.path, name)
            store.put_file(BATCHES + name, local)
            st.batches.add(name)
            return self.fs.size(local)

        with ThreadPoolExecutor(store.settings.upload_concurrency) as pool:
            sent = sum(pool.map(put, todo))
        for d in docs:
            store.put_file(checkpoint_key(uid, d), os.path.join(ckdir, d))
        self.uploaded_bytes += sent
        self.upload_seconds += time.perf_counter() - started
        return set(batches)

    def _delete(self, uuids: list[str]) -> None:
        st, store = self._state, self.store
        victims = [u for u in uuids if u in st.refs]
        if not victims:
            return
        remaining = st.manifest.without(set(victims))
        self._write_manifest(remaining)
        dropped: set[str] = set()
        for v in victims:
            dropped |= st.refs.pop(v)
        keep = set().union(*st.refs.values()) if st.refs else set()
        keep |= self._protected()
        self._check_fence()
        # With the victims' objects, those kept earlier only for a fork that released them
        # since (and any a failed upload left): the claim's orphan sweep, at each gc.
        unneeded = (dropped | st.batches) - keep
        doomed = removable(store, [BATCHES + n for n in sorted(unneeded)])
        for v in victims:
            doomed += [o.key for o in store.list(f"{CHECKPOINTS}{v}/")]
        store.remove(doomed)
        st.batches -= {k[len(BATCHES) :] for k in doomed if k.startswith(BATCHES)}

    def _write_manifest(self, manifest: Manifest) -> None:
        """PUT a new manifest under our epoch (the remote commit point), after checking that
        no other writer has claimed the prefix; then drop our older manifests."""
        self._check_fence()
        # The remote head is the newest checkpoint of the local timeline the prefix holds,
        # so a restore from the prefix resumes the timeline the sinks reflect.
        held = {c.uuid for c in manifest.checkpoints}
        manifest = Manifest(
            manifest.checkpoints, next((u for u in self._timeline() if u in held), None)
        )
        self._seq += 1
        key = f"{MANIFESTS}{self.epoch:010d}-{self._seq:012d}.manifest"
        doc = {**manifest.to_json(), "epoch": self.epoch, "owner": self.owner}
        self.store.put_bytes(key, encode(doc))
        self._state.manifest = manifest
        if self._stale_manifests is None:  # once per claim: every earlier manifest
            self._stale_manifests = sorted(o.key for o in self.store.list(MANIFESTS) if o.key < key)
        self._stale_manifests.append(key)
        # Keep one predecessor, for a reader that listed just before this PUT.
        doomed, self._stale_manifests = self._stale_manifests[:-2], self._stale_manifests[-2:]
        with contextlib.suppress(StorageError):
            self.store.remove(doomed)

    def _check_fence(self) -> None:
        try:
            doc = decode(self.store.get_bytes(OWNER), self.store.url(OWNER))
        except ObjectMissingError:
            doc = {}
        if doc.get("owner") != self.owner:
            self.fenced = True
            self._fenced_by = doc
            raise FencedError(self._fenced_message())

    def _fenced_message(self) -> str:
        by = self._fenced_by
        return (
            f"{self.store.url('')} was claimed by another writer (epoch {by.get('epoch')}, "
            f"host {by.get('host')}, pid {by.get('pid')}) after this one (epoch {self.epoch}): "
            "this location's new checkpoints stay local only. Stop this writer; reopen it to "
            "take the prefix back only if the other one is gone."
        )
