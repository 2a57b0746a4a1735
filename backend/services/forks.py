"""Forks: a new pipeline from another's retained checkpoint (`POST /pipelines/{name}/fork`).

The storage is the engine's (`storage_engine.forks`): the fork's location gets one checkpoint
equal to the origin's, its files shared by hard link and its objects borrowed in the object
store, nothing copied. This module decides what the control plane allows and records:

- the fork's spec is the origin's (renamed) unless another is given; operators it changes
  start empty on the fork's first run (`drop_state: *`, the restart mechanism of a changed
  query: `workers/runtime/restore.py`), the others keep their state;
- a fork may not write where its origin's sinks write (a files or Delta path, a Postgres
  table, a Kafka topic): its first run rolls its sinks back to the checkpoint's step, which
  would undo the origin's output;
- partitioned pipelines (parallelism above 1) are not forked: their state is in shards.
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path
from typing import Any

from pipeline_spec.model import PipelineSpec, SpecError, parse_spec
from storage_engine.errors import CheckpointNotFoundError, StorageError
from storage_engine.forks import ForkError, ForkResult, delete_prefix, fork_location
from storage_engine.location_view import list_checkpoints
from storage_engine.objstore import ObjectStoreLike, open_object_store

from ..errors import Conflict, InvalidInput, InvalidSpec, NotFound
from ..models import Pipeline
from ..settings import Settings
from . import views

# How long a fork waits for a checkpoint just taken to reach the object store.
UPLOAD_WAIT_S = 30.0
# `drop_state` naming every operator whose state no longer fits (workers.runtime.restore).
DROP_ALL = "*"
# The sink fields that say where it writes (the others say how).
_TARGET_FIELDS = ("path", "dsn", "table", "bootstrap_servers", "topic")


def fork_spec(origin: Pipeline, name: str, spec: dict[str, Any] | None) -> dict[str, Any]:
    """The fork's spec document: `spec` (its name the fork's, or absent) or the origin's."""
    doc = copy.deepcopy(spec if spec is not None else origin.spec)
    if spec is not None and doc.get("name", name) != name:
        raise InvalidSpec(
            "the spec's name is the fork's name",
            errors=[("spec.name", f"must be {name!r} (or absent)")],
        )
    doc["name"] = name
    return doc


def check(origin: Pipeline, spec: PipelineSpec) -> None:
    """What a fork's spec may not do (see the module docstring)."""
    if spec.parallelism != 1 or origin.spec.get("parallelism", 1) != 1:
        raise InvalidInput(
            "partitioned pipelines (parallelism above 1) cannot be forked",
            errors=[("spec.parallelism", "forks run at parallelism 1")],
        )
    try:
        theirs = {_target(s) for s in parse_spec(origin.spec).sinks} - {None}
    except SpecError:
        return  # a spec an older release stored: nothing to compare
    shared = [
        (f"spec.sinks[{i}]", f"{s.kind} sink {s.name!r} writes where the origin's does")
        for i, s in enumerate(spec.sinks)
        if _target(s) in theirs
    ]
    if shared:
        raise InvalidSpec(
            "a fork must not write into its origin's sinks (its first run would roll them "
            "back to the checkpoint's step): give each its own path, table or topic",
            errors=shared,
        )


def _target(sink: Any) -> tuple[Any, ...] | None:
    fields = [(f, getattr(sink, f)) for f in _TARGET_FIELDS if hasattr(sink, f)]
    if not fields:
        return None  # view and discard sinks write nowhere outside the pipeline
    return tuple((f, os.path.normpath(v) if f == "path" else v) for f, v in fields)


def _stores(settings: Settings, origin: str, fork: str) -> tuple[ObjectStoreLike | None, ...]:
    """The two prefixes when the origin's state is mirrored in the object store."""
    ours, theirs = settings.pipeline_store_url(origin), settings.pipeline_store_url(fork)
    if ours is None or theirs is None:
        return None, None
    store = open_object_store(ours)
    if not store.list("manifests/"):
        return None, None  # never mirrored: the fork's first run uploads its own
    return store, open_object_store(theirs)


def fork_storage(settings: Settings, origin: Pipeline, name: str, ref: str) -> ForkResult:
    """The fork's storage location (and object-store prefix) from the origin's checkpoint
    `ref` (a uuid, an identifier, a step or `latest`)."""
    storage = settings.storage_dir(origin.name)
    if not storage.is_dir():  # it never ran
        raise _unknown(origin, storage, ref)
    try:
        uid = views.checkpoint_of(storage, ref)
    except NotFound:
        raise _unknown(origin, storage, ref) from None
    origin_store, fork_store = _stores(settings, origin.name, name)
    target = settings.storage_dir(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        return fork_location(
            str(storage),
            str(target),
            uid,
            origin_store=origin_store,
            fork_store=fork_store,
            upload_wait_s=UPLOAD_WAIT_S,
        )
    except CheckpointNotFoundError:
        raise _unknown(origin, storage, ref) from None
    except ForkError as e:
        raise Conflict(str(e), errors=[("checkpoint", "cannot be forked now")]) from None
    except StorageError as e:
        raise Conflict(f"the origin's storage cannot be forked: {e}") from None


def _unknown(origin: Pipeline, storage: Path, ref: str) -> NotFound:
    retained = list_checkpoints(storage).checkpoints if storage.is_dir() else []
    listed = ", ".join(
        f"{c.uuid} (step {c.step}{', ' + c.identifier if c.identifier else ''})"
        for c in retained[-20:]
    )
    return NotFound(
        f"pipeline {origin.name!r} has no retained checkpoint {ref!r}; retained: "
        f"{listed or 'none'}",
        errors=[("checkpoint", "no such retained checkpoint")],
    )


def discard_storage(settings: Settings, name: str) -> None:
    """Undo `fork_storage` (the fork was not registered after all)."""
    shutil.rmtree(settings.storage_dir(name), ignore_errors=True)
    url = settings.pipeline_store_url(name)
    if url:
        delete_prefix(open_object_store(url))


__all__ = ["DROP_ALL", "check", "discard_storage", "fork_spec", "fork_storage"]
