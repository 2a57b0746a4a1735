"""Watching a run's checkpoints become durable, so that no durability failure is silent.

The runner hands every checkpoint request's handle to a `DurabilityWatch` and calls
`check()` before each step. A failed local commit, a failed upload, the object store
becoming unreachable (and reachable again) and the prefix being claimed by another writer
each become an event (logged, written to metrics.jsonl, and under the control plane counted
in Prometheus and shown on the pipeline). Some failures end the run:

- `max_commit_failures` local commits failing in a row: the state cannot be made durable,
  so the run fails (`CommitFailedError`) and the restart policy takes over;
- fencing: another writer owns the prefix, so this run stops at once, before writing any
  sink again (`FencedError`; the driver exits with `EXIT_FENCED` and is not restarted).

An unreachable object store does not stop the run (checkpoints stay durable locally and are
uploaded once it is back), but it is reported until it is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from storage_engine.commit import CommitHandle
from storage_engine.errors import CommitFailedError
from storage_engine.remote import CheckpointGoneError, FencedError, RemoteTier

log = logging.getLogger("spindle.runner")

Event = dict[str, Any]


class DurabilityWatch:
    def __init__(
        self,
        emit: Callable[[Event], None],
        remote: Callable[[], RemoteTier | None],
        max_commit_failures: int = 3,
    ) -> None:
        self._emit = emit
        self._remote = remote
        self.max_commit_failures = max_commit_failures
        self._handles: list[CommitHandle] = []
        self.commit_failures = 0  # in a row
        self._troubled = False  # an event reported a problem not yet resolved
        self._remote_down = False
        self._uploads_s: list[float] = []  # uploads finished since `take_uploads`

    def track(self, handle: CommitHandle) -> None:
        self._handles.append(handle)

    def check(self) -> None:
        """Report what changed since the last call; raise if the run must end."""
        for h in list(self._handles):
            if h.state == "failed":
                self._handles.remove(h)
                self.commit_failures += 1
                self._report(
                    "commit_failed",
                    f"the checkpoint of step {h.step} failed ({self.commit_failures} in a "
                    f"row): {h.error}",
                    step=h.step,
                )
                if self.commit_failures >= self.max_commit_failures:
                    raise CommitFailedError(
                        f"{self.commit_failures} checkpoints failed in a row, the last of "
                        f"step {h.step}: {h.error}"
                    )
            elif h.state == "remote_failed":
                self._handles.remove(h)
                if isinstance(h.remote_error, FencedError | CheckpointGoneError):
                    continue  # fencing: reported below; gone: deleted before its upload
                self._report(
                    "upload_failed",
                    f"checkpoint {h.uuid} (step {h.step}) was not uploaded: {h.remote_error}",
                    step=h.step,
                    checkpoint=h.uuid,
                )
            elif h.done:
                self._handles.remove(h)
                self.commit_failures = 0
                if h.upload_ms is not None:
                    self._uploads_s.append(h.upload_ms / 1000)
                if self._troubled and not self._remote_down:
                    self._troubled = False
                    self._emit(_event("durable", f"checkpoint of step {h.step} is durable"))
        tier = self._remote()
        if tier is None:
            return
        if tier.fenced:
            status = tier.status()
            self._report("fenced", status.last_error or "fenced by another writer")
            raise FencedError(status.last_error or "fenced by another writer")
        error = tier.last_error
        if error and not self._remote_down:
            self._remote_down = True
            pending = [h.step for h in self._handles if h.uuid is not None]
            since = f"; checkpoints from step {pending[0]} are local only" if pending else ""
            self._report("remote_unavailable", f"the object store is unreachable: {error}{since}")
        elif not error and self._remote_down:
            self._remote_down = False
            log.warning("the object store is reachable again")
            self._emit(_event("remote_available", "the object store is reachable again"))

    def take_uploads(self) -> list[float]:
        """The durations (s) of the uploads `check` saw finish since the last call."""
        out, self._uploads_s = self._uploads_s, []
        return out

    def offsets_not_uploaded(self, step: int, error: BaseException) -> None:
        """The offset log's entries from `step` could not be put in the object store."""
        self._report(
            "upload_failed",
            f"the offsets of step {step} were not uploaded: {error}; they are kept local and "
            "uploaded when the object store is back",
            step=step,
        )

    def _report(self, kind: str, message: str, **fields: Any) -> None:
        self._troubled = True
        log.error("%s", message)
        self._emit(_event(kind, message, **fields))


def _event(kind: str, message: str, **fields: Any) -> Event:
    return {"ts": time.time(), "event": kind, "message": message, **fields}


__all__ = ["DurabilityWatch", "Event"]
