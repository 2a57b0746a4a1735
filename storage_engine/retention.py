"""Which checkpoints to delete: for a gc request and for the retention policy. Pure
functions of the checkpoint list, so the job (live location) and a worker (stopped
pipeline) decide identically. Never selected: pinned checkpoints and the newest checkpoint
(what a crashed run resumes from)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .location_gc import GcResult
from .manifest import CheckpointInfo

# The operation that names one checkpoint to delete; every other deletion is a gc.
DELETE_CHECKPOINT = "delete_checkpoint"


@dataclass(frozen=True)
class Candidate:
    uuid: str
    created_at: float  # unix seconds
    pinned: bool


@dataclass(frozen=True)
class Policy:
    keep_last: int | None = None
    max_age_s: float | None = None
    min_keep: int = 1


def _deletable(cps: Sequence[Candidate]) -> list[Candidate]:
    return [c for c in cps[:-1] if not c.pinned]


def for_gc(cps: Sequence[Candidate], keep: int | None) -> list[str]:
    """Oldest first. keep=None: the oldest unpinned checkpoint; else delete the oldest
    unpinned ones until `keep` checkpoints remain (pinned ones count and stay)."""
    cands = _deletable(cps)
    if keep is None:
        return [c.uuid for c in cands[:1]]
    excess = max(len(cps) - keep, 0)
    return [c.uuid for c in cands[:excess]]


def expired(cps: Sequence[Candidate], policy: Policy, now: float) -> list[str]:
    """Checkpoints beyond the newest keep_last or older than max_age, oldest first, while at
    least min_keep checkpoints remain."""
    n = len(cps)
    out: list[str] = []
    for i, c in enumerate(cps[:-1]):
        if c.pinned:
            continue
        too_many = policy.keep_last is not None and n - i > policy.keep_last
        too_old = policy.max_age_s is not None and now - c.created_at > policy.max_age_s
        if (too_many or too_old) and n - len(out) > policy.min_keep:
            out.append(c.uuid)
    return out


def candidates(infos: Sequence[CheckpointInfo], pinned: set[str]) -> list[Candidate]:
    return [Candidate(i.uuid, i.created_at, i.uuid in pinned) for i in infos]


def victims(
    kind: str, params: dict[str, Any], infos: Sequence[CheckpointInfo], pins: set[str]
) -> list[str]:
    """The checkpoints a gc or delete operation (`kind`) removes, decided on the manifest
    at the time it runs (by the job or a worker alike): one named checkpoint (never a
    pinned one), the retention policy's choice re-checked against pins and the newest, or
    `for_gc`."""
    if kind == DELETE_CHECKPOINT:
        uid = str(params["checkpoint"])
        if uid in pins:
            raise ValueError(f"checkpoint {uid} is pinned; unpin it first")
        return [uid]
    cands = candidates(infos, pins)
    if "uuids" in params:
        allowed = {c.uuid for c in cands[:-1] if not c.pinned}
        return [u for u in params["uuids"] if u in allowed]
    return for_gc(cands, params.get("keep"))


def gc_result(res: GcResult) -> dict[str, Any]:
    """A gc or delete operation's result."""
    return {
        "deleted": res.deleted,
        "files_removed": res.files_removed,
        "bytes_freed": res.bytes_freed,
    }


__all__ = [
    "DELETE_CHECKPOINT",
    "Candidate",
    "Policy",
    "candidates",
    "expired",
    "for_gc",
    "gc_result",
    "victims",
]
