"""Small checksummed JSON documents: the checkpoint manifest and per-checkpoint metadata,
and the names of a location's files (its layout is described in location.py).

Each document is UTF-8 JSON followed by a trailer line `crc32 <8 hex digits>` over the JSON
bytes, so corruption is detected and the file stays readable by humans and `jq`-like tools.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .errors import CorruptionError, FormatVersionError
from .fileio import FileLayer, write_durably

MANIFEST_FORMAT = 1
MANIFEST = "checkpoints.manifest"  # a location's (and the remote prefix's) commit point
CHECKPOINT_META = "checkpoint.json"  # in each checkpoint directory
LOCK = "LOCK"  # flock'ed by the process that owns a location
BATCH_RE = re.compile(r"^[0-9a-f]{32}\.batch$")
CHECKPOINT_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
OP_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_TRAILER = b"\ncrc32 "
_CANONICAL_CRC = re.compile(rb"[0-9a-f]{8}\n")


def spine_file(op_id: str) -> str:
    """A spine's document in its checkpoint's directory."""
    return f"spine-{op_id}.json"


def encode(doc: dict[str, Any]) -> bytes:
    body = json.dumps(doc, indent=1, sort_keys=True, default=str).encode()
    return body + _TRAILER + f"{zlib.crc32(body):08x}\n".encode()


def decode(data: bytes, path: str) -> dict[str, Any]:
    cut = data.rfind(_TRAILER)
    if cut < 0 or not data.endswith(b"\n"):
        raise CorruptionError(path, "missing checksum trailer (truncated?)")
    body, trailer = data[:cut], data[cut + len(_TRAILER) : -1]
    try:
        want = int(trailer, 16)
    except ValueError:
        raise CorruptionError(path, "unreadable checksum trailer") from None
    if zlib.crc32(body) != want:
        raise CorruptionError(path, "checksum mismatch")
    try:
        doc = json.loads(body)
    except ValueError as e:
        raise CorruptionError(path, f"invalid JSON: {e}") from e
    if not isinstance(doc, dict):
        raise CorruptionError(path, "not a JSON object")
    return doc


def canonical_trailer(data: bytes) -> bool:
    """Whether a document ends in the trailer `encode` writes: 8 lowercase hex digits and a
    newline. `decode` also accepts other forms of the same number (upper case, fewer
    digits), which only a damaged or hand-edited file has (the offline tools report it)."""
    cut = data.rfind(_TRAILER)
    return cut >= 0 and _CANONICAL_CRC.fullmatch(data[cut + len(_TRAILER) :]) is not None


def read_doc(fs: FileLayer, path: str) -> dict[str, Any]:
    try:
        data = fs.read(path)
    except FileNotFoundError:
        raise CorruptionError(path, "missing") from None
    except OSError as e:
        raise CorruptionError(path, f"unreadable: {e}") from e
    return decode(data, path)


def write_doc(fs: FileLayer, path: str, doc: dict[str, Any], atomic: bool = True) -> None:
    """Write a document durably. `atomic=False` skips the `.mut` + rename + directory fsync:
    for files in a directory nothing references yet, whose caller syncs the directory once."""
    if atomic:
        write_durably(fs, path, [encode(doc)])
        return
    f = fs.create(path)
    try:
        f.write(encode(doc))
        f.sync()
    finally:
        f.close()


@dataclass(frozen=True)
class CheckpointInfo:
    """One manifest entry."""

    uuid: str
    step: int
    fingerprint: str
    created_at: float
    identifier: str | None = None
    parent: str | None = None
    duration_ms: float = 0.0
    total_bytes: int = 0
    new_bytes: int = 0
    rows: int = 0
    files: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CheckpointInfo:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class Manifest:
    """The checkpoints of a location, oldest first, and its head: the checkpoint "latest"
    restores (None: start from empty state). The head is the newest checkpoint of the
    timeline the state and the sinks continue; after a restore to an older checkpoint (or
    to none) the newer ones stay listed, for an explicit restore, but are off the timeline.
    A manifest written before heads existed has none recorded: its head is its newest."""

    checkpoints: list[CheckpointInfo] = field(default_factory=list)
    head: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MANIFEST_FORMAT,
            "checkpoints": [c.to_json() for c in self.checkpoints],
            "head": self.head,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any], path: str) -> Manifest:
        fmt = d.get("format")
        if not isinstance(fmt, int):
            raise CorruptionError(path, "manifest has no format version")
        if fmt > MANIFEST_FORMAT:
            raise FormatVersionError(
                f"{path}: manifest format {fmt} is newer than {MANIFEST_FORMAT}"
            )
        try:
            checkpoints = [CheckpointInfo.from_json(c) for c in d["checkpoints"]]
        except (KeyError, TypeError) as e:
            raise CorruptionError(path, f"malformed manifest entry: {e}") from e
        if "head" not in d:
            head = checkpoints[-1].uuid if checkpoints else None
        else:
            head = d["head"]
            if head is not None and not any(c.uuid == head for c in checkpoints):
                raise CorruptionError(path, f"head {head!r} is not a listed checkpoint")
        return cls(checkpoints, head)

    def find(self, ref: str) -> CheckpointInfo | None:
        """By uuid, or by identifier (the newest checkpoint with it)."""
        for c in self.checkpoints:
            if c.uuid == ref:
                return c
        for c in reversed(self.checkpoints):
            if c.identifier == ref:
                return c
        return None

    def latest(self) -> CheckpointInfo | None:
        """The head's entry: what a restore of "latest" restores."""
        return None if self.head is None else self.find(self.head)

    def lineage(self, uid: str | None) -> list[CheckpointInfo]:
        """`uid` and its listed ancestors, newest first: the checkpoints whose state the
        state after `uid` grew from, so a sink rolled back to one of their steps agrees."""
        by_id = {c.uuid: c for c in self.checkpoints}
        out: list[CheckpointInfo] = []
        while uid is not None and uid in by_id and len(out) < len(by_id):
            out.append(by_id[uid])
            uid = by_id[uid].parent
        return out

    def without(self, victims: set[str]) -> Manifest:
        """This manifest less `victims`: a survivor whose parent goes gets that parent's
        nearest surviving ancestor, and a deleted head passes to its nearest surviving
        ancestor, so lineage stays whole across deletions."""
        by_id = {c.uuid: c for c in self.checkpoints}

        def survivor(uid: str | None) -> str | None:
            seen = 0
            while uid is not None and uid in victims and uid in by_id and seen < len(by_id):
                uid, seen = by_id[uid].parent, seen + 1
            return None if uid in victims else uid

        kept = [
            replace(c, parent=survivor(c.parent)) if c.parent in victims else c
            for c in self.checkpoints
            if c.uuid not in victims
        ]
        head = survivor(self.head)
        return Manifest(kept, head if any(c.uuid == head for c in kept) else None)

    def appended(self, infos: list[CheckpointInfo]) -> Manifest:
        """This manifest with new commits, the newest of them the head."""
        if not infos:
            return self
        return Manifest([*self.checkpoints, *infos], infos[-1].uuid)
