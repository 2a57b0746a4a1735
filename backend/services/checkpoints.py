"""The database's mirror of a pipeline's checkpoint manifest. The manifest is the truth:
`reconcile` makes the rows match it (adding, updating, deleting), keeping only the
control plane's own field, `pinned`. The job reconciles after each commit and gc; a
worker reconciles at run start and the reaper for stopped pipelines."""

from __future__ import annotations

import datetime as dt
import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from pipeline_spec.model import SpecError, parse_spec
from pipeline_spec.offsets import written_offsets
from storage_engine.errors import StorageError
from storage_engine.fileio import PosixFileLayer
from storage_engine.location_view import list_checkpoints
from storage_engine.manifest import CHECKPOINT_META, CheckpointInfo, read_doc

from ..models import Checkpoint, Pipeline
from . import metrics


def reconcile(
    s: Session,
    pipeline_id: int,
    infos: Sequence[CheckpointInfo],
    metadata: Callable[[str], dict[str, Any]] | None = None,
    remote_durable: set[str] | None = None,
) -> list[Checkpoint]:
    """Make the rows equal `infos` (oldest first); returns them in that order."""
    rows = {
        r.uuid: r
        for r in s.scalars(select(Checkpoint).where(Checkpoint.pipeline_id == pipeline_id))
    }
    keep = {i.uuid for i in infos}
    gone = [u for u in rows if u not in keep]
    if gone:
        s.execute(
            delete(Checkpoint).where(
                Checkpoint.pipeline_id == pipeline_id, Checkpoint.uuid.in_(gone)
            )
        )
    out = []
    committed: list[float] = []  # the new checkpoints' commit durations, seconds
    first_table = _first_table(s, pipeline_id)
    for i in infos:
        row = rows.get(i.uuid)
        if row is None:
            row = Checkpoint(pipeline_id=pipeline_id, uuid=i.uuid, pinned=False)
            s.add(row)
            committed.append(i.duration_ms / 1000)
            if metadata is not None:
                offsets = written_offsets(metadata(i.uuid), first_table)
                if offsets is not None and all(
                    isinstance(k, str) and _is_offset(v) for k, v in offsets.items()
                ):
                    row.source_offsets = offsets
        row.identifier = i.identifier
        row.step = i.step
        row.parent = i.parent
        row.created_at = dt.datetime.fromtimestamp(i.created_at, dt.UTC)
        row.size_bytes = i.total_bytes
        row.new_bytes = i.new_bytes
        row.duration_ms = i.duration_ms
        row.local_durable = True
        if remote_durable is not None:
            row.remote_durable = i.uuid in remote_durable
        out.append(row)
    s.flush()
    metrics.observe(s, pipeline_id, "commit", committed)
    return out


def _first_table(s: Session, pipeline_id: int) -> Callable[[], str | None]:
    """The name of the pipeline's first input table, which a checkpoint of a one-source
    release holds the only offset of; its spec is read when first asked (None: a spec
    this release does not take, whose offsets cannot be placed)."""

    @functools.cache
    def name() -> str | None:
        p = s.get(Pipeline, pipeline_id)
        try:
            return parse_spec(p.spec).source.table if p is not None else None
        except SpecError:
            return None

    return name


def manifest(storage: Path) -> list[CheckpointInfo]:
    """The checkpoints of a storage location on disk, oldest first, read without opening
    (locking) it; empty if it does not exist yet."""
    return list(list_checkpoints(storage).checkpoints) if storage.exists() else []


def reconcile_dir(s: Session, pipeline_id: int, storage: Path) -> list[Checkpoint]:
    """Reconcile from a storage location on disk."""

    def meta(uid: str) -> dict[str, Any]:
        try:
            doc = read_doc(PosixFileLayer(), os.path.join(storage, uid, CHECKPOINT_META))
        except StorageError:  # a damaged checkpoint is `spindle storage validate`'s business
            return {}
        m = doc.get("metadata", {})
        return m if isinstance(m, dict) else {}

    return reconcile(s, pipeline_id, manifest(storage), meta)


def rows(s: Session, pipeline_id: int) -> list[Checkpoint]:
    return list(
        s.scalars(
            select(Checkpoint)
            .where(Checkpoint.pipeline_id == pipeline_id)
            .order_by(Checkpoint.step, Checkpoint.created_at)
        )
    )


def pinned(s: Session, pipeline_id: int) -> set[str]:
    return set(
        s.scalars(
            select(Checkpoint.uuid).where(
                Checkpoint.pipeline_id == pipeline_id, Checkpoint.pinned.is_(True)
            )
        )
    )


def _is_offset(v: object) -> bool:
    """A count, or a Kafka table's offsets per partition (`pipeline_spec.offsets`)."""
    if isinstance(v, dict):
        return all(isinstance(p, str) and type(n) is int for p, n in v.items())
    return type(v) is int


__all__ = [
    "manifest",
    "pinned",
    "reconcile",
    "reconcile_dir",
    "rows",
]
