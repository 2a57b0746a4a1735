"""The job's side of the control plane: a thread in the Spark driver process that, every
operation_poll_s, reports its run's steps and heartbeat, follows the pipeline's desired
state (pause, resume, stop, the automatic commit interval), hands the pipeline's pending
operations to a second thread that performs them between steps, and keeps the checkpoint
mirror. While the run lasts, its `view` sinks are served to the API (`ViewServer`).
Operations have their own thread because a commit or a gc waits for a step boundary, and a
partitioned step can outlast the heartbeat timeout: the heartbeat must not wait with it. It
talks to the control plane only through the `control_plane.ControlPlane` it is given (over
the database or the REST API).

Operations and what the job does:
  commit             checkpoint now (waits until locally durable); result: the checkpoint
  gc                 delete checkpoints chosen by storage_engine.retention (pins respected)
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

import tenacity

from pipeline_spec.exits import EXIT_INTERRUPTED, EXIT_RELAUNCH, EXIT_STOPPED
from pipeline_spec.offsets import written_offsets
from storage_engine import retention

from .connectors.view_sink import ViewSink
from .control_plane import (
    COMMIT,
    DELETE_CHECKPOINT,
    GC,
    RESTORE,
    STOP,
    Checkpoints,
    Claimed,
    ControlPlane,
    Desired,
    Finished,
    Opened,
    Report,
    Skipped,
)
from .runner import Runner
from .view_server import ViewServer

log = logging.getLogger("spindle.job")


class JobControl:
    def __init__(self, plane: ControlPlane, poll_s: float, heartbeat_s: float) -> None:
        self.plane = plane
        self.poll_s, self.heartbeat_s = poll_s, heartbeat_s
        self._metrics: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Claimed operations, performed one at a time, in order, by the operations thread;
        # none is claimed while one is queued or in flight.
        self._ops: queue.SimpleQueue[Claimed] = queue.SimpleQueue()
        self._idle = threading.Event()
        self._idle.set()
        self._ops_thread: threading.Thread | None = None
        # One call to the control plane at a time, its checkpoints read under it: two
        # mirrors of the same new checkpoint at once would both insert it.
        self._plane_lock = threading.Lock()
        self._parent = os.getppid()
        self.runner: Runner | None = None
        self._views: ViewServer | None = None  # the run's views, served while it runs
        # A checkpoint's metadata never changes: read once per checkpoint, not per mirror.
        # Its input tables' offsets, by uuid (none: it holds none).
        self._offsets: dict[str, dict[str, Any] | None] = {}

    # -- called by the runner's process --

    def metrics_sink(self, rec: dict[str, Any]) -> None:
        self._metrics.put(rec)

    def opened(self, runner: Runner) -> None:
        """The state is restored: report the run running, mirror the checkpoints, and start
        following commands."""
        self.runner = runner
        loc = runner.loc
        restored = loc.restored.uuid if loc.restored is not None else None
        skipped = [Skipped(c.uuid, c.reason) for c in runner.skipped]
        views = {n: s for n, s in runner.sinks.items() if isinstance(s, ViewSink)}
        if views:
            self._views = ViewServer(views)
        endpoint = None if self._views is None else self._views.endpoint
        opened = Opened(runner.step, restored, skipped, self._checkpoints(), endpoint)
        self._follow(self.plane.opened(opened))
        self._thread = threading.Thread(target=self._loop, name="spindle-control", daemon=True)
        self._ops_thread = threading.Thread(
            target=self._operations, name="spindle-operations", daemon=True
        )
        self._ops_thread.start()
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        for t in (self._ops_thread, self._thread):  # an operation's finish before the last report
            if t is not None:
                t.join(timeout=10)
        if self._views is not None:
            self._views.close()
        if self.runner is not None:
            self.plane.report(self._report(heartbeat=True, checkpoints=self._checkpoints()))

    # -- the loop --

    def _loop(self) -> None:
        last_beat = 0.0
        mirrored: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
        while not self._stop.wait(self.poll_s):
            try:
                if os.getppid() != self._parent:  # the supervisor is gone: so are we
                    log.error("supervisor process gone; stopping")
                    os._exit(EXIT_INTERRUPTED)
                now = time.monotonic()
                beat = now - last_beat >= self.heartbeat_s
                with self._plane_lock:
                    now_cps = self._mirror_key()
                    # Mirrored when the job's own policy committed or gc'd.
                    changed = self._checkpoints() if now_cps != mirrored else None
                    desired = self.plane.report(self._report(beat, changed))
                self._follow(desired)
                if beat:
                    last_beat = now
                mirrored = now_cps
                if self._idle.is_set():
                    with self._plane_lock:
                        claimed = self.plane.claim()
                    if claimed:
                        self._idle.clear()
                        for op in claimed:
                            self._ops.put(op)
            except Exception:  # the control plane may be briefly unreachable: keep trying
                log.exception("control loop")

    def _operations(self) -> None:
        while not self._stop.is_set():
            try:
                op = self._ops.get(timeout=self.poll_s)
            except queue.Empty:
                continue
            try:
                self._perform(op)
            except Exception:  # finishing it failed, again and again
                log.exception("operation %s: could not report its end", op.id)
            finally:
                if self._ops.empty():
                    self._idle.set()

    def _report(self, heartbeat: bool, checkpoints: Checkpoints | None = None) -> Report:
        """The step now and the records queued since the last report (a record with an
        `event` is a durability event; the others are steps)."""
        assert self.runner is not None
        samples: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        while True:
            try:
                rec = self._metrics.get_nowait()
            except queue.Empty:
                break
            (events if "event" in rec else samples).append(rec)
        return Report(self.runner.step, samples, events, heartbeat, checkpoints)

    def _follow(self, want: Desired) -> None:
        r = self.runner
        assert r is not None
        if want.has_policy:
            # The policy row starts as the spec's `checkpoint.every` and is what the API
            # edits: null there turns time-based commits off.
            r.checkpoints.auto_commit_s = want.auto_commit_s
        if want.exit:
            r.request_exit(EXIT_STOPPED)
        elif want.paused is not None:
            r.paused = want.paused

    def _perform(self, op: Claimed) -> None:
        r = self.runner
        assert r is not None
        result: dict[str, Any] | None = None
        error: str | None = None
        try:
            result = self._do(r, op)
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        # The control plane may be briefly unreachable; an operation never finished fails
        # when the run ends (the control plane's orphans).
        for attempt in tenacity.Retrying(
            stop=tenacity.stop_after_attempt(5),
            wait=tenacity.wait_exponential(multiplier=0.2, max=5),
            reraise=True,
        ):
            with attempt, self._plane_lock:
                self.plane.finish(op.id, Finished(result, error, self._checkpoints()))

    def _do(self, r: Runner, op: Claimed) -> dict[str, Any] | None:
        kind, params = op.kind, op.params
        if kind == COMMIT:
            h, step = r.checkpoints.request(params.get("identifier"))
            return {"checkpoint": h.wait_local(), "step": step}
        if kind in (GC, DELETE_CHECKPOINT):
            with r.step_lock:
                listed = r.loc.list_checkpoints()
                victims = retention.victims(kind, params, listed, set(op.pinned))
                res = r.loc.delete_checkpoints(victims)
                r.checkpoints.deleted()
            return retention.gc_result(res)
        if kind == RESTORE:
            uid = str(params["checkpoint"])
            if uid not in {c.uuid for c in r.loc.list_checkpoints()}:
                raise LookupError(f"no checkpoint {uid}")
            r.request_exit(EXIT_RELAUNCH)
            return None
        if kind == STOP:
            r.drain()  # no step after this one: the checkpoint is the final state
            out: dict[str, Any] = {"step": r.step}
            try:
                if params.get("checkpoint"):
                    h, out["step"] = r.checkpoints.request()
                    out["checkpoint"] = h.wait_local()
            finally:
                # Only now: the driver's exit waits for the commits and uploads asked for
                # before it, so its final mirror shows this checkpoint's upload.
                r.request_exit(EXIT_STOPPED)
            return out
        raise ValueError(f"unknown operation {kind}")

    def _mirror_key(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        assert self.runner is not None
        loc = self.runner.loc
        remote = tuple(loc.remote.checkpoints()) if loc.remote is not None else ()
        return tuple(c.uuid for c in loc.list_checkpoints()), remote

    def _checkpoints(self) -> Checkpoints:
        assert self.runner is not None
        loc = self.runner.loc
        remote = frozenset(loc.remote.checkpoints()) if loc.remote is not None else None
        listed = loc.list_checkpoints()
        known, spec = self._offsets, self.runner.spec

        def offsets_of(uuid: str) -> dict[str, Any] | None:
            if uuid in known:
                return known[uuid]
            # Mirrored per table even where a checkpoint of a one-source release holds only
            # the first table's offset.
            return written_offsets(loc.checkpoint_metadata(uuid), lambda: spec.source.table)

        self._offsets = {i.uuid: offsets_of(i.uuid) for i in listed}
        offsets = {u: o for u, o in self._offsets.items() if o is not None}
        return Checkpoints(listed, offsets, remote)


__all__ = ["JobControl"]
