"""Restore onto an empty machine ("pull"): a new storage location made from the object
store's newest manifest, its batch files checked (lazy: read on demand later through the
disk cache) or downloaded and verified (eager). The remote layout is in remote.py.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .cache import BufferCache
from .errors import CheckpointNotFoundError, CorruptionError, StorageError
from .file_format import BatchFile
from .fileio import FileLayer
from .forks import SharedStore
from .manifest import (
    CHECKPOINT_META,
    MANIFEST,
    CheckpointInfo,
    Manifest,
    decode,
    read_doc,
    write_doc,
)
from .objstore import ObjectMissingError, ObjectStoreLike
from .remote import (
    BATCHES,
    CACHE_DIR,
    CHECKPOINTS,
    _remote_doc,
    checkpoint_key,
    read_remote_manifest,
    spine_names,
)
from .remote_cache import RemoteFileCache
from .remote_log import pull_log


@dataclass(frozen=True)
class PullResult:
    checkpoint: CheckpointInfo
    skipped: dict[str, str]  # checkpoint uuid -> why it could not be restored
    downloaded_bytes: int


def pull(
    store: ObjectStoreLike,
    path: str,
    fs: FileLayer,
    checkpoint: str = "latest",
    eager: bool = False,
    fallback: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> PullResult:
    """Create the storage location `path` (absent or empty) from the store's newest manifest.

    Fetches the manifest and every checkpoint's metadata; checks the chosen checkpoint's
    batch objects (lazy: each one's header, footer and index, with ranged GETs; eager: the
    whole file, downloaded into `path` and every block checksum verified). A missing or
    corrupt object raises an error naming it, unless `fallback`, which moves on to the
    checkpoint's nearest intact ancestor. The local manifest is written last: a failed pull
    leaves no location.
    `progress(done_bytes, total_bytes)` is called during eager downloads.
    """
    if fs.isdir(path) and any(n != CACHE_DIR for n in fs.listdir(path)):
        raise StorageError(f"{path} is not empty: pull restores into a new directory")
    store = SharedStore.wrap(store)  # a fork's borrowed objects are read from their owner
    _, remote = read_remote_manifest(store)
    if not remote.checkpoints:
        raise CheckpointNotFoundError(f"{store.url('')} holds no checkpoint")
    found = remote.latest() if checkpoint == "latest" else remote.find(checkpoint)
    if found is None:
        what = "on its current timeline" if checkpoint == "latest" else repr(checkpoint)
        raise CheckpointNotFoundError(f"{store.url('')}: no checkpoint {what}")
    # A fallback stays on the chosen checkpoint's timeline: a sink rolled back to an
    # ancestor's step agrees with it, to another branch's step it would not.
    candidates = remote.lineage(found.uuid) if fallback else [found]
    fs.mkdir(path)
    try:
        return _pull_into(store, path, fs, remote, candidates, eager, fallback, progress)
    except BaseException:
        # Leave the directory as it was found, so that the pull can simply be retried.
        for n in fs.listdir(path):
            if n != CACHE_DIR:
                p = os.path.join(path, n)
                fs.rmtree(p) if fs.isdir(p) else fs.remove(p)
        raise


def _pull_into(
    store: ObjectStoreLike,
    path: str,
    fs: FileLayer,
    remote: Manifest,
    candidates: list[CheckpointInfo],
    eager: bool,
    fallback: bool,
    progress: Callable[[int, int], None] | None,
) -> PullResult:
    skipped: dict[str, str] = {}
    docs: dict[str, dict[str, bytes]] = {}

    def fetch_docs(c: CheckpointInfo) -> None:
        try:
            data, meta = _remote_doc(store, checkpoint_key(c.uuid, CHECKPOINT_META))
            got = {CHECKPOINT_META: data}
            for sn in spine_names(meta):
                got[sn], _ = _remote_doc(store, checkpoint_key(c.uuid, sn))
            docs[c.uuid] = got
        except (CorruptionError, ObjectMissingError) as e:
            skipped[c.uuid] = str(e)

    with ThreadPoolExecutor(store.settings.upload_concurrency) as pool:
        list(pool.map(fetch_docs, remote.checkpoints))
    chosen: CheckpointInfo | None = None
    downloaded = 0
    first_error: StorageError | None = None
    for c in candidates:
        try:
            if c.uuid in skipped:
                raise CorruptionError(store.url(f"{CHECKPOINTS}{c.uuid}/"), skipped[c.uuid])
            downloaded += _check_batches(store, path, fs, docs[c.uuid], eager, progress)
            chosen = c
            break
        except (CorruptionError, ObjectMissingError) as e:
            skipped[c.uuid] = str(e)
            first_error = first_error or e
            if not fallback:
                break
    if chosen is None:
        assert first_error is not None
        raise first_error
    keep = [c for c in remote.checkpoints if c.uuid in docs and c.uuid not in skipped]
    for c in keep:
        ckdir = os.path.join(path, c.uuid)
        fs.mkdir(ckdir)
        for name, data in docs[c.uuid].items():
            write_doc(fs, os.path.join(ckdir, name), decode(data, name), atomic=False)
        fs.sync_dir(ckdir)
    if skipped:
        # The checkpoints left behind as broken: the location may drop them from the prefix
        # when it first claims it (`pulled_skipped`), which it would otherwise refuse.
        write_doc(fs, os.path.join(path, PULL_SKIPPED), {"skipped": skipped}, atomic=False)
    downloaded += pull_log(store, path, fs)
    fs.sync_dir(path)
    manifest = Manifest(keep, chosen.uuid)
    write_doc(fs, os.path.join(path, MANIFEST), manifest.to_json())  # commit point
    return PullResult(chosen, dict(skipped), downloaded)


PULL_SKIPPED = "pull-skipped.json"


def pulled_skipped(fs: FileLayer, path: str) -> set[str]:
    """The checkpoints a pull into `path` found broken and left out (empty if none)."""
    p = os.path.join(path, PULL_SKIPPED)
    if not fs.exists(p):
        return set()
    skipped = read_doc(fs, p).get("skipped")
    return set(skipped) if isinstance(skipped, dict) else set()


def _check_batches(
    store: ObjectStoreLike,
    path: str,
    fs: FileLayer,
    docs: dict[str, bytes],
    eager: bool,
    progress: Callable[[int, int], None] | None,
) -> int:
    sizes: dict[str, int | None] = {}
    for name, data in docs.items():
        if name != CHECKPOINT_META:
            d = decode(data, name)
            sizes.update(
                zip(d["batches"], d.get("sizes") or [None] * len(d["batches"]), strict=True)
            )
    for n, s in list(sizes.items()):
        real = store.size(BATCHES + n)
        if real is None:
            raise ObjectMissingError(store.url(BATCHES + n))
        if s is not None and real != s:
            raise CorruptionError(store.url(BATCHES + n), f"size {real}, expected {s}")
        sizes[n] = real
    total = sum(s or 0 for s in sizes.values())
    cache = BufferCache(16 << 20)
    if not eager:
        probe = RemoteFileCache(store, os.path.join(path, CACHE_DIR), 1 << 30, BATCHES)
        try:
            for n, s in sizes.items():
                assert s is not None
                BatchFile(fs, store.url(BATCHES + n), cache, source=probe.source(n, s))
        finally:
            probe.close()
        return 0
    done = 0
    lock = threading.Lock()

    def download(name: str) -> int:
        nonlocal done
        local = os.path.join(path, name)
        f = fs.create(local + ".mut")
        try:

            def write(data: bytes) -> None:
                nonlocal done
                f.write(data)
                with lock:
                    done += len(data)
                if progress is not None:
                    progress(done, total)

            n = store.get_into(BATCHES + name, write)
            f.sync()
        except BaseException:
            f.close()
            with contextlib.suppress(OSError):
                fs.remove(local + ".mut")
            raise
        f.close()
        fs.rename(local + ".mut", local)
        try:
            BatchFile(fs, local, cache).verify()
        except CorruptionError as e:
            fs.remove(local)
            raise CorruptionError(store.url(BATCHES + name), e.detail, e.block) from e
        return n

    with ThreadPoolExecutor(store.settings.upload_concurrency) as pool:
        got = sum(pool.map(download, list(sizes)))
    fs.sync_dir(path)
    return got
