"""How the control plane hands work to workers. The Celery implementation lives in
`workers.jobs.tasks`; the services only know this protocol, so they can be used (and tested)
from the API, from tasks, and from the job itself."""

from __future__ import annotations

from typing import Protocol


class TaskQueue(Protocol):
    def launch(self, run_id: int) -> None:
        """Start supervising run `run_id` (a Run row in state starting)."""

    def execute(self, operation_id: str) -> None:
        """Perform a pending operation of a pipeline that has no live run."""

    def ready(self) -> str:
        """ "ok" if the broker is reachable, else "error: <why>"."""
