"""The job's command follower (workers.runtime.control) over the database's control plane
(workers.jobs.control_db), without Spark: its metrics sink keeps `latency_ms`, and it
applies the retention policy's auto-commit interval as the API edits it, null (off)
included."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from backend.db import Database
from backend.migrate import upgrade
from backend.models import (
    DesiredState,
    MetricSample,
    Operation,
    OperationKind,
    OperationStatus,
    Pipeline,
    PipelineState,
    RetentionPolicy,
    Run,
    RunState,
)
from backend.services import operations
from workers.jobs.control_db import DatabaseControlPlane
from workers.runtime.control import JobControl

from ...polling import wait_until


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    url = f"sqlite:///{tmp_path / 'spindle.db'}"
    upgrade(url)
    d = Database(url)
    yield d
    d.dispose()


@pytest.fixture
def control(db: Database, tmp_path: Path) -> JobControl:
    """A JobControl for a running run of pipeline "p" (auto-commit every 30 s)."""
    with db.session() as s:
        p = Pipeline(
            name="p",
            spec={"name": "p"},
            state=PipelineState.running,
            desired_state=DesiredState.running,
        )
        s.add(p)
        s.flush()
        s.add(RetentionPolicy(pipeline_id=p.id, auto_commit_interval_s=30.0))
        run = Run(pipeline_id=p.id, number=1, state=RunState.running)
        s.add(run)
        s.flush()
        run_id = run.id
    return JobControl(DatabaseControlPlane(db, run_id), poll_s=0.2, heartbeat_s=1.0)


def test_the_metrics_sink_stores_latency_ms(db: Database, control: JobControl) -> None:
    """Null included: the API and the SSE stream return these rows."""
    base = {"ts": 1.0, "rows_in": 3, "spark_ms": 1.0}
    control.runner = SimpleNamespace(step=2)  # type: ignore[assignment]
    control.metrics_sink({**base, "step": 1, "latency_ms": 5123.25})
    control.metrics_sink({**base, "step": 2, "latency_ms": None})
    control.plane.report(control._report(heartbeat=True))
    with db.session() as s:
        rows = s.query(MetricSample.step, MetricSample.latency_ms).order_by(MetricSample.id)
        assert [tuple(r) for r in rows] == [(1, 5123.25), (2, None)]


def test_the_auto_commit_interval_follows_the_policy_row(db: Database, control: JobControl) -> None:
    # Only the attributes the control loop uses here: a Runner needs Spark.
    runner: Any = SimpleNamespace(
        step=0, paused=False, checkpoints=SimpleNamespace(auto_commit_s=None)
    )
    control.runner = runner
    plane = control.plane
    assert isinstance(plane, DatabaseControlPlane)
    for interval in (30.0, 5.0, None):
        with db.session() as s:
            policy = s.get(RetentionPolicy, plane.pipeline_id)
            assert policy is not None
            policy.auto_commit_interval_s = interval
        control._follow(control.plane.report(control._report(heartbeat=False)))
        assert runner.checkpoints.auto_commit_s == interval


def test_heartbeats_go_on_while_an_operation_waits_for_a_step(
    db: Database, control: JobControl
) -> None:
    """A commit waits for the next step boundary, and a partitioned step can outlast the
    heartbeat timeout: the run must not look dead meanwhile, and the commit still ends."""
    released = threading.Event()

    class _Handle:
        def wait_local(self) -> str:
            released.wait(30)
            return "cp-1"

    runner: Any = SimpleNamespace(
        step=4,
        paused=False,
        skipped=[],
        sinks={},
        spec=SimpleNamespace(source=SimpleNamespace(table="t")),
        loc=SimpleNamespace(restored=None, remote=None, list_checkpoints=lambda: []),
        checkpoints=SimpleNamespace(auto_commit_s=None, request=lambda _id: (_Handle(), 5)),
    )
    plane = control.plane
    assert isinstance(plane, DatabaseControlPlane)
    with db.session() as s:
        p = s.get(Pipeline, plane.pipeline_id)
        assert p is not None
        op_id = operations.create(s, p, OperationKind.commit, {"identifier": None}).id

    def beat() -> dt.datetime | None:
        with db.session() as s:
            run = s.get(Run, plane.run_id)
            assert run is not None
            return run.heartbeat_at

    def status() -> OperationStatus:
        with db.session() as s:
            op = s.get(Operation, op_id)
            assert op is not None
            return op.status

    control.opened(runner)
    try:
        wait_until(lambda: status() == OperationStatus.running, 10, "the commit claimed")
        first = beat()
        assert first is not None
        wait_until(lambda: (beat() or first) > first, 10, "a heartbeat during the commit")
        assert status() == OperationStatus.running
        released.set()
        wait_until(lambda: status() == OperationStatus.succeeded, 10, "the commit to end")
    finally:
        released.set()
        control.close()
