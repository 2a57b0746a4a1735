"""Asynchronous commit: handles, and the thread that writes checkpoints in request order.

MiSA's ordering rules (seed 001), as this module enforces them:
- a checkpoint captures exactly the state at the step it was requested at: the request takes
  an immutable snapshot of every spine (batches are immutable, so this is cheap);
- commits are written in request order, by one thread, so a commit starts only after the
  previous one is locally durable (or has failed); requests that queued up meanwhile are
  written together and made durable by one manifest replace (a group commit);
- the next steps never wait for a commit unless `max_pending_commits` requests are queued
  (backpressure), and never see its effects: it only reads its snapshot.

Each handle reports two acknowledgements: local durable (the manifest names the checkpoint)
and, with an object store configured, remote durable (the remote manifest names it).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from .errors import StorageError

J = TypeVar("J")

CommitState = Literal["pending", "local_durable", "remote_durable", "failed", "remote_failed"]


@dataclass
class CommitHandle:
    """The progress of one requested checkpoint. Thread-safe; poll or wait."""

    step: int
    identifier: str | None
    remote_expected: bool
    requested_at: float = field(default_factory=time.perf_counter)
    uuid: str | None = None
    local_ms: float | None = None
    remote_ms: float | None = None
    error: BaseException | None = None
    remote_error: BaseException | None = None
    _local: threading.Event = field(default_factory=threading.Event, repr=False)
    _remote: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def state(self) -> CommitState:
        if self.error is not None:
            return "failed"
        if self.remote_error is not None:
            return "remote_failed"
        if self._remote.is_set() and self.remote_expected:
            return "remote_durable"
        if self._local.is_set():
            return "local_durable"
        return "pending"

    @property
    def upload_ms(self) -> float | None:
        """How long the checkpoint took from locally durable to named by the remote
        manifest (waiting behind earlier uploads included); None without a finished
        upload."""
        if self.state != "remote_durable" or self.local_ms is None or self.remote_ms is None:
            return None
        return self.remote_ms - self.local_ms

    @property
    def done(self) -> bool:
        """True once nothing more will happen to this handle."""
        return self._remote.is_set()

    def wait_local(self, timeout: float | None = None) -> str:
        """The checkpoint's uuid once it is locally durable; raises if the commit failed."""
        if not self._local.wait(timeout):
            raise TimeoutError(f"commit of step {self.step} not locally durable after {timeout}s")
        if self.error is not None:
            raise self.error
        assert self.uuid is not None
        return self.uuid

    def wait_remote(self, timeout: float | None = None) -> str:
        """The uuid once the remote manifest names the checkpoint (or at once without a
        remote); raises if the commit or its upload failed for good."""
        uid = self.wait_local(timeout)
        if not self._remote.wait(timeout):
            raise TimeoutError(f"checkpoint {uid} not remote durable after {timeout}s")
        if self.remote_error is not None:
            raise self.remote_error
        return uid

    # -- called by the engine --

    def _set_local(self, uid: str) -> None:
        self.uuid = uid
        self.local_ms = (time.perf_counter() - self.requested_at) * 1000
        self._local.set()
        if not self.remote_expected:
            self._remote.set()

    def _set_remote(self) -> None:
        self.remote_ms = (time.perf_counter() - self.requested_at) * 1000
        self._remote.set()

    def _fail(self, error: BaseException) -> None:
        self.error = error
        self._local.set()
        self._remote.set()

    def _fail_remote(self, error: BaseException) -> None:
        self.remote_error = error
        self._remote.set()

    def to_json(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "step": self.step,
            "identifier": self.identifier,
            "state": self.state,
            "local_ms": self.local_ms,
            "remote_ms": self.remote_ms,
            "error": str(self.error) if self.error else None,
            "remote_error": str(self.remote_error) if self.remote_error else None,
        }


class CommitThread(Generic[J]):
    """Runs commit jobs in submission order on one daemon thread.

    Jobs waiting together are handed to `run` as one group (a group commit: the location
    writes them with one manifest replace, so a commit thread that falls behind catches up).
    `run` reports each job's outcome on its handle; if it raises anyway, every handle of the
    group not yet acknowledged fails with that error, and the thread goes on. `submit` blocks
    while `max_pending` jobs wait.
    """

    def __init__(
        self, run: Callable[[list[J]], None], max_pending: int, name: str = "spindle-commit"
    ) -> None:
        self._runner = run
        self._q: queue.Queue[tuple[CommitHandle, J] | None] = queue.Queue(max_pending)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._idle = threading.Condition()
        self._outstanding = 0
        self._closed = False
        self._thread.start()

    def submit(self, handle: CommitHandle, job: J) -> None:
        with self._idle:
            if self._closed:
                raise StorageError("the storage location is closed")
            self._outstanding += 1
        self._q.put((handle, job))

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            group = [item]
            stop = False
            while True:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                group.append(nxt)
            try:
                self._runner([job for _, job in group])
            except BaseException as e:  # reported on the handles
                for handle, _ in group:
                    if not handle._local.is_set():
                        handle._fail(e)  # re-raised, as it is, by the waiter
            finally:
                with self._idle:
                    self._outstanding -= len(group)
                    self._idle.notify_all()
            if stop:
                return

    def drain(self) -> None:
        """Wait until every submitted job has run."""
        with self._idle:
            while self._outstanding:
                self._idle.wait()

    def close(self) -> None:
        with self._idle:
            if self._closed:
                return
            self._closed = True
        self.drain()
        self._q.put(None)
        self._thread.join()
