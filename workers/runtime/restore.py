"""Opening a run's state: the checkpoint asked for, or, when it is corrupt and the spec's
`checkpoint.on_corruption` is `fallback`, the newest intact checkpoint of its timeline.

A restore that can never succeed (a corrupt checkpoint without fallback, a checkpoint taken
by another circuit, one that does not exist) raises `StateError`: the driver exits with
`EXIT_STATE` at once and the control plane does not retry it, as a restart would only
restore the same checkpoint again. Only ancestors are candidates: a sink rolled back to an
ancestor's step agrees with it, to another branch's step it would not.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from storage_engine import EngineSettings, StorageLocation
from storage_engine.circuit import Stepper
from storage_engine.circuit.circuit import FINGERPRINTS_KEY
from storage_engine.errors import (
    CheckpointNotFoundError,
    CorruptionError,
    FingerprintMismatchError,
)
from storage_engine.location_view import list_checkpoints
from storage_engine.manifest import MANIFEST, Manifest
from storage_engine.objstore import ObjectStoreLike

log = logging.getLogger("spindle.runner")


class StateError(Exception):
    """The run's state cannot be restored, and retrying will not change that."""


@dataclass(frozen=True)
class Skipped:
    """A checkpoint a fallback passed over."""

    uuid: str
    step: int
    reason: str


# Opens the location at a checkpoint (read-only to probe) and restores every operator on it.
Opener = Callable[[str, bool], StorageLocation]


def open_state(
    path: str, checkpoint: str, opener: Opener, fallback: bool
) -> tuple[StorageLocation, list[Skipped]]:
    """The location opened at `checkpoint` ("latest", "none", a uuid or an identifier),
    and the checkpoints skipped on the way (empty unless one was corrupt)."""
    try:
        return opener(checkpoint, False), []
    except (FingerprintMismatchError, CheckpointNotFoundError) as e:
        raise StateError(str(e)) from e
    except CorruptionError as e:
        failed = e
    manifest = _manifest(path)
    asked = manifest.latest() if checkpoint == "latest" else manifest.find(checkpoint)
    if asked is None:
        raise StateError(f"the storage location cannot be opened: {failed}") from failed
    skipped = [Skipped(asked.uuid, asked.step, str(failed))]
    for c in manifest.lineage(asked.uuid)[1:]:
        try:
            loc = opener(c.uuid, not fallback)
        except (CorruptionError, FingerprintMismatchError) as e:
            skipped.append(Skipped(c.uuid, c.step, str(e)))
            continue
        if fallback:
            for s in skipped:
                log.warning(
                    "checkpoint %s (step %d) skipped: %s; restored %s (step %d) instead",
                    s.uuid,
                    s.step,
                    s.reason,
                    c.uuid,
                    c.step,
                )
            return loc, skipped
        loc.close()
        raise StateError(
            f"checkpoint {asked.uuid} (step {asked.step}) is corrupt: {failed}. The newest "
            f"intact checkpoint of its timeline is {c.uuid} (step {c.step}): start from it "
            "(--from-checkpoint), or set checkpoint.on_corruption: fallback"
        ) from failed
    raise StateError(
        f"checkpoint {asked.uuid} (step {asked.step}) is corrupt: {failed}; no older "
        "checkpoint of its timeline is intact: start from none"
    ) from failed


# The spine of a view sink (`workers/runtime/connectors/view_sink.py`): this and its name.
VIEW_SPINE = "view."
# `drop_state` holding this: every operator whose state does not fit starts empty.
DROP_ALL = "*"


def open_circuit_state(
    storage: str,
    circuit: Stepper,
    from_checkpoint: str,
    *,
    drop_state: Collection[str] = (),
    view_sinks: Mapping[str, str] | None = None,
    remote: ObjectStoreLike | None,
    fallback: bool,
    settings: EngineSettings | None = None,
) -> tuple[StorageLocation, list[Skipped]]:
    """`open_state` of a run's storage location (with the engine's `settings`), with
    `circuit`'s operators opened on it.
    On a machine without the local copy, the location is restored from the object store
    (`remote`) first. An operator whose state in the checkpoint no longer fits (a changed
    query: `Stepper.changed_operators`) starts empty if `drop_state` names it (or holds
    `DROP_ALL`); the others keep theirs. Otherwise the restore is refused, naming them.
    A view sink (`view_sinks`: sink name -> its view) over a view whose query changed
    starts empty: its rows were integrated from the old query, which the dropped operators
    would never retract."""

    def opener(checkpoint: str, read_only: bool) -> StorageLocation:
        loc = StorageLocation.open(
            storage,
            fingerprint=circuit.fingerprint,
            checkpoint=checkpoint,
            check_fingerprint=False,
            read_only=read_only,
            settings=settings,
            remote=None if read_only else remote,
            from_remote=not read_only and remote is not None and restorable_from(remote, storage),
        )
        try:
            drop = _state_to_drop(loc, circuit, drop_state)
            if loc.restored is not None and view_sinks:
                changed = set(circuit.changed_views(loc.metadata))
                loc.start_empty(f"{VIEW_SPINE}{s}" for s, v in view_sinks.items() if v in changed)
            circuit.open(loc, drop)
        except BaseException:
            loc.close()
            raise
        return loc

    return open_state(storage, from_checkpoint, opener, fallback)


def _state_to_drop(
    loc: StorageLocation, circuit: Stepper, drop_state: Collection[str]
) -> list[str]:
    """The operators that start empty; FingerprintMismatchError if one that must is not
    in `drop_state`."""
    info = loc.restored
    if info is None:
        return []
    changed = circuit.changed_operators(info.fingerprint, loc.metadata)
    refused = [] if DROP_ALL in drop_state else [i for i in changed if i not in drop_state]
    if refused:
        raise FingerprintMismatchError(
            f"the pipeline changed since checkpoint {info.uuid} (step {info.step}): the state "
            f"of {', '.join(refused)} no longer fits the query (new or changed operators, "
            "or ones reading a changed one). Start with their state dropped (drop_state: "
            "they start empty and see only input after that step; the other operators keep "
            "theirs), or from no checkpoint"
        )
    return changed


@dataclass(frozen=True)
class StateReport:
    """What a restore did with each operator's state (the run's `restored` metrics record):
    `kept` restored from the checkpoint, `dropped` there but no longer fitting (started
    empty, as `drop_state` allowed), `new` not in the checkpoint (started empty);
    `views`: those whose query changed (their view sinks started empty)."""

    checkpoint: str | None
    step: int
    kept: list[str]
    dropped: list[str]
    new: list[str]
    views: list[str]


def state_report(loc: StorageLocation, circuit: Stepper) -> StateReport:
    """The report of a location opened by `open_circuit_state` for `circuit`."""
    info = loc.restored
    ops = [op.id for op in circuit.operators]
    if info is None:
        return StateReport(None, 0, [], [], ops, [])
    saved = loc.metadata.get(FINGERPRINTS_KEY)
    changed = circuit.changed_operators(info.fingerprint, loc.metadata)
    had = set(ops) if saved is None else set(saved)
    return StateReport(
        info.uuid,
        info.step,
        kept=[i for i in ops if i not in changed],
        dropped=[i for i in changed if i in had],
        new=[i for i in changed if i not in had],
        views=circuit.changed_views(loc.metadata),
    )


def restorable_from(remote: ObjectStoreLike, storage: str) -> bool:
    """True if `storage` has no checkpoints of its own but the object store has some."""
    if os.path.exists(os.path.join(storage, MANIFEST)):
        return False
    return bool(remote.list("manifests/"))


def _manifest(path: str) -> Manifest:
    """The location's manifest, read without opening (locking) it; empty if unreadable."""
    if not os.path.isdir(path):
        return Manifest()
    listing = list_checkpoints(path)  # reports a damaged manifest, never raises for it
    return Manifest(listing.checkpoints, listing.head)


__all__ = [
    "DROP_ALL",
    "Skipped",
    "StateError",
    "StateReport",
    "open_circuit_state",
    "open_state",
    "restorable_from",
    "state_report",
]
