"""The job's side of the control plane: a thread in the Spark driver process that, every
operation_poll_s, heartbeats its run, follows the pipeline's desired state (pause, resume,
stop), performs the pipeline's pending operations between steps, and writes the steps'
metrics and the checkpoint mirror to the database.

Operations and what the job does:
  commit             checkpoint now (waits until locally durable); result: the checkpoint
  gc                 delete checkpoints chosen by backend.services.retention (pins respected)
  delete_checkpoint  delete one (not if pinned)
  restore            check the checkpoint exists, then exit with EXIT_RELAUNCH: the
                     supervisor starts a run from it, which completes the operation
  stop               optionally checkpoint, then exit with EXIT_STOPPED
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from typing import Any

from sqlalchemy import select, update

from backend.db import Database
from backend.models import (
    DesiredState,
    MetricSample,
    Operation,
    OperationKind,
    OperationStatus,
    Pipeline,
    PipelineState,
    Run,
    RunState,
    utcnow,
)
from backend.services import checkpoints as cps
from backend.services import lifecycle, metrics
from backend.services import operations as ops
from backend.settings import Settings
from pipeline_spec.exits import EXIT_INTERRUPTED, EXIT_RELAUNCH, EXIT_STOPPED

from .runner import Runner

log = logging.getLogger("spindle.job")

_METRIC_FIELDS = {c.name for c in MetricSample.__table__.columns} - {
    "id",
    "pipeline_id",
    "run_id",
    "resolution_s",
}


# Durability events that leave the pipeline in trouble (`workers.durability`).
_PROBLEMS = ("commit_failed", "upload_failed", "remote_unavailable", "fenced")


class JobControl:
    def __init__(self, db: Database, settings: Settings, run_id: int) -> None:
        self.db = db
        self.settings = settings
        self.run_id = run_id
        with db.session() as s:
            run = s.get(Run, run_id)
            if run is None:
                raise LookupError(f"no run {run_id}")
            self.pipeline_id = run.pipeline_id
        self._metrics: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._parent = os.getppid()
        self.runner: Runner | None = None

    # -- called by the runner's process --

    def metrics_sink(self, rec: dict[str, Any]) -> None:
        self._metrics.put(rec)

    def opened(self, runner: Runner) -> None:
        """The state is restored: mark the run running, mirror the checkpoints, and start
        following commands."""
        self.runner = runner
        loc = runner.loc
        with self.db.session() as s:
            run = s.get(Run, self.run_id)
            assert run is not None
            restored = loc.restored.uuid if loc.restored is not None else None
            lifecycle.run_opened(s, run, runner.step, restored)
            run.pid = os.getpid()
            self._sync_checkpoints(s)
            # A restore that asked for this run is done once its checkpoint is live.
            for op in s.scalars(
                select(Operation).where(
                    Operation.pipeline_id == self.pipeline_id,
                    Operation.kind == OperationKind.restore,
                    Operation.status == OperationStatus.running,
                )
            ):
                if restored == op.params.get("checkpoint"):
                    ops.succeed(op, {"checkpoint": restored, "step": runner.step})
                elif runner.skipped and runner.skipped[0].uuid == op.params.get("checkpoint"):
                    ops.fail(
                        op,
                        f"checkpoint {runner.skipped[0].uuid} is corrupt "
                        f"({runner.skipped[0].reason}); restored {restored} instead "
                        "(checkpoint.on_corruption: fallback)",
                    )
                elif op.started_at is not None and run.created_at > op.started_at:
                    # Started after the restore was asked for, from another checkpoint: no
                    # run will open the one it names now.
                    ops.fail(op, f"superseded: run {run.number} started from {restored}")
            self._apply_desired(s)
        self._thread = threading.Thread(target=self._loop, name="spindle-control", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self.db.session() as s:
            self._flush_metrics(s)
            if self.runner is not None:
                self._heartbeat(s)
                self._sync_checkpoints(s)

    # -- the loop --

    def _loop(self) -> None:
        last_beat = 0.0
        last_policy = 0.0
        mirrored: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
        while not self._stop.wait(self.settings.operation_poll_s):
            try:
                if os.getppid() != self._parent:  # the supervisor is gone: so are we
                    log.error("supervisor process gone; stopping")
                    os._exit(EXIT_INTERRUPTED)
                with self.db.session() as s:
                    self._flush_metrics(s)
                    now = time.monotonic()
                    if now - last_beat >= self.settings.heartbeat_s:
                        self._heartbeat(s)
                        last_beat = now
                    if now - last_policy >= 2.0:
                        self._policy(s)
                        last_policy = now
                    self._apply_desired(s)
                    assert self.runner is not None
                    now_cps = self._mirror_key()
                    if now_cps != mirrored:  # the job's own policy committed or gc'd
                        self._sync_checkpoints(s)
                        mirrored = now_cps
                for op_id in self._claim():
                    self._perform(op_id)
            except Exception:  # the database may be briefly unavailable: keep trying
                log.exception("control loop")

    def _heartbeat(self, s: Any) -> None:
        assert self.runner is not None
        s.execute(
            update(Run)
            .where(Run.id == self.run_id)
            .values(heartbeat_at=utcnow(), last_step=self.runner.step)
        )

    def _policy(self, s: Any) -> None:
        assert self.runner is not None
        p = s.get(Pipeline, self.pipeline_id)
        # The policy row starts as the spec's `checkpoint.every` and is what the API edits:
        # null there turns time-based commits off.
        if p is not None and p.retention is not None:
            self.runner.auto_commit_s = p.retention.auto_commit_interval_s

    def _apply_desired(self, s: Any) -> None:
        assert self.runner is not None
        p = s.get(Pipeline, self.pipeline_id)
        if p is None:
            self.runner.request_exit(EXIT_STOPPED)
            return
        want = p.desired_state
        if want == DesiredState.stopped:
            # A stop operation, if any, is claimed and performed by the loop first.
            if not ops.pending_ids(s, self.pipeline_id):
                self.runner.request_exit(EXIT_STOPPED)
            return
        paused = want == DesiredState.paused
        self.runner.paused = paused
        run = s.get(Run, self.run_id)
        if run is not None and run.state == RunState.running:
            p.state = PipelineState.paused if paused else PipelineState.running

    def _flush_metrics(self, s: Any) -> None:
        rows = []
        events = []
        while True:
            try:
                rec = self._metrics.get_nowait()
            except queue.Empty:
                break
            if "event" in rec:
                events.append(rec)
                continue
            rows.append(
                MetricSample(
                    pipeline_id=self.pipeline_id,
                    run_id=self.run_id,
                    resolution_s=0,
                    **{k: v for k, v in rec.items() if k in _METRIC_FIELDS},
                )
            )
        if rows:
            s.add_all(rows)
            metrics.add_totals(
                s,
                self.pipeline_id,
                steps=len(rows),
                rows_in=sum(r.rows_in or 0 for r in rows),
                rows_out=sum(r.rows_out or 0 for r in rows),
                dead_letters=sum(r.dead_letters or 0 for r in rows),
            )
        if events:
            self._durability_events(s, events)

    def _durability_events(self, s: Any, events: list[dict[str, Any]]) -> None:
        """The run's durability events (`workers.durability`): counted, and the newest
        problem shown on the pipeline until a checkpoint is durable again."""
        kinds = [e["event"] for e in events]
        metrics.add_totals(
            s,
            self.pipeline_id,
            commit_failures=kinds.count("commit_failed"),
            upload_failures=kinds.count("upload_failed"),
            fencings=kinds.count("fenced"),
        )
        p = s.get(Pipeline, self.pipeline_id)
        if p is None:
            return
        for e in events:
            if e["event"] in ("durable", "remote_available"):
                p.durability_error = p.durability_error_at = None
            elif e["event"] in _PROBLEMS:
                p.durability_error = str(e.get("message", e["event"]))[:2000]
                p.durability_error_at = utcnow()

    def _claim(self) -> list[str]:
        with self.db.session() as s:
            return [op.id for op in ops.claim(s, self.pipeline_id)]

    def _perform(self, op_id: str) -> None:
        r = self.runner
        assert r is not None
        with self.db.session() as s:
            op = s.get(Operation, op_id)
            assert op is not None
            kind, params = op.kind, dict(op.params)
            pinned = cps.pinned(s, self.pipeline_id)
        result: dict[str, Any] | None = None
        error: str | None = None
        try:
            result = self._do(r, kind, params, pinned)
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        with self.db.session() as s:
            op = s.get(Operation, op_id)
            assert op is not None
            self._sync_checkpoints(s)
            if error is not None:
                ops.fail(op, error)
            elif result is not None:
                ops.succeed(op, result)
            # result None: a restore, completed by the run that opens the checkpoint

    def _do(
        self, r: Runner, kind: OperationKind, params: dict[str, Any], pinned: set[str]
    ) -> dict[str, Any] | None:
        if kind == OperationKind.commit:
            h, step = r.checkpoint_async(params.get("identifier"))
            return {"checkpoint": h.wait_local(), "step": step}
        if kind in (OperationKind.gc, OperationKind.delete_checkpoint):
            with r.step_lock:
                victims = cps.victims(kind, params, r.loc.list_checkpoints(), pinned)
                res = r.loc.delete_checkpoints(victims)
                r.checkpoints_deleted()
            return cps.gc_result(res)
        if kind == OperationKind.restore:
            uid = str(params["checkpoint"])
            if uid not in {c.uuid for c in r.loc.list_checkpoints()}:
                raise LookupError(f"no checkpoint {uid}")
            r.request_exit(EXIT_RELAUNCH)
            return None
        if kind == OperationKind.stop:
            r.drain()  # no step after this one: the checkpoint is the final state
            r.request_exit(EXIT_STOPPED)
            out: dict[str, Any] = {"step": r.step}
            if params.get("checkpoint"):
                h, out["step"] = r.checkpoint_async()
                out["checkpoint"] = h.wait_local()
            return out
        raise ValueError(f"unknown operation {kind}")

    def _mirror_key(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        assert self.runner is not None
        loc = self.runner.loc
        remote = tuple(loc.remote.checkpoints()) if loc.remote is not None else ()
        return tuple(c.uuid for c in loc.list_checkpoints()), remote

    def _sync_checkpoints(self, s: Any) -> None:
        assert self.runner is not None
        loc = self.runner.loc
        remote = set(loc.remote.checkpoints()) if loc.remote is not None else None
        cps.reconcile(s, self.pipeline_id, loc.list_checkpoints(), loc.checkpoint_metadata, remote)


__all__ = ["JobControl"]
