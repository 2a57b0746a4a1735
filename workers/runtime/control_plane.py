"""The one interface between a running driver and the control plane (`ControlPlane`), the
values it carries, and their JSON: the same documents go over the REST API
(`control_rest.py`) and through the database's implementation (`workers/jobs/control_db.py`), so the
two cannot drift apart.

The driver does three things with the control plane: it reports its run's state (opened:
restored and about to process), reports its steps (with a heartbeat and, when they
changed, its checkpoints), and claims and finishes the pipeline's operations. Each answer
about the run says what the pipeline asks of it (`Desired`).

This module imports nothing of `backend`: the runtime is given an implementation at start.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pipeline_spec.offsets import OFFSETS
from storage_engine.manifest import CheckpointInfo
from storage_engine.retention import DELETE_CHECKPOINT

# Operation kinds, as the control plane names them.
COMMIT, GC, RESTORE, STOP = ("commit", "gc", "restore", "stop")


@dataclass(frozen=True)
class Checkpoints:
    """The storage location's checkpoints, for the control plane's mirror: `listed`
    oldest first, by uuid each one's input tables' offsets (where each resumes: `{table:
    offset}`, `pipeline_spec.offsets.written_offsets`; none for a checkpoint without), and
    the uuids the object store holds (None without an object store)."""

    listed: Sequence[CheckpointInfo]
    offsets: Mapping[str, Mapping[str, Any]]
    remote: frozenset[str] | None


@dataclass(frozen=True)
class Skipped:
    """A checkpoint the run's restore skipped (corrupt, `on_corruption: fallback`)."""

    uuid: str
    reason: str


@dataclass(frozen=True)
class ViewEndpoint:
    """Where the run serves its views' live rows (`workers.runtime.view_server`), and the
    secret a reader presents."""

    url: str
    secret: str


@dataclass(frozen=True)
class Opened:
    """The run's state: it restored `restored` (None: started empty) at `step`, skipping
    `skipped`, and is about to process; its views are served at `views` (None: it has no
    `view` sink)."""

    step: int
    restored: str | None
    skipped: Sequence[Skipped]
    checkpoints: Checkpoints
    views: ViewEndpoint | None = None


@dataclass(frozen=True)
class Report:
    """What the driver tells at each poll: the run's step now, the records of the steps
    since the last report, its durability events (`workers.runtime.durability`), whether its
    heartbeat is due, and its checkpoints if they changed since the last mirror."""

    step: int
    samples: Sequence[dict[str, Any]] = ()
    events: Sequence[dict[str, Any]] = ()
    heartbeat: bool = True
    checkpoints: Checkpoints | None = None


@dataclass(frozen=True)
class Desired:
    """What the pipeline asks of its run: `exit` (stop now: the pipeline is gone, or stopped
    with no stop operation pending to do it), `paused` (None: as it is, while a stop is
    pending), and the retention policy's automatic commit interval (`auto_commit_s`, None:
    off; only if `has_policy`)."""

    exit: bool = False
    paused: bool | None = None
    has_policy: bool = False
    auto_commit_s: float | None = None


@dataclass(frozen=True)
class Claimed:
    """An operation the run now performs; `pinned`: the pipeline's pinned checkpoints."""

    id: str
    kind: str
    params: dict[str, Any] = field(default_factory=dict)
    pinned: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Finished:
    """How an operation ended: its result, or its error (neither: a restore, which the run
    opening its checkpoint completes), and the checkpoints after it."""

    result: dict[str, Any] | None
    error: str | None
    checkpoints: Checkpoints


class ControlPlane(Protocol):
    """A running driver's view of the control plane."""

    def opened(self, run: Opened) -> Desired:
        """The run's state: restored, about to process."""
        ...

    def report(self, report: Report) -> Desired:
        """The run's progress; what the pipeline asks of it now."""
        ...

    def claim(self) -> list[Claimed]:
        """Take the pipeline's pending operations, oldest first."""
        ...

    def finish(self, op_id: str, done: Finished) -> None:
        """An operation the run claimed ended."""
        ...


# -- the documents ----------------------------------------------------------------------


def checkpoints_doc(cp: Checkpoints) -> dict[str, Any]:
    return {
        "listed": [
            {**i.to_json(), **({OFFSETS: cp.offsets[i.uuid]} if i.uuid in cp.offsets else {})}
            for i in cp.listed
        ],
        "remote": None if cp.remote is None else sorted(cp.remote),
    }


def opened_doc(run: Opened, pid: int) -> dict[str, Any]:
    return {
        "pid": pid,
        "step": run.step,
        "restored": run.restored,
        "skipped": [{"uuid": k.uuid, "reason": k.reason} for k in run.skipped],
        "checkpoints": checkpoints_doc(run.checkpoints),
        "views": None if run.views is None else {"url": run.views.url, "secret": run.views.secret},
    }


def report_doc(report: Report, pid: int) -> dict[str, Any]:
    return {
        "pid": pid,
        "step": report.step,
        "samples": list(report.samples),
        "events": list(report.events),
        "heartbeat": report.heartbeat,
        "checkpoints": None if report.checkpoints is None else checkpoints_doc(report.checkpoints),
    }


def finished_doc(done: Finished) -> dict[str, Any]:
    return {
        "result": done.result,
        "error": done.error,
        "checkpoints": checkpoints_doc(done.checkpoints),
    }


def desired_from(doc: Mapping[str, Any]) -> Desired:
    return Desired(
        exit=bool(doc["exit"]),
        paused=doc["paused"],
        has_policy=bool(doc["has_policy"]),
        auto_commit_s=doc["auto_commit_s"],
    )


def claimed_from(docs: Sequence[Mapping[str, Any]]) -> list[Claimed]:
    return [
        Claimed(str(d["id"]), str(d["kind"]), dict(d["params"]), frozenset(d["pinned"]))
        for d in docs
    ]


__all__ = [
    "COMMIT",
    "DELETE_CHECKPOINT",
    "GC",
    "RESTORE",
    "STOP",
    "Checkpoints",
    "Claimed",
    "ControlPlane",
    "Desired",
    "Finished",
    "Opened",
    "Report",
    "Skipped",
    "ViewEndpoint",
    "checkpoints_doc",
    "claimed_from",
    "desired_from",
    "finished_doc",
    "opened_doc",
    "report_doc",
]
