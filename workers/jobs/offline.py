"""Commands for a pipeline without a live run, performed by a worker directly on the
storage location (which it locks for the duration: a run starting meanwhile waits for
nothing, it finds the location locked and the reaper retries it). Also the retention
policy's enforcement, which routes each pipeline's deletions to its live run or here."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from sqlalchemy import select

from backend.db import Database
from backend.models import Operation, OperationKind, OperationStatus, Pipeline, RetentionPolicy
from backend.services import checkpoints as cps
from backend.services import lifecycle
from backend.services import operations as ops
from backend.services.queue import TaskQueue
from backend.settings import Settings
from pipeline_spec.model import parse_spec
from pipeline_spec.offsets import count
from storage_engine import StorageLocation, retention
from storage_engine.errors import LockedError
from storage_engine.input_log import InputLog
from storage_engine.location_gc import GcResult
from storage_engine.objstore import open_object_store
from workers.runtime.dataflow_run import MANIFEST_KEY
from workers.runtime.partitioned.collection import collect_stopped


def execute(db: Database, settings: Settings, op_id: str) -> None:
    with db.session() as s:
        op = ops.claim_one(s, op_id)
        if op is None:
            return  # claimed by the job, or done
        p = s.get(Pipeline, op.pipeline_id)
        assert p is not None
        if lifecycle.live_run(s, p) is not None:
            op.status = OperationStatus.pending  # a run started: it will take the command
            op.started_at = None
            return
        kind, params, name, spec = op.kind, dict(op.params), p.name, p.spec
        pinned = cps.pinned(s, p.id)
        pipeline_id = p.id
    storage = settings.storage_dir(name)
    result: dict[str, Any] | None = None
    error: str | None = None
    requeue = False
    try:
        result = _do(storage, settings.pipeline_store_url(name), spec, kind, params, pinned)
    except LockedError:
        requeue = True  # a run has just opened the location: it takes the command
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    with db.session() as s:
        op2 = s.get(Operation, op_id)
        assert op2 is not None
        p2 = s.get(Pipeline, pipeline_id)
        assert p2 is not None
        cps.reconcile_dir(s, pipeline_id, storage)
        if requeue:
            op2.status = OperationStatus.pending
            op2.started_at = None
        elif error is not None:
            ops.fail(op2, error)
        else:
            assert result is not None
            if kind == OperationKind.restore:
                lifecycle.restore_at_next_start(p2, str(params["checkpoint"]))
            ops.succeed(op2, result)


def _do(
    storage: Path,
    remote: str | None,
    spec: dict[str, Any],
    kind: OperationKind,
    params: dict[str, Any],
    pinned: set[str],
) -> dict[str, Any]:
    if kind == OperationKind.commit:
        raise RuntimeError("the pipeline is not running: there is no live state to checkpoint")
    if kind == OperationKind.stop:
        return {"step": None}
    listing = cps.manifest(storage)
    if kind == OperationKind.restore:
        uid = str(params["checkpoint"])
        found = next((c for c in listing if c.uuid == uid), None)
        if found is None:
            raise LookupError(f"no checkpoint {uid}")
        return {"checkpoint": uid, "step": found.step, "applies": "at the next start"}
    victims = retention.victims(kind, params, listing, pinned)
    if not victims:
        return retention.gc_result(GcResult([], 0, 0))
    # With the pipeline's object store, so the mirror deletes the same checkpoints.
    store = open_object_store(remote) if remote else None
    # At its head ("latest"), not "none": opening at none moves the head durably, and the
    # pipeline's next start would restore nothing.
    loc = StorageLocation.open(
        str(storage), checkpoint="latest", check_fingerprint=False, remote=store
    )
    try:
        gone = [loc.checkpoint_metadata(u).get(MANIFEST_KEY) for u in victims]
        res = loc.delete_checkpoints(victims)
        remaining = loc.list_checkpoints()
        left = [loc.checkpoint_metadata(c.uuid).get(MANIFEST_KEY) for c in remaining]
        if any(gone) or any(left):
            # A partitioned pipeline's: the shards' checkpoints only those named too.
            collect_stopped(str(storage), store, [m for m in left if m], [m for m in gone if m])
        if remaining:
            # The input logs are needed from the oldest checkpoint's offsets on.
            parsed = parse_spec(spec)
            offsets = parsed.offsets(loc.checkpoint_metadata(remaining[0].uuid))
            for logged in parsed.input_logs():
                log_dir = logged.log_dir(storage)
                if os.path.exists(log_dir):
                    InputLog(log_dir, logged.arrow_schema()).truncate_below(
                        count(offsets[logged.table])
                    )
    finally:
        loc.close()
    return retention.gc_result(res)


def enforce_retention(db: Database, settings: Settings, queue: TaskQueue) -> list[str]:
    """Create a gc operation for every pipeline with expired checkpoints; returns their ids."""
    created = []
    now = time.time()
    with db.session() as s:
        for p, pol in s.execute(select(Pipeline, RetentionPolicy).join(RetentionPolicy)).all():
            live = lifecycle.live_run(s, p) is not None
            if not live:
                cps.reconcile_dir(s, p.id, settings.storage_dir(p.name))
            rows = cps.rows(s, p.id)
            cands = [retention.Candidate(r.uuid, r.created_at.timestamp(), r.pinned) for r in rows]
            policy = retention.Policy(pol.keep_last, pol.max_age_s, pol.min_keep)
            victims = retention.expired(cands, policy, now)
            if not victims:
                continue
            if s.scalar(
                select(Operation.id).where(
                    Operation.pipeline_id == p.id,
                    Operation.kind == OperationKind.gc,
                    Operation.status.in_(ops.OPEN),
                )
            ):
                continue  # the previous round has not finished
            op = ops.create(s, p, OperationKind.gc, {"uuids": victims, "reason": "retention"})
            created.append((op.id, live))
    for op_id, live in created:
        if not live:
            queue.execute(op_id)
    return [op_id for op_id, _ in created]


__all__ = ["enforce_retention", "execute"]
