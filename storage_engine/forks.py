"""Forks: a new storage location whose one checkpoint is another location's checkpoint,
sharing that checkpoint's files instead of copying them (issue 53, part 3).

`fork_location(origin, fork, checkpoint)` makes the location `fork` (absent or empty) hold
one checkpoint equal to `checkpoint` of `origin`: the same uuid, step, fingerprint and
metadata (source offsets, sink positions), no parent. Nothing is copied:

- Locally, the checkpoint's batch files and the origin's input-log segments are hard links
  (`FileLayer.link`); the small documents (manifest, checkpoint.json, spine-*.json) are
  written anew. Files are immutable and never renamed or rewritten, so a link is a share,
  and the file system's link count is the reference count: gc, delete or `rm -r` of either
  location unlinks only its own name, and the bytes go when the last name goes.
- The input log: the fork gets every whole segment the origin has when it is forked, by
  hard link. Its `log` sources resume at the checkpoint's offsets, like every other source,
  so they read the records the origin read after the checkpoint (and those appended up to
  the fork), as a Kafka or files source would; records pushed later go to the pipeline they
  are pushed to. Segments below the checkpoint's offset are truncated by the fork's runner
  as its own checkpoints move on (only the fork's links go).
- In the object store (each location has its own prefix in one bucket), the fork's
  checkpoint documents and a manifest are written under the fork's prefix, and the batch
  objects and log segments are *borrowed* from the prefix that holds them (their owner),
  with a reference record at the owner. No object is copied (not even server-side).

Remote records (checksummed JSON, `manifest.encode`):

    <owner prefix>/refs/<ref id>.json   {"format", "holder": <holder's locator>, "keys": [...],
                                          "created_at"}: what one holder borrows from here
    <holder prefix>/borrowed.json       {"format", "origins": {<owner's locator>:
                                          {"ref": <ref id>, "keys": {<key>: <size>}}}}

A locator is where a prefix is among its siblings (`ObjectStoreLike.locator`: the S3 prefix
in the bucket, a directory store's root). `SharedStore` is how a holder sees its prefix: a
borrowed key reads from its owner, is listed as present (so the uploader never sends it and
the input log's mirror never re-uploads it), and removing it releases it (`release`).

Invariants:
- an owner never deletes an object a refs record under its prefix names: remote gc and its
  sweep (`RemoteTier._delete`), the claim's orphan sweep, the input log's truncation
  (`LogMirror.sync`) and a pipeline's deletion (`delete_prefix`) all leave
  `referenced_keys(store)` alone; `delete_prefix` keeps the refs records too;
- a fork writes its refs records before it checks that the checkpoint is still in the
  origin's remote manifest (and every borrowed object still there): a remote gc writes its
  manifest before it reads the refs records, so one that dropped the checkpoint after the
  check sees the records, and one that dropped it before fails the fork;
- a holder releases a key only once no checkpoint of its own (remote or local) or live spine
  needs it (the tier's own deletion rules decide, as for its own objects): the refs record
  shrinks (or goes) first, then `borrowed.json`. A crash between leaves `borrowed.json`
  naming a key the holder no longer needs: never read, released again harmlessly;
- released objects are collected by their owner's next gc or claim (the sweep removes every
  object no checkpoint, local file or refs record needs); if the owner prefix has no
  manifest (its pipeline was deleted), the releasing holder deletes them itself, those no
  other refs record names;
- a fork of a fork borrows each key from its owner directly (chains are one level deep).

A race of a holder's last release with its owner's deletion can leak objects (the owner
read the record, the holder then found the owner's manifest still there), never lose one.
"""

from __future__ import annotations

import builtins
import os
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from .errors import CheckpointNotFoundError, CorruptionError, StorageError
from .fileio import FileLayer, PosixFileLayer
from .input_log import LOG_DIR, parse_segment
from .manifest import (
    CHECKPOINT_META,
    CHECKPOINT_RE,
    MANIFEST,
    CheckpointInfo,
    Manifest,
    decode,
    encode,
    read_doc,
    spine_file,
    write_doc,
)
from .objstore import ObjectInfo, ObjectMissingError, ObjectStoreLike, TierSettings

REFS = "refs/"
BORROWED = "borrowed.json"
RECORD_FORMAT = 1
_BATCHES = "batches/"  # remote.BATCHES (remote.py imports this module)
_CHECKPOINTS = "checkpoints/"
_MANIFESTS = "manifests/"
_LOG = LOG_DIR + "/"
_SHAREABLE = (_BATCHES, _LOG)  # the immutable objects a fork may borrow


class ForkError(StorageError):
    """A fork cannot be made: the target is not empty, or the checkpoint went meanwhile."""


@dataclass(frozen=True)
class ForkResult:
    checkpoint: CheckpointInfo  # the fork's one checkpoint (as in the origin, no parent)
    linked_files: int  # batch files and log segments hard-linked
    linked_bytes: int
    borrowed_objects: int  # object-store keys referenced at their owners


# -- reference records ----------------------------------------------------------------------


def _ref_docs(store: ObjectStoreLike) -> dict[str, dict[str, Any]]:
    out = {}
    for o in store.list(REFS):
        if o.key.endswith(".json"):
            try:
                out[o.key] = decode(store.get_bytes(o.key), store.url(o.key))
            except ObjectMissingError:
                continue  # released while listing
    return out


def referenced_keys(store: ObjectStoreLike) -> set[str]:
    """The keys of `store`'s prefix that forks reference: never deleted while listed.
    A record that cannot be read raises (CorruptionError): deleting anything then would
    be a guess."""
    return {str(k) for doc in _ref_docs(store).values() for k in doc.get("keys", [])}


def removable(store: ObjectStoreLike, keys: Iterable[str]) -> list[str]:
    """`keys` less those a fork references (what an owner may delete)."""
    keys = list(keys)
    shareable = [k for k in keys if k.startswith(_SHAREABLE)]
    if not shareable:
        return keys
    held = referenced_keys(store)
    return [k for k in keys if k not in held]


# -- the holder's view ------------------------------------------------------------------------


class SharedStore:
    """A holder's prefix with its borrowed keys: reads of a borrowed key go to its owner,
    listings show it, `remove` releases it; everything else is the prefix's own."""

    def __init__(self, own: ObjectStoreLike) -> None:
        self.own = own
        self._mutex = threading.Lock()
        self._origins: dict[str, dict[str, Any]] | None = None  # read on first use
        self._owners: dict[str, ObjectStoreLike] = {}

    @classmethod
    def wrap(cls, store: ObjectStoreLike) -> SharedStore:
        return store if isinstance(store, SharedStore) else cls(store)

    # -- the borrowed record --

    def origins(self) -> dict[str, dict[str, Any]]:
        with self._mutex:
            if self._origins is None:
                try:
                    doc = decode(self.own.get_bytes(BORROWED), self.own.url(BORROWED))
                except ObjectMissingError:
                    doc = {}
                self._origins = dict(doc.get("origins") or {})
            return self._origins

    def _owner_of(self, key: str) -> ObjectStoreLike | None:
        if not key.startswith(_SHAREABLE):
            return None
        for loc, entry in self.origins().items():
            if key in entry["keys"]:
                return self.owner(loc)
        return None

    def owner(self, locator: str) -> ObjectStoreLike:
        with self._mutex:
            st = self._owners.get(locator)
            if st is None:
                st = self._owners[locator] = self.own.sibling(locator)
            return st

    def borrowed(self) -> dict[str, tuple[str, int]]:
        """Every borrowed key: (its owner's locator, its size)."""
        return {
            k: (loc, int(size))
            for loc, entry in self.origins().items()
            for k, size in entry["keys"].items()
        }

    def release(self, keys: Iterable[str]) -> None:
        """Stop borrowing `keys` (the holder needs them no more): shrink or drop the refs
        record at each owner, then borrowed.json; where an owner has no manifest left (its
        location was deleted), delete what no other record references. The record in
        memory is replaced, never changed in place: readers on other threads iterate it."""
        wanted = set(keys)
        for loc, entry in list(self.origins().items()):
            gone = wanted & set(entry["keys"])
            if not gone:
                continue
            owner = self.owner(loc)
            left = {k: v for k, v in entry["keys"].items() if k not in gone}
            rkey = f"{REFS}{entry['ref']}.json"
            origins = dict(self.origins())
            if left:
                owner.put_bytes(rkey, encode(_ref_doc(self.own.locator, left)))
                origins[loc] = {**entry, "keys": left}
            else:
                owner.remove([rkey])
                del origins[loc]
            if origins:
                self.own.put_bytes(BORROWED, encode({"format": RECORD_FORMAT, "origins": origins}))
            else:
                self.own.remove([BORROWED])
            with self._mutex:
                self._origins = origins
            if not owner.list(_MANIFESTS):
                owner.remove(sorted(gone - referenced_keys(owner)))

    def release_all(self) -> None:
        self.release(self.borrowed())

    # -- ObjectStoreLike --

    @property
    def settings(self) -> TierSettings:
        return self.own.settings

    @property
    def locator(self) -> str:
        return self.own.locator

    def sibling(self, locator: str) -> ObjectStoreLike:
        return self.own.sibling(locator)

    def url(self, key: str) -> str:
        owner = self._owner_of(key)
        return (owner or self.own).url(key)

    def ensure_bucket(self) -> None:
        self.own.ensure_bucket()

    def put_file(self, key: str, path: str) -> None:
        self.own.put_file(key, path)

    def put_bytes(self, key: str, data: bytes) -> None:
        self.own.put_bytes(key, data)

    def get_bytes(self, key: str, offset: int = 0, length: int = 0) -> bytes:
        return (self._owner_of(key) or self.own).get_bytes(key, offset, length)

    def get_into(self, key: str, write: Callable[[bytes], object], chunk: int = 1 << 20) -> int:
        return (self._owner_of(key) or self.own).get_into(key, write, chunk)

    def get_file(self, key: str, path: str) -> None:
        (self._owner_of(key) or self.own).get_file(key, path)

    def size(self, key: str) -> int | None:
        return (self._owner_of(key) or self.own).size(key)

    def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        out = self.own.list(prefix)
        if prefix == "" or any(p.startswith(prefix) or prefix.startswith(p) for p in _SHAREABLE):
            have = {o.key for o in out}
            out += [
                ObjectInfo(k, size)
                for k, (_, size) in sorted(self.borrowed().items())
                if k.startswith(prefix) and k not in have
            ]
        return out

    def remove(self, keys: Iterable[str]) -> None:
        keys = builtins.list(keys)
        mine = self.borrowed()
        lent = [k for k in keys if k in mine]
        if lent:
            self.release(lent)
        self.own.remove([k for k in keys if k not in mine])


def _ref_doc(holder: str, keys: Iterable[str]) -> dict[str, Any]:
    return {
        "format": RECORD_FORMAT,
        "holder": holder,
        "keys": sorted(keys),
        "created_at": time.time(),
    }


def delete_prefix(store: ObjectStoreLike) -> None:
    """Delete a location's prefix (its pipeline is deleted): release what it borrows, and
    delete every object but those forks still reference (and their refs records, so that
    the last fork to release them deletes them)."""
    shared = SharedStore.wrap(store)
    shared.release_all()
    own = shared.own
    keep = referenced_keys(own)
    own.remove([o.key for o in own.list("") if o.key not in keep and not o.key.startswith(REFS)])


# -- forking ----------------------------------------------------------------------------------


def fork_location(
    origin: str,
    fork: str,
    checkpoint: str = "latest",
    *,
    fs: FileLayer | None = None,
    origin_store: ObjectStoreLike | None = None,
    fork_store: ObjectStoreLike | None = None,
    upload_wait_s: float = 0.0,
) -> ForkResult:
    """Make `fork` (absent or empty) a location holding one checkpoint: `checkpoint` ("latest",
    a uuid or an identifier) of the location `origin`, sharing its files (see the module
    docstring). `origin` may be open and running: nothing is locked, and a checkpoint
    collected while being forked fails the fork (ForkError), leaving no fork behind.

    With `origin_store` and `fork_store` (the two locations' object-store prefixes, siblings
    in one bucket), the fork's prefix gets the checkpoint too, borrowing the origin's objects;
    the checkpoint must be in the origin's remote manifest (remote durable), within
    `upload_wait_s` seconds (a checkpoint just taken may still be uploading)."""
    if (origin_store is None) != (fork_store is None):
        raise ValueError("origin_store and fork_store go together")
    fs = fs or PosixFileLayer()
    origin, fork = os.path.abspath(origin), os.path.abspath(fork)
    info = _find(fs, origin, checkpoint)
    if fs.isdir(fork) and fs.listdir(fork):
        raise ForkError(f"{fork}: the fork's storage location is not empty")
    written: list[tuple[ObjectStoreLike, str]] = []  # remote records, removed on failure
    try:
        fs.mkdir(fork)
        fs.sync_dir(os.path.dirname(fork))
        # An empty manifest first: a crash before the last write leaves a location that
        # opens empty and whose open removes the rest (as after a crashed commit).
        write_doc(fs, os.path.join(fork, MANIFEST), Manifest().to_json())
        docs = _checkpoint_docs(fs, origin, info.uuid)
        names = [b for d in docs.values() for b in d.get("batches", [])]
        linked = linked_bytes = 0
        for name in dict.fromkeys(names):
            src = os.path.join(origin, name)
            try:
                fs.link(src, os.path.join(fork, name))
            except FileNotFoundError:
                if not _still_there(fs, origin, info.uuid):
                    raise _gone(info) from None
                if origin_store is None:
                    raise ForkError(
                        f"batch file {name} of checkpoint {info.uuid} is not in {origin}"
                    ) from None
                continue  # only in the object store (a lazy restore): borrowed there
            linked += 1
            linked_bytes += fs.size(src)
        for rel in _log_segments(fs, origin):
            dst = os.path.join(fork, LOG_DIR, rel)
            fs.mkdir(os.path.dirname(dst))
            try:
                fs.link(os.path.join(origin, LOG_DIR, rel), dst)
            except FileNotFoundError:
                continue  # truncated meanwhile: below a retained checkpoint's offset
            linked += 1
            linked_bytes += fs.size(dst)
        for stream in _log_streams(fs, fork):
            fs.sync_dir(stream)
        ckdir = os.path.join(fork, info.uuid)
        fs.mkdir(ckdir)
        for name, doc in docs.items():
            write_doc(fs, os.path.join(ckdir, name), doc, atomic=False)
        fs.sync_dir(ckdir)
        fs.sync_dir(fork)
        mine = replace(info, parent=None)
        borrowed = 0
        if origin_store is not None and fork_store is not None:
            borrowed = _fork_remote(
                origin_store, fork_store, mine, docs, names, written, upload_wait_s
            )
        if not _still_there(fs, origin, info.uuid):
            raise _gone(info)
        write_doc(fs, os.path.join(fork, MANIFEST), Manifest([mine], mine.uuid).to_json())
    except BaseException:
        for store, key in reversed(written):
            store.remove([key])
        if fs.isdir(fork):
            fs.rmtree(fork)
        raise
    return ForkResult(mine, linked, linked_bytes, borrowed)


def _find(fs: FileLayer, origin: str, ref: str) -> CheckpointInfo:
    mpath = os.path.join(origin, MANIFEST)
    if not fs.exists(mpath):
        raise CheckpointNotFoundError(f"{origin}: no storage location (no {MANIFEST})")
    manifest = Manifest.from_json(read_doc(fs, mpath), mpath)
    info = manifest.latest() if ref == "latest" else manifest.find(ref)
    if info is None:
        raise CheckpointNotFoundError(f"{origin}: no checkpoint {ref!r}")
    return info


def _still_there(fs: FileLayer, origin: str, uid: str) -> bool:
    try:
        return _find(fs, origin, uid).uuid == uid
    except (CheckpointNotFoundError, CorruptionError):
        return False


def _gone(info: CheckpointInfo) -> ForkError:
    return ForkError(
        f"checkpoint {info.uuid} (step {info.step}) was collected while it was being forked"
    )


def _checkpoint_docs(fs: FileLayer, origin: str, uid: str) -> dict[str, dict[str, Any]]:
    """checkpoint.json and the spine documents, by file name."""
    if not CHECKPOINT_RE.match(uid):
        raise CorruptionError(os.path.join(origin, MANIFEST), f"bad checkpoint uuid {uid!r}")
    ckdir = os.path.join(origin, uid)
    meta = read_doc(fs, os.path.join(ckdir, CHECKPOINT_META))
    out = {CHECKPOINT_META: meta}
    for op in meta.get("spines", []):
        out[spine_file(op)] = read_doc(fs, os.path.join(ckdir, spine_file(op)))
    return out


def _log_streams(fs: FileLayer, path: str) -> list[str]:
    root = os.path.join(path, LOG_DIR)
    if not fs.isdir(root):
        return []
    return [os.path.join(root, s) for s in fs.listdir(root) if fs.isdir(os.path.join(root, s))]


def _log_segments(fs: FileLayer, path: str) -> list[str]:
    """`<stream>/<segment>` of every whole segment of the location's input logs."""
    out = []
    for stream in _log_streams(fs, path):
        out += [
            f"{os.path.basename(stream)}/{n}"
            for n in fs.listdir(stream)
            if parse_segment(n) is not None
        ]
    return out


def _fork_remote(
    origin_store: ObjectStoreLike,
    fork_store: ObjectStoreLike,
    info: CheckpointInfo,
    docs: dict[str, dict[str, Any]],
    batches: list[str],
    written: list[tuple[ObjectStoreLike, str]],
    upload_wait_s: float,
) -> int:
    """The fork's checkpoint in its prefix, borrowing the origin's objects; every object
    written goes into `written` (for the caller to remove if the fork fails)."""
    # Objects a deleted location of the same name keeps for its forks may be there (their
    # names are unique); a location that holds checkpoints or borrows is not forked over.
    if fork_store.list(_MANIFESTS) or fork_store.size(BORROWED) is not None:
        raise ForkError(f"{fork_store.url('')} is not empty")
    fork_store.ensure_bucket()
    origin = SharedStore.wrap(origin_store)
    deadline = time.monotonic() + upload_wait_s
    while _remote_manifest(origin).find(info.uuid) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    present = {o.key: o.size for o in origin.list(_BATCHES)}
    want = {_BATCHES + b for b in batches}
    missing = sorted(want - set(present))
    if missing:
        raise ForkError(
            f"checkpoint {info.uuid} is not in {origin.url('')} yet ({missing[0]} is missing): "
            "fork it once it is remote durable"
        )
    sizes = {k: present[k] for k in want}
    sizes.update({o.key: o.size for o in origin.list(_LOG)})
    lent = origin.borrowed()
    by_owner: dict[str, dict[str, int]] = {}
    for key, size in sizes.items():
        at = lent[key][0] if key in lent else origin.own.locator
        by_owner.setdefault(at, {})[key] = size
    origins: dict[str, dict[str, Any]] = {}
    for loc, keys in by_owner.items():
        ref = uuidlib.uuid4().hex
        owner = origin.own if loc == origin.own.locator else origin.owner(loc)
        rkey = f"{REFS}{ref}.json"
        written.append((owner, rkey))
        owner.put_bytes(rkey, encode(_ref_doc(fork_store.locator, keys)))
        origins[loc] = {"ref": ref, "keys": keys, "owner": owner}
    # After the refs records: the checkpoint and its objects must still be at the origin.
    remote = _remote_manifest(origin)
    if remote.find(info.uuid) is None or any(origin.size(k) is None for k in want):
        raise _gone(info)
    # Log segments the origin truncated before its records were written (below a retained
    # checkpoint's offset, so below this one's) are not borrowed after all.
    truncated = {k for k in sizes if k.startswith(_LOG)} - {o.key for o in origin.list(_LOG)}
    for entry in origins.values():
        if truncated & set(entry["keys"]):
            entry["keys"] = {k: v for k, v in entry["keys"].items() if k not in truncated}
            rkey = f"{REFS}{entry['ref']}.json"
            entry["owner"].put_bytes(rkey, encode(_ref_doc(fork_store.locator, entry["keys"])))
    for entry in origins.values():
        del entry["owner"]
    puts = {BORROWED: {"format": RECORD_FORMAT, "origins": origins}}
    puts.update({f"{_CHECKPOINTS}{info.uuid}/{name}": doc for name, doc in docs.items()})
    for key, doc in puts.items():
        written.append((fork_store, key))
        fork_store.put_bytes(key, encode(doc))
    manifest = {**Manifest([info], info.uuid).to_json(), "epoch": 0, "owner": "fork"}
    key = f"{_MANIFESTS}{0:010d}-{0:012d}.manifest"
    written.append((fork_store, key))
    fork_store.put_bytes(key, encode(manifest))
    return len(sizes) - len(truncated)


def _remote_manifest(store: ObjectStoreLike) -> Manifest:
    keys = sorted(o.key for o in store.list(_MANIFESTS) if o.key.endswith(".manifest"))
    if not keys:
        return Manifest()
    return Manifest.from_json(decode(store.get_bytes(keys[-1]), store.url(keys[-1])), keys[-1])


__all__ = [
    "BORROWED",
    "REFS",
    "ForkError",
    "ForkResult",
    "SharedStore",
    "delete_prefix",
    "fork_location",
    "referenced_keys",
    "removable",
]
