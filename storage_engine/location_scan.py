"""How the read-only view reads a location: strictly, without a lock, reporting problems.

The manifest, each checkpoint's metadata and spine documents are read through the engine's
own decoders (`manifest.decode`, `Manifest.from_json`), plus the checks only a reader that
does not trust the files makes (a canonical checksum trailer, uuids, operator ids, batch
names). Storage errors never escape: each becomes a `Problem` naming the file (and the
block, when one is at fault), so one pass reports everything that is wrong. The only
exception raised is `ToolPathError`, for a path that does not exist or is the wrong kind of
thing.

A pipeline that commits or collects garbage meanwhile can make a file vanish between
listing and reading; that shows up as a "missing" problem on that run only.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .cache import BufferCache
from .errors import CorruptionError, StorageError
from .file_format import BatchFile
from .fileio import PosixFileLayer
from .manifest import (
    BATCH_RE,
    CHECKPOINT_META,
    CHECKPOINT_RE,
    MANIFEST,
    OP_ID_RE,
    CheckpointInfo,
    Manifest,
    canonical_trailer,
    decode,
    spine_file,
)

TOOL_CACHE_BYTES = 8 << 20


class ToolPathError(StorageError):
    """The path given to a tool does not exist or is not the kind of thing it needs."""


@dataclass(frozen=True)
class Problem:
    """Something wrong with one file; `block` is set when a batch file block is at fault."""

    path: str
    block: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.path} (block {self.block})" if self.block is not None else self.path
        return f"{where}: {self.message}"


def root_dir(path: str | os.PathLike[str]) -> str:
    root = os.path.abspath(os.fspath(path))
    if not os.path.exists(root):
        raise ToolPathError(f"{root}: no such directory")
    if not os.path.isdir(root):
        raise ToolPathError(f"{root}: not a directory")
    return root


def read_checked_doc(path: str, what: str) -> tuple[dict[str, Any] | None, list[Problem]]:
    """A checksummed JSON document, strictly: the engine's checks plus a canonical trailer."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None, [Problem(path, None, f"missing ({what})")]
    except OSError as e:
        return None, [Problem(path, None, f"unreadable ({what}): {e}")]
    try:
        doc = decode(data, path)
    except CorruptionError as e:
        return None, [Problem(path, None, e.detail)]
    problems = []
    if not canonical_trailer(data):
        problems.append(
            Problem(path, None, "checksum trailer is not 8 lowercase hex digits (damaged)")
        )
    return doc, problems


@dataclass
class ScannedSpine:
    op_id: str
    doc: dict[str, Any]
    path: str


@dataclass
class ScannedCheckpoint:
    info: CheckpointInfo
    meta: dict[str, Any] | None = None
    spines: list[ScannedSpine] = field(default_factory=list)
    readable: bool = True


@dataclass
class Scan:
    root: str
    names: list[str]
    manifest_present: bool
    checkpoints: list[ScannedCheckpoint]
    problems: list[Problem]
    refs: dict[str, list[str]]  # batch name -> checkpoint uuids, in manifest order

    def p(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)


def _str_list(v: Any) -> list[str] | None:
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return list(v)
    return None


def scan_location(root: str) -> Scan:
    """Manifest, checkpoint metadata and spine documents, with every problem met on the way."""
    names = sorted(os.listdir(root))
    problems: list[Problem] = []
    mpath = os.path.join(root, MANIFEST)
    checkpoints: list[ScannedCheckpoint] = []
    present = MANIFEST in names
    if present:
        doc, probs = read_checked_doc(mpath, "checkpoint manifest")
        problems += probs
        if doc is not None:
            try:
                manifest = Manifest.from_json(doc, mpath)
            except StorageError as e:
                problems.append(problem_of(e, mpath))
            else:
                checkpoints = [ScannedCheckpoint(c) for c in manifest.checkpoints]
    elif any(CHECKPOINT_RE.match(n) for n in names):
        problems.append(
            Problem(
                mpath,
                None,
                "missing, but checkpoint directories exist (the engine refuses to open)",
            )
        )
    scan = Scan(root, names, present, checkpoints, problems, {})
    seen: set[str] = set()
    for c in checkpoints:
        uid = c.info.uuid
        if not isinstance(uid, str) or not CHECKPOINT_RE.match(uid) or uid in seen:
            problems.append(Problem(mpath, None, f"invalid or duplicate checkpoint uuid {uid!r}"))
            c.readable = False
            continue
        seen.add(uid)
        _scan_checkpoint(scan, c)
    return scan


def _scan_checkpoint(scan: Scan, c: ScannedCheckpoint) -> None:
    uid = c.info.uuid
    cpath = scan.p(uid, CHECKPOINT_META)
    meta, probs = read_checked_doc(cpath, f"metadata of checkpoint {uid}")
    scan.problems += probs
    if meta is None:
        c.readable = False
        return
    c.meta = meta
    if meta.get("uuid") != uid:
        scan.problems.append(Problem(cpath, None, f"names checkpoint {meta.get('uuid')!r}"))
    if meta.get("step") != c.info.step:
        scan.problems.append(
            Problem(cpath, None, f"step {meta.get('step')!r} differs from the manifest's")
        )
    ops = _str_list(meta.get("spines", []))
    if ops is None:
        scan.problems.append(Problem(cpath, None, "malformed spine list"))
        c.readable = False
        return
    for op in ops:
        spath = scan.p(uid, spine_file(op))
        if not OP_ID_RE.match(op):
            scan.problems.append(Problem(cpath, None, f"invalid operator id {op!r}"))
            c.readable = False
            continue
        doc, probs = read_checked_doc(spath, f"spine {op} of checkpoint {uid}")
        scan.problems += probs
        if doc is None:
            c.readable = False
            continue
        batches = _str_list(doc.get("batches"))
        if (
            batches is None
            or not all(BATCH_RE.match(b) for b in batches)
            or not isinstance(doc.get("schema_fingerprint"), str)
            or doc.get("op_id", op) != op
        ):
            scan.problems.append(Problem(spath, None, "malformed spine document"))
            c.readable = False
            continue
        c.spines.append(ScannedSpine(op, doc, spath))
        for b in batches:
            users = scan.refs.setdefault(b, [])
            if uid not in users:
                users.append(uid)


def problem_of(e: BaseException, path: str) -> Problem:
    if isinstance(e, CorruptionError):
        return Problem(e.path, e.block, e.detail)
    if isinstance(e, StorageError):
        return Problem(path, None, str(e))
    return Problem(path, None, f"unexpected {type(e).__name__}: {e}")


@contextlib.contextmanager
def tool_cache() -> Iterator[BufferCache]:
    cache = BufferCache(TOOL_CACHE_BYTES, prefetch_threads=1)
    try:
        yield cache
    finally:
        cache.close()


def open_batch(path: str, cache: BufferCache) -> tuple[BatchFile | None, Problem | None]:
    try:
        return BatchFile(PosixFileLayer(), path, cache), None
    except Exception as e:  # a tool reports, it does not crash
        return None, problem_of(e, path)


def mut_files(scan: Scan) -> list[str]:
    out = [n for n in scan.names if n.endswith(".mut")]
    for n in scan.names:
        if CHECKPOINT_RE.match(n) and os.path.isdir(scan.p(n)):
            out += [f"{n}/{m}" for m in sorted(os.listdir(scan.p(n))) if m.endswith(".mut")]
    return out


def file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
