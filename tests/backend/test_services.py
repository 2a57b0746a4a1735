"""The control plane's services without HTTP: retention choices (property-tested against a
plain reference), the restart policy (`lifecycle.reap` on a fake clock, `run_exited` for
each exit code), metrics downsampling, and exclusive claiming of operations under
concurrency."""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import event, select
from sqlalchemy.orm import Session

from backend.db import Database
from backend.errors import Conflict
from backend.migrate import upgrade
from backend.models import (
    Checkpoint,
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
from backend.services import lifecycle, metrics
from backend.services import operations as ops
from backend.settings import Settings
from pipeline_spec import exits
from storage_engine import retention
from storage_engine.retention import Candidate, Policy

from .api_fixtures import clicks_spec, sqlite_url

pytestmark = pytest.mark.timeout(120)
T = TypeVar("T")

# -- retention: a plain reference ------------------------------------------------------------


def reference_for_gc(cps: list[Candidate], keep: int | None) -> list[str]:
    """Walk from the oldest; never the newest or a pinned one. keep=None: the first
    deletable one; else delete while more than `keep` checkpoints are left."""
    left = len(cps)
    out: list[str] = []
    for c in cps[:-1]:
        if c.pinned:
            continue
        if keep is None:
            return [c.uuid]
        if left <= keep:
            break
        out.append(c.uuid)
        left -= 1
    return out


def reference_expired(cps: list[Candidate], policy: Policy, now: float) -> list[str]:
    """Expired = not among the newest keep_last, or older than max_age; of those (never
    pinned, never the newest), the oldest ones, as many as leave min_keep checkpoints."""
    n = len(cps)
    if policy.keep_last is None:
        recent = {c.uuid for c in cps}
    else:
        recent = {c.uuid for c in cps[max(n - policy.keep_last, 0) :]}

    def too_old(c: Candidate) -> bool:
        return policy.max_age_s is not None and now - c.created_at > policy.max_age_s

    newest = cps[-1].uuid if cps else None
    expired = [
        c for c in cps if c.uuid != newest and not c.pinned and (c.uuid not in recent or too_old(c))
    ]
    budget = max(n - policy.min_keep, 0)
    return [c.uuid for c in expired[:budget]]


@st.composite
def checkpoint_lists(draw: st.DrawFn) -> list[Candidate]:
    n = draw(st.integers(0, 12))
    t = 1_700_000_000.0
    out = []
    for i in range(n):
        t += draw(st.integers(0, 900))
        out.append(Candidate(f"cp-{i:02d}", t, draw(st.booleans())))
    return out


policies = st.builds(
    Policy,
    keep_last=st.none() | st.integers(0, 14),
    max_age_s=st.none() | st.integers(0, 6000).map(float),
    min_keep=st.integers(0, 14),
)


def check_shape(cps: list[Candidate], got: list[str]) -> None:
    """Common to every choice: a subset, oldest first, never pinned or the newest."""
    order = [c.uuid for c in cps]
    assert set(got) <= set(order)
    assert len(set(got)) == len(got)
    assert [order.index(u) for u in got] == sorted(order.index(u) for u in got)
    pinned = {c.uuid for c in cps if c.pinned}
    assert not set(got) & pinned
    if cps:
        assert cps[-1].uuid not in got


@settings(max_examples=400, deadline=None)
@given(checkpoint_lists(), policies, st.integers(0, 20_000))
def test_expired_matches_the_reference(cps: list[Candidate], policy: Policy, later: int) -> None:
    now = (cps[-1].created_at if cps else 1_700_000_000.0) + later
    got = retention.expired(cps, policy, now)
    check_shape(cps, got)
    assert len(cps) - len(got) >= min(policy.min_keep, len(cps))
    assert got == reference_expired(cps, policy, now)


@settings(max_examples=400, deadline=None)
@given(checkpoint_lists(), st.none() | st.integers(0, 14))
def test_for_gc_matches_the_reference(cps: list[Candidate], keep: int | None) -> None:
    got = retention.for_gc(cps, keep)
    check_shape(cps, got)
    deletable = [c for c in cps[:-1] if not c.pinned]
    if keep is None:
        assert got == [c.uuid for c in deletable[:1]]
    else:
        assert len(got) == min(len(deletable), max(len(cps) - keep, 0))
    assert got == reference_for_gc(cps, keep)


def cands(spec: str, gap: float = 100.0) -> list[Candidate]:
    """'a b* c' -> candidates a, b (pinned), c, `gap` seconds apart."""
    return [
        Candidate(name.rstrip("*"), 1000.0 + i * gap, name.endswith("*"))
        for i, name in enumerate(spec.split())
    ]


def test_retention_examples() -> None:
    five = cands("a b* c d e")
    assert retention.for_gc(five, None) == ["a"]
    assert retention.for_gc(cands("a* b c"), None) == ["b"]
    assert retention.for_gc(cands("a* b"), None) == []
    assert retention.for_gc(cands("a"), 0) == []
    assert retention.for_gc(five, 0) == ["a", "c", "d"]
    assert retention.for_gc(five, 3) == ["a", "c"]
    assert retention.for_gc([], 0) == [] and retention.for_gc([], None) == []
    assert retention.expired(five, Policy(keep_last=2), 0) == ["a", "c"]
    assert retention.expired(five, Policy(keep_last=2, min_keep=4), 0) == ["a"]
    # max_age: a (age 450) and c (250) are older than 200 s at t=1450; e is the newest.
    assert retention.expired(five, Policy(max_age_s=200.0), 1450.0) == ["a", "c"]
    assert retention.expired(five, Policy(max_age_s=10_000.0), 1450.0) == []
    assert retention.expired(cands("a b"), Policy(keep_last=1, min_keep=2), 0) == []


# -- databases -------------------------------------------------------------------------------


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[Database]:
    url = sqlite_url(tmp_path / "spindle.db")
    upgrade(url)
    db = Database(url)
    yield db
    db.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        url = sqlite_url(tmp_path / "spindle.db")
    else:
        url = request.getfixturevalue("pg_url")
    upgrade(url)
    db = Database(url)
    yield db
    db.dispose()


def add_pipeline(
    db: Database,
    name: str = "p",
    desired: DesiredState = DesiredState.running,
    state: PipelineState = PipelineState.running,
) -> int:
    with db.session() as s:
        p = Pipeline(name=name, spec=clicks_spec(name), desired_state=desired, state=state)
        s.add(p)
        s.flush()
        return p.id


def add_run(db: Database, pipeline_id: int, **fields: Any) -> int:
    with db.session() as s:
        numbers = s.scalars(select(Run.number).where(Run.pipeline_id == pipeline_id)).all()
        run = Run(
            pipeline_id=pipeline_id,
            number=max(numbers, default=0) + 1,
            **{"state": RunState.running, **fields},
        )
        s.add(run)
        s.flush()
        return run.id


def update_run(db: Database, run_id: int, **fields: Any) -> None:
    with db.session() as s:
        run = s.get(Run, run_id)
        assert run is not None
        for k, v in fields.items():
            setattr(run, k, v)


def get_run(db: Database, run_id: int) -> Run:
    with db.session() as s:
        run = s.get(Run, run_id)
        assert run is not None
        s.expunge(run)
        return run


def get_pipeline(db: Database, pipeline_id: int) -> Pipeline:
    with db.session() as s:
        p = s.get(Pipeline, pipeline_id)
        assert p is not None
        s.expunge(p)
        return p


# -- the restart policy ------------------------------------------------------------------------

T0 = utcnow()


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


@pytest.fixture
def policy(tmp_path: Path) -> Settings:
    return Settings(
        data_dir=tmp_path,
        heartbeat_timeout_s=30,
        restart_backoff_s=10,
        restart_backoff_max_s=1000,
        max_restarts=3,
        restart_reset_s=600,
    )


def reap(db: Database, cfg: Settings, now: float) -> list[tuple[int, int, str, int]]:
    """reap() at T0 + `now` seconds; the launched runs as (id, number, from, restarts)."""
    with db.session() as s:
        runs = lifecycle.reap(s, cfg, at(now))
        return [(r.id, r.number, r.from_checkpoint, r.restart_count) for r in runs]


def crash_by_silence(
    db: Database, cfg: Settings, run_id: int, started: float, restarts: int
) -> tuple[float, list[tuple[int, int, str, int]]]:
    """Let run `run_id` start at `started`, heartbeat for 5 s, then go silent; reap once
    the heartbeat timeout passed, then once restart number `restarts`'s backoff has passed
    (and just before). Returns the loss's time (the run's ended_at) and what the reap
    launched."""
    update_run(db, run_id, state=RunState.running, started_at=at(started))
    update_run(db, run_id, heartbeat_at=at(started + 5))
    lost_at = started + 5 + cfg.heartbeat_timeout_s + 1
    assert reap(db, cfg, lost_at - 2) == []  # still within the timeout
    assert get_run(db, run_id).state == RunState.running
    at_loss = reap(db, cfg, lost_at)
    run = get_run(db, run_id)
    assert run.state == RunState.lost and run.ended_at == at(lost_at)
    assert run.exit_reason == "no heartbeat for 30s (driver or worker lost)"
    due = lost_at + lifecycle.backoff_s(cfg, restarts)
    if due == lost_at:
        return lost_at, at_loss
    assert at_loss == []  # lost, but the backoff has not passed
    assert reap(db, cfg, due - 0.5) == []
    return lost_at, reap(db, cfg, due)


def test_the_first_restart_is_at_once_then_the_backoff_doubles_up_to_the_maximum(
    policy: Settings,
) -> None:
    assert [lifecycle.backoff_s(policy, n) for n in (1, 2, 3, 4)] == [0, 10, 20, 40]
    capped = policy.model_copy(update={"restart_backoff_max_s": 25.0})
    assert [lifecycle.backoff_s(capped, n) for n in (1, 2, 3, 4, 9)] == [0, 10, 20, 25, 25]


def test_reap_restarts_lost_runs_with_doubling_backoff_then_gives_up(
    sqlite_db: Database, policy: Settings
) -> None:
    db = sqlite_db
    pid = add_pipeline(db)
    run = add_run(db, pid, created_at=at(0))
    t = 0.0
    for restarts in (1, 2, 3):
        lost, launched = crash_by_silence(db, policy, run, started=t, restarts=restarts)
        due = lost + lifecycle.backoff_s(policy, restarts)
        assert due - lost == (0 if restarts == 1 else 10 * 2 ** (restarts - 2))
        # The supervisor restarts at that moment (a crash it saw).
        assert lifecycle.restart_delay_s(policy, get_run(db, run)) == due - lost
        assert len(launched) == 1
        run, number, frm, count = launched[0]
        assert (number, frm, count) == (restarts + 1, "latest", restarts)
        # Created "now" on the fake clock (the row's default is the real clock).
        update_run(db, run, created_at=at(due))
        assert get_run(db, run).state == RunState.starting
        assert get_pipeline(db, pid).state == PipelineState.starting
        assert reap(db, policy, due) == []  # one replacement, not one per call
        t = due + 1
    # The fourth crash within the window exhausts max_restarts=3.
    update_run(db, run, state=RunState.running, started_at=at(t), heartbeat_at=at(t + 5))
    assert reap(db, policy, t + 5 + 31) == []
    assert get_run(db, run).state == RunState.lost
    p = get_pipeline(db, pid)
    assert (p.state, p.desired_state) == (PipelineState.failed, DesiredState.stopped)
    assert p.error == (
        "gave up: 4 crashes within 1 h (max_restarts 3); "
        "last run: no heartbeat for 30s (driver or worker lost)"
    )
    assert reap(db, policy, t + 100_000) == []
    assert get_pipeline(db, pid).state == PipelineState.failed


@pytest.mark.parametrize("started_from", ["none", "older"])
def test_a_run_started_elsewhere_that_crashed_before_committing_restarts_there(
    sqlite_db: Database, policy: Settings, started_from: str
) -> None:
    """Starting from `none` (or an older checkpoint) leaves the newest checkpoint behind; a
    crash before the run's first commit must not bring that state back."""
    db = sqlite_db
    pid = add_pipeline(db)
    older, newest = "0" * 8 + "-0000-0000-0000-" + "0" * 12, "1" * 8 + "-1111-1111-1111-" + "1" * 12
    with db.session() as s:
        for i, uid in enumerate((older, newest)):
            s.add(Checkpoint(pipeline_id=pid, uuid=uid, step=i + 1, created_at=at(-100 + i)))
    frm = "none" if started_from == "none" else older
    run = add_run(db, pid, from_checkpoint=frm, created_at=at(0))
    lost, launched = crash_by_silence(db, policy, run, started=0, restarts=1)
    assert [(f, n) for _, n, f, _ in launched] == [(frm, 2)]
    # Once the run has committed, the newest checkpoint is its own: restart from it.
    run = launched[0][0]
    update_run(db, run, created_at=at(lost + 10))
    with db.session() as s:
        s.add(
            Checkpoint(
                pipeline_id=pid,
                uuid="2" * 8 + "-2222-2222-2222-" + "2" * 12,
                step=3,
                created_at=at(lost + 20),
            )
        )
    _, launched = crash_by_silence(db, policy, run, started=lost + 15, restarts=2)
    assert [(f, n) for _, n, f, _ in launched] == [("latest", 3)]


def test_reap_resets_the_count_after_a_healthy_run(sqlite_db: Database, policy: Settings) -> None:
    db = sqlite_db
    pid = add_pipeline(db)
    run = add_run(db, pid, created_at=at(0), restart_count=3)
    # Up for 700 s (more than restart_reset_s), then silent.
    update_run(db, run, started_at=at(0), heartbeat_at=at(700))
    launched = reap(db, policy, 731)  # the first restart: at once, not the fourth's backoff
    assert get_run(db, run).state == RunState.lost
    assert [(n, c) for _, n, _, c in launched] == [(2, 1)]


def test_crashes_after_long_healthy_runs_fail_once_the_window_holds_too_many(
    sqlite_db: Database, policy: Settings
) -> None:
    """A driver that stays up 11 minutes (past restart_reset_s, so each restart is at
    once) and then crashes is restarted until the window (1 h) holds max_restarts + 1
    crashes: not forever. A start by hand counts afresh; crashes older than the window do
    not count."""
    db = sqlite_db
    pid = add_pipeline(db)
    run = add_run(db, pid, created_at=at(0))
    t, restarted = 0.0, 0
    while True:
        update_run(db, run, state=RunState.running, started_at=at(t), heartbeat_at=at(t + 660))
        launched = reap(db, policy, t + 660 + 31)
        assert get_run(db, run).state == RunState.lost
        if not launched:
            break
        ((run, _, _, count),) = launched
        assert count == 1  # each run was healthy: no backoff
        restarted += 1
        t += 700
        update_run(db, run, created_at=at(t))
    assert restarted == 3
    p = get_pipeline(db, pid)
    assert p.state == PipelineState.failed
    assert p.error is not None and p.error.startswith("gave up: 4 crashes within 1 h")
    # Started again by hand, later: its first crash is restarted.
    with sqlite_db.session() as s:
        pipeline = s.get(Pipeline, pid)
        assert pipeline is not None
        pipeline.desired_state, pipeline.state = DesiredState.running, PipelineState.starting
    run = add_run(db, pid, created_at=at(t + 100))
    update_run(db, run, state=RunState.running, started_at=at(t + 100), heartbeat_at=at(t + 110))
    assert len(reap(db, policy, t + 110 + 31)) == 1
    # Crashes spread wider than the window: each is restarted.
    with sqlite_db.session() as s:
        assert lifecycle.crashes_within_window(s, policy, s.get(Pipeline, pid), at(t + 10_000)) == 0


def test_reap_never_restarts_a_pipeline_meant_to_be_stopped(
    sqlite_db: Database, policy: Settings
) -> None:
    db = sqlite_db
    pid = add_pipeline(db, desired=DesiredState.stopped, state=PipelineState.stopping)
    run = add_run(db, pid, created_at=at(0), started_at=at(0), heartbeat_at=at(0))
    assert reap(db, policy, 31) == []
    assert get_run(db, run).state == RunState.lost
    assert get_pipeline(db, pid).state == PipelineState.stopped
    for later in (100, 1000, 100_000):
        assert reap(db, policy, later) == []
    with sqlite_db.session() as s:
        assert len(s.scalars(select(Run)).all()) == 1


def test_reap_leaves_healthy_and_starting_runs_alone(sqlite_db: Database, policy: Settings) -> None:
    db = sqlite_db
    beating = add_pipeline(db, "beating")
    add_run(db, beating, created_at=at(0), started_at=at(0), heartbeat_at=at(90))
    starting = add_pipeline(db, "starting", state=PipelineState.starting)
    add_run(db, starting, state=RunState.starting, created_at=at(80))
    assert reap(db, policy, 100) == []
    with db.session() as s:
        assert {r.state for r in s.scalars(select(Run))} == {RunState.running, RunState.starting}
    # A starting run that never heartbeats is lost like any other (and replaced).
    assert [n for _, n, _, _ in reap(db, policy, 120)] == [2]
    with db.session() as s:
        states = {
            (pid, n): state
            for pid, n, state in s.execute(select(Run.pipeline_id, Run.number, Run.state))
        }
    assert states == {
        (beating, 1): RunState.running,
        (starting, 1): RunState.lost,
        (starting, 2): RunState.starting,
    }


def test_reap_restarts_paused_pipelines_too(sqlite_db: Database, policy: Settings) -> None:
    db = sqlite_db
    pid = add_pipeline(db, desired=DesiredState.paused, state=PipelineState.paused)
    add_run(db, pid, created_at=at(0), started_at=at(0), heartbeat_at=at(0))
    assert [(n, c) for _, n, _, c in reap(db, policy, 31)] == [(2, 1)]


# -- run_exited -----------------------------------------------------------------------------


def exited(db: Database, run_id: int, code: int, tail: str = "") -> lifecycle.Exit:
    with db.session() as s:
        run = s.get(Run, run_id)
        assert run is not None
        out = lifecycle.run_exited(s, run, code, tail)
        if out.relaunch is not None:
            s.expunge(out.relaunch)
        return out


def started_pipeline(db: Database) -> tuple[int, int]:
    pid = add_pipeline(db)
    run = add_run(db, pid, started_at=utcnow(), heartbeat_at=utcnow())
    return pid, run


def test_exit_0_after_a_stop_request(sqlite_db: Database, policy: Settings) -> None:
    pid, run = started_pipeline(sqlite_db)
    with sqlite_db.session() as s:
        p = s.get(Pipeline, pid)
        assert p is not None
        assert lifecycle.request_stop(s, p) is not None
        assert p.state == PipelineState.stopping
    out = exited(sqlite_db, run, exits.EXIT_STOPPED)
    assert (out.relaunch, out.restart_due) == (None, False)
    r = get_run(sqlite_db, run)
    assert (r.state, r.exit_code, r.exit_reason) == (RunState.stopped, 0, "stopped on request")
    assert r.ended_at is not None
    assert get_pipeline(sqlite_db, pid).state == PipelineState.stopped
    with sqlite_db.session() as s:
        assert lifecycle.reap(s, policy, utcnow() + dt.timedelta(hours=1)) == []


def test_exit_2_is_a_spec_error_without_restart(sqlite_db: Database, policy: Settings) -> None:
    pid, run = started_pipeline(sqlite_db)
    tail = "planning...\nSpecError: transform.select: `nope` cannot be resolved\n"
    out = exited(sqlite_db, run, exits.EXIT_SPEC, tail)
    assert (out.relaunch, out.restart_due) == (None, False)
    r = get_run(sqlite_db, run)
    assert r.state == RunState.failed
    assert r.exit_reason == (
        "exited with code 2: SpecError: transform.select: `nope` cannot be resolved"
    )
    p = get_pipeline(sqlite_db, pid)
    assert (p.state, p.desired_state) == (PipelineState.failed, DesiredState.stopped)
    assert p.error == tail.strip()  # no spec error heading: the log's end
    with sqlite_db.session() as s:
        assert lifecycle.reap(s, policy, utcnow() + dt.timedelta(hours=1)) == []


def test_a_spec_error_is_reported_without_the_spark_output_before_it(
    sqlite_db: Database,
) -> None:
    pid, run = started_pipeline(sqlite_db)
    spec_error = (
        "invalid pipeline spec:\n  transform.select: `nope` cannot be resolved\n"
        "  state.0.group_by: `user_id` is not a column"
    )
    tail = "WARN SparkSession: ...\norg.apache.spark.sql.AnalysisException: ...\n" * 50
    exited(sqlite_db, run, exits.EXIT_SPEC, tail + spec_error + "\n")
    assert get_pipeline(sqlite_db, pid).error == spec_error


def test_exit_3_relaunches_from_the_restored_checkpoint(sqlite_db: Database) -> None:
    pid, run = started_pipeline(sqlite_db)
    uid = "6b0c2c1e-8a8f-4b8e-9a57-1f6f7b9b8d10"
    with sqlite_db.session() as s:
        p = s.get(Pipeline, pid)
        assert p is not None
        op = ops.create(s, p, OperationKind.restore, {"checkpoint": uid})
        assert ops.claim(s, pid) == [op]  # the job took it
    out = exited(sqlite_db, run, exits.EXIT_RELAUNCH)
    assert out.restart_due is False and out.relaunch is not None
    nxt = out.relaunch
    assert (nxt.number, nxt.state, nxt.from_checkpoint, nxt.restart_count) == (
        2,
        RunState.starting,
        uid,
        0,
    )
    r = get_run(sqlite_db, run)
    assert (r.state, r.exit_reason) == (RunState.stopped, f"restore of checkpoint {uid}")


def test_a_restore_whose_run_cannot_open_the_checkpoint_fails_at_once(
    sqlite_db: Database, policy: Settings
) -> None:
    """The relaunched run exits 5 (corrupt checkpoint): the restore fails with the driver's
    whole one-line reason, the pipeline fails without restarts, and a later restore is not
    refused as "already in progress". Before, the operation stayed running for ever and the
    pipeline went through every restart, each restoring the same corrupt checkpoint."""
    pid, run = started_pipeline(sqlite_db)
    uid = "6b0c2c1e-8a8f-4b8e-9a57-1f6f7b9b8d10"
    with sqlite_db.session() as s:
        p = s.get(Pipeline, pid)
        assert p is not None
        op = ops.create(s, p, OperationKind.restore, {"checkpoint": uid})
        op_id = op.id
        assert ops.claim(s, pid) == [op]
    out = exited(sqlite_db, run, exits.EXIT_RELAUNCH)
    assert out.relaunch is not None
    reason = (
        f"checkpoint {uid} (step 16) is corrupt: /data/pipelines/p/storage/"
        "0123456789abcdef0123456789abcdef.batch: footer checksum mismatch. The newest intact "
        "checkpoint of its timeline is 11111111-2222-4333-8444-555555555555 (step 14)"
    )
    tail = "WARN ...\nTraceback ...\n" * 20 + f"{exits.STATE_ERROR_HEADING} {reason}\n"
    out = exited(sqlite_db, out.relaunch.id, exits.EXIT_STATE, tail)
    assert (out.relaunch, out.restart_due) == (None, False)
    p2 = get_pipeline(sqlite_db, pid)
    assert (p2.state, p2.desired_state, p2.error) == (
        PipelineState.failed,
        DesiredState.stopped,
        reason,
    )
    with sqlite_db.session() as s:
        done = s.get(Operation, op_id)
        assert done is not None and done.status == OperationStatus.failed
        assert done.error == reason and done.finished_at is not None
        assert lifecycle.reap(s, policy, utcnow() + dt.timedelta(hours=1)) == []


def test_a_fenced_run_fails_the_pipeline_without_restarts(
    sqlite_db: Database, policy: Settings
) -> None:
    pid, run = started_pipeline(sqlite_db)
    why = "s3://b/p was claimed by another writer (epoch 4, host h2, pid 7) after this one"
    out = exited(sqlite_db, run, exits.EXIT_FENCED, f"...\n{exits.FENCED_HEADING} {why}\n")
    assert (out.relaunch, out.restart_due) == (None, False)
    p = get_pipeline(sqlite_db, pid)
    assert (p.state, p.error) == (PipelineState.failed, why)
    with sqlite_db.session() as s:
        assert lifecycle.reap(s, policy, utcnow() + dt.timedelta(hours=1)) == []


def test_operations_a_run_claimed_fail_when_it_dies(sqlite_db: Database) -> None:
    pid, run = started_pipeline(sqlite_db)
    with sqlite_db.session() as s:
        p = s.get(Pipeline, pid)
        assert p is not None
        op_id = ops.create(s, p, OperationKind.commit, {}).id
        assert [o.id for o in ops.claim(s, pid)] == [op_id]
    exited(sqlite_db, run, -9)
    with sqlite_db.session() as s:
        op = s.get(Operation, op_id)
        assert op is not None and op.status == OperationStatus.failed
        assert op.error == "run 1 ended before finishing it (killed by SIGKILL)"


def test_exit_3_without_a_restore_stops(sqlite_db: Database) -> None:
    pid, run = started_pipeline(sqlite_db)
    out = exited(sqlite_db, run, exits.EXIT_RELAUNCH)
    assert (out.relaunch, out.restart_due) == (None, False)
    assert get_run(sqlite_db, run).exit_reason == "stopped for a restore"
    assert get_pipeline(sqlite_db, pid).state == PipelineState.stopped


def test_exit_4_interrupted_restarts_without_backoff(sqlite_db: Database, policy: Settings) -> None:
    pid, run = started_pipeline(sqlite_db)
    update_run(sqlite_db, run, restart_count=2)
    out = exited(sqlite_db, run, exits.EXIT_INTERRUPTED)
    assert (out.relaunch, out.restart_due) == (None, False)
    r = get_run(sqlite_db, run)
    assert (r.state, r.exit_reason) == (RunState.stopped, "interrupted: the worker shut down")
    assert get_pipeline(sqlite_db, pid).state == PipelineState.restarting
    assert r.ended_at is not None
    with sqlite_db.session() as s:
        launched = lifecycle.reap(s, policy, r.ended_at)  # no backoff for a shutdown
        assert [(x.number, x.restart_count, x.from_checkpoint) for x in launched] == [
            (2, 0, "latest")
        ]


def test_a_restart_keeps_the_operators_its_run_drops_the_state_of(
    sqlite_db: Database, policy: Settings
) -> None:
    pid = add_pipeline(sqlite_db)
    run = add_run(sqlite_db, pid, started_at=utcnow(), drop_state=["q5.agg0"])
    exited(sqlite_db, run, exits.EXIT_INTERRUPTED)
    r = get_run(sqlite_db, run)
    assert r.ended_at is not None
    with sqlite_db.session() as s:
        launched = lifecycle.reap(s, policy, r.ended_at)
        assert [(x.number, x.drop_state) for x in launched] == [(2, ["q5.agg0"])]


def test_exit_4_while_stopping_just_stops(sqlite_db: Database) -> None:
    pid = add_pipeline(sqlite_db, desired=DesiredState.stopped, state=PipelineState.stopping)
    run = add_run(sqlite_db, pid)
    exited(sqlite_db, run, exits.EXIT_INTERRUPTED)
    assert get_pipeline(sqlite_db, pid).state == PipelineState.stopped


def test_killed_run_is_restarted_at_once_and_its_replacement_after_the_backoff(
    sqlite_db: Database, policy: Settings
) -> None:
    pid, run = started_pipeline(sqlite_db)
    out = exited(sqlite_db, run, -9, "some output\nthe last line\n")
    assert (out.relaunch, out.restart_due) == (None, True)
    r = get_run(sqlite_db, run)
    assert (r.state, r.exit_code, r.exit_reason) == (RunState.failed, -9, "killed by SIGKILL")
    assert get_pipeline(sqlite_db, pid).state == PipelineState.restarting
    assert r.ended_at is not None
    with sqlite_db.session() as s:
        launched = lifecycle.reap(s, policy, r.ended_at)
        assert [(x.number, x.restart_count) for x in launched] == [(2, 1)]
        again = launched[0].id
    update_run(sqlite_db, again, state=RunState.running, started_at=utcnow())
    exited(sqlite_db, again, -9)  # crashed again before restart_reset_s: wait this time
    ended = get_run(sqlite_db, again).ended_at
    assert ended is not None
    with sqlite_db.session() as s:
        assert lifecycle.reap(s, policy, ended + dt.timedelta(seconds=9)) == []
    with sqlite_db.session() as s:
        launched = lifecycle.reap(s, policy, ended + dt.timedelta(seconds=10))
        assert [(x.number, x.restart_count) for x in launched] == [(3, 2)]


def test_crash_reason_is_the_last_log_line(sqlite_db: Database) -> None:
    _, run = started_pipeline(sqlite_db)
    out = exited(sqlite_db, run, 1, "Traceback ...\n  ...\nMemoryError: out of memory\n\n")
    assert out.restart_due is True
    assert get_run(sqlite_db, run).exit_reason == "exited with code 1: MemoryError: out of memory"
    assert lifecycle.describe_exit(-15) == "killed by SIGTERM"
    assert lifecycle.describe_exit(-99) == "killed by signal 99"


# -- metrics downsampling -----------------------------------------------------------------------

NOW = 1_800_000_000.0  # a whole minute
MINUTE = NOW - 7200  # a minute start, two hours back


def sample(pid: int, ts: float, **fields: Any) -> MetricSample:
    return MetricSample(pipeline_id=pid, ts=ts, **{"step": 0, **fields})


def op(rows_in: int, rows_out: int, step_ms: float, state_rows: int) -> dict[str, Any]:
    return {"rows_in": rows_in, "rows_out": rows_out, "step_ms": step_ms,
            "state_rows": state_rows, "state_bytes": 10 * state_rows}  # fmt: skip


def test_downsample_folds_old_rows_per_minute(sqlite_db: Database, tmp_path: Path) -> None:
    cfg = Settings(data_dir=tmp_path, metrics_raw_s=3600, metrics_keep_s=86400)
    a, b = add_pipeline(sqlite_db, "a"), add_pipeline(sqlite_db, "b")
    run = add_run(sqlite_db, a)
    with sqlite_db.session() as s:
        s.add_all(
            [
                sample(a, NOW - 90_000, step=1, rows_in=1000),  # past metrics_keep_s
                sample(
                    a,
                    MINUTE + 0,
                    step=10,
                    rows_in=1,
                    step_ms=5,
                    state_rows=100,
                    operators={"v.agg0": op(3, 1, 2.0, 7)},
                ),
                sample(
                    a,
                    MINUTE + 10,
                    step=11,
                    rows_in=2,
                    step_ms=50,
                    latency_ms=4.0,
                    operators={"v.agg0": op(4, 2, 1.0, 9)},
                ),
                sample(a, MINUTE + 59.5, step=12, rows_in=3, rows_out=7, step_ms=7, run_id=run),
                sample(a, MINUTE + 60, step=13, rows_in=10, step_ms=1, dead_letters=2),
                sample(a, MINUTE + 61, step=14, rows_in=20, step_ms=2, state_rows=5),
                sample(b, MINUTE + 30, step=3, rows_in=9, step_ms=9),
                sample(a, NOW - 3600, step=20, rows_in=4),  # exactly at the cutoff: kept
                sample(a, NOW - 100, step=21, rows_in=5),
            ]
        )
    with sqlite_db.session() as s:
        recent = {
            r.id: (r.ts, r.step, r.rows_in)
            for r in s.scalars(select(MetricSample).where(MetricSample.ts >= NOW - 3600))
        }
    with sqlite_db.session() as s:
        assert metrics.downsample(s, cfg, NOW) == 6  # raw rows folded
    with sqlite_db.session() as s:
        rows = s.scalars(select(MetricSample).order_by(MetricSample.pipeline_id, MetricSample.ts))
        got = [
            (
                r.pipeline_id,
                r.resolution_s,
                r.ts,
                r.steps,
                r.step,
                r.rows_in,
                r.rows_out,
                r.dead_letters,
                r.step_ms,
                r.latency_ms,
                r.state_rows,
                r.run_id,
            )
            for r in rows
        ]
        raw = {r.id: (r.ts, r.step, r.rows_in) for r in s.scalars(select(MetricSample))}
        folded = [r.operators for r in s.scalars(select(MetricSample).order_by(MetricSample.id))]
    # Per operator: rows summed, the longest step, the last state.
    assert {"v.agg0": op(7, 3, 2.0, 9)} in folded
    assert got == [
        (a, 60, MINUTE + 60, 3, 12, 6, 7, 0, 50.0, 4.0, 0, run),
        (a, 60, MINUTE + 120, 2, 14, 30, 0, 2, 2.0, None, 5, None),
        (a, 0, NOW - 3600, 1, 20, 4, 0, 0, 0.0, None, 0, None),
        (a, 0, NOW - 100, 1, 21, 5, 0, 0, 0.0, None, 0, None),
        (b, 60, MINUTE + 60, 1, 3, 9, 0, 0, 9.0, None, 0, None),
    ]
    assert {i: v for i, v in raw.items() if v[0] >= NOW - 3600} == recent  # untouched
    # Idempotent: buckets are not folded again.
    with sqlite_db.session() as s:
        assert metrics.downsample(s, cfg, NOW) == 0
        assert len(s.scalars(select(MetricSample)).all()) == 5
    # A day later everything has aged out.
    with sqlite_db.session() as s:
        metrics.downsample(s, cfg, NOW + 86_400)
        assert [r.ts for r in s.scalars(select(MetricSample))] == []


def _prometheus(db: Database) -> dict[tuple[str, str], float]:
    from backend.services.prometheus import PipelineCollector

    return {
        (smp.name, smp.labels.get("pipeline", "")): smp.value
        for m in PipelineCollector(db).collect()
        for smp in m.samples
    }


def test_counters_only_grow_and_durability_problems_show(
    sqlite_db: Database, tmp_path: Path
) -> None:
    """Prometheus `*_total` were sums over the history, which downsampling deletes: they went
    down. A run's durability events were counted nowhere and shown nowhere."""
    from workers.jobs.control_db import DatabaseControlPlane
    from workers.runtime.control_plane import Report

    cfg = Settings(data_dir=tmp_path, metrics_raw_s=3600, metrics_keep_s=86400)
    pid = add_pipeline(sqlite_db)
    run = add_run(sqlite_db, pid, started_at=utcnow())
    plane = DatabaseControlPlane(sqlite_db, run)
    samples = [
        {
            "ts": MINUTE + i,
            "step": i + 1,
            "rows_in": 10,
            "rows_out": 2,
            "dead_letters": 1,
            "late_rows": 2,
        }
        for i in range(3)
    ]
    events = [
        {"ts": NOW, "event": "commit_failed", "message": "step 3: disk full"},
        {"ts": NOW, "event": "upload_failed", "message": "step 3: denied"},
    ]
    plane.report(Report(3, samples, events))
    got = _prometheus(sqlite_db)
    assert got[("spindle_pipeline_rows_in_total", "p")] == 30
    assert got[("spindle_pipeline_dead_letters_total", "p")] == 3
    assert got[("spindle_pipeline_late_rows_total", "p")] == 6
    assert got[("spindle_pipeline_commit_failures_total", "p")] == 1
    assert got[("spindle_pipeline_upload_failures_total", "p")] == 1
    assert got[("spindle_pipeline_durability_ok", "p")] == 0
    p = get_pipeline(sqlite_db, pid)
    assert p.durability_error == "step 3: denied" and p.durability_error_at is not None
    with sqlite_db.session() as s:
        metrics.downsample(s, cfg, NOW + 86_400)  # every sample aged out
        assert s.scalars(select(MetricSample)).all() == []
    assert _prometheus(sqlite_db)[("spindle_pipeline_rows_in_total", "p")] == 30
    plane.report(
        Report(4, events=[{"ts": NOW, "event": "durable", "message": "step 4 is durable"}])
    )
    assert get_pipeline(sqlite_db, pid).durability_error is None
    assert _prometheus(sqlite_db)[("spindle_pipeline_durability_ok", "p")] == 1


def shard(i: int, rows_in: int, step_ms: float, state_rows: int) -> dict[str, Any]:
    return {"shard": i, "rows_in": rows_in, "rows_out": rows_in // 2, "step_ms": step_ms,
            "state_rows": state_rows, "state_bytes": 10 * state_rows}  # fmt: skip


def test_operator_shard_counters_only_grow_and_shards_fold(
    sqlite_db: Database, tmp_path: Path
) -> None:
    """A partitioned pipeline's steps carry each operator-shard's figures: Prometheus has
    them per shard (counters that outlive the history, and the newest state), and
    downsampling folds them per shard as it folds the operator's own."""
    from workers.jobs.control_db import DatabaseControlPlane
    from workers.runtime.control_plane import Report

    cfg = Settings(data_dir=tmp_path, metrics_raw_s=3600, metrics_keep_s=86400)
    pid = add_pipeline(sqlite_db)
    plane = DatabaseControlPlane(sqlite_db, add_run(sqlite_db, pid, started_at=utcnow()))

    def step(i: int, *shards: dict[str, Any]) -> dict[str, Any]:
        total = {k: sum(x[k] for x in shards) for k in shards[0] if k != "shard"}
        return {"ts": MINUTE + i, "step": i,
                "operators": {"v.agg0": {**total, "shards": list(shards)}}}  # fmt: skip

    plane.report(Report(1, [step(1, shard(0, 90, 30.0, 9), shard(1, 10, 5.0, 1))], []))
    plane.report(
        Report(
            3,
            [
                step(2, shard(0, 60, 20.0, 12), shard(1, 0, 0.0, 1)),
                step(3, shard(0, 0, 0.0, 12), shard(1, 0, 0.0, 1)),
            ],
            [],
        )
    )

    def series(name: str) -> dict[tuple[str, ...], float]:
        # Labels in sorted order: operator, pipeline, shard.
        return prometheus_samples(sqlite_db, name)

    assert series("spindle_operator_shard_rows_in") == {
        ("v.agg0", "p", "0"): 150,
        ("v.agg0", "p", "1"): 10,
    }
    assert series("spindle_operator_shard_rows_out") == {
        ("v.agg0", "p", "0"): 75,
        ("v.agg0", "p", "1"): 5,
    }
    seconds = series("spindle_operator_shard_step_seconds")
    assert seconds[("v.agg0", "p", "0")] == pytest.approx(0.05)
    assert seconds[("v.agg0", "p", "1")] == pytest.approx(0.005)
    assert series("spindle_operator_shard_state_rows") == {
        ("v.agg0", "p", "0"): 12,
        ("v.agg0", "p", "1"): 1,
    }
    assert series("spindle_operator_shard_state_bytes")[("v.agg0", "p", "0")] == 120
    # The operator's own series are its shards' sums.
    assert series("spindle_operator_state_rows") == {("v.agg0", "p"): 13}
    with sqlite_db.session() as s:
        assert metrics.downsample(s, cfg, NOW) == 3
        (folded,) = [r.operators for r in s.scalars(select(MetricSample))]
    # Per shard as per operator: rows summed, the longest step, the last state.
    assert folded is not None
    assert folded["v.agg0"]["shards"] == [
        {**shard(0, 150, 30.0, 12), "rows_out": 75},
        {**shard(1, 10, 5.0, 1), "rows_out": 5},
    ]
    assert folded["v.agg0"]["rows_in"] == 160
    with sqlite_db.session() as s:
        metrics.downsample(s, cfg, NOW + 86_400)  # every sample aged out
        assert s.scalars(select(MetricSample)).all() == []
    assert series("spindle_operator_shard_rows_in")[("v.agg0", "p", "0")] == 150
    assert series("spindle_operator_shard_state_rows") == {}


def test_history_stays_oldest_first_after_downsampling(sqlite_db: Database, tmp_path: Path) -> None:
    cfg = Settings(data_dir=tmp_path, metrics_raw_s=3600, metrics_keep_s=86400)
    pid = add_pipeline(sqlite_db)
    with sqlite_db.session() as s:
        s.add_all([sample(pid, MINUTE + i, step=i) for i in range(3)])
        s.add(sample(pid, NOW - 10, step=100))
    with sqlite_db.session() as s:
        metrics.downsample(s, cfg, NOW)
    with sqlite_db.session() as s:
        ts = [r.ts for r in metrics.history(s, pid)]
    assert len(ts) == 2
    assert ts == sorted(ts)


def prometheus_samples(db: Database, name: str) -> dict[tuple[str, ...], float]:
    from backend.services.prometheus import PipelineCollector

    out: dict[tuple[str, ...], float] = {}
    for fam in PipelineCollector(db).collect():
        if fam.name == name:
            for smp in fam.samples:
                out[tuple(smp.labels[k] for k in sorted(smp.labels))] = smp.value
    return out


def test_prometheus_e2e_latency_quantiles_skip_steps_without_one(sqlite_db: Database) -> None:
    """spindle_pipeline_e2e_latency_seconds: quantiles of the recent steps' latency_ms (in
    seconds) over the steps that have one; no series for a pipeline without event times."""
    import time

    a, b = add_pipeline(sqlite_db, "a"), add_pipeline(sqlite_db, "b")
    now = time.time()
    lat = [None, 1000.0, 2000.0, 3000.0, None, 9000.0]
    with sqlite_db.session() as s:
        s.add_all(
            [
                sample(a, now - 30 + i, step=i + 1, step_ms=5, latency_ms=v)
                for i, v in enumerate(lat)
            ]
        )
        s.add(sample(a, now - 3600, step=0, latency_ms=99_000.0))  # outside the window
        s.add_all([sample(b, now - 5 + i, step=i + 1, step_ms=5) for i in range(3)])
    got = prometheus_samples(sqlite_db, "spindle_pipeline_e2e_latency_seconds")
    assert got == {("a", "0.5"): 3.0, ("a", "0.99"): 9.0}
    # The step latency series is unchanged by it: every recent step counts.
    steps = prometheus_samples(sqlite_db, "spindle_pipeline_step_latency_seconds")
    assert steps[("a", "0.5")] == 0.005 and steps[("b", "0.99")] == 0.005


# -- operations --------------------------------------------------------------------------------


def add_ops(db: Database, pid: int, kinds: list[OperationKind]) -> list[str]:
    base = utcnow()
    with db.session() as s:
        p = s.get(Pipeline, pid)
        assert p is not None
        out = []
        for i, kind in enumerate(kinds):
            op = ops.create(s, p, kind, {"n": i})
            op.created_at = base + dt.timedelta(milliseconds=i)  # a total order
            out.append(op.id)
        return out


def test_claim_takes_pending_operations_oldest_first(any_db: Database) -> None:
    pid = add_pipeline(any_db)
    kinds = [OperationKind.gc, OperationKind.restore, OperationKind.commit, OperationKind.gc]
    ids = add_ops(any_db, pid, kinds)
    with any_db.session() as s:
        assert [o.id for o in ops.claim(s, pid, (OperationKind.restore,))] == [ids[1]]
    with any_db.session() as s:
        claimed = ops.claim(s, pid)
        assert [o.id for o in claimed] == [ids[0], ids[2], ids[3]]
        assert all(o.status == OperationStatus.running and o.started_at for o in claimed)
    with any_db.session() as s:
        assert ops.claim(s, pid) == []
        assert ops.claim_one(s, ids[0]) is None
        assert ops.pending_ids(s, pid) == []


def race(db: Database, table: str, work: Callable[[Session], list[T]]) -> list[list[T]]:
    """Two threads run `work` at once, each in its own transaction; what each returned. Both
    read before either updates `table` (a barrier in front of each one's first UPDATE of
    it): the race the conditional updates exist for."""
    barrier = threading.Barrier(2, timeout=20)
    local = threading.local()
    got: list[list[T]] = [[], []]
    errors: list[BaseException] = []
    update = f"UPDATE {table.upper()}"

    def hold(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        first = not getattr(local, "waited", False)
        if first and statement.lstrip().upper().startswith(update):
            local.waited = True
            barrier.wait()

    def racer(k: int) -> None:
        try:
            with db.session() as s:
                got[k] = work(s)
        except BaseException as e:
            errors.append(e)

    event.listen(db.engine, "before_cursor_execute", hold)
    try:
        threads = [threading.Thread(target=racer, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads), "a racer hung"
    finally:
        event.remove(db.engine, "before_cursor_execute", hold)
    assert errors == [], errors
    return got


def race_claims(db: Database, pid: int) -> list[list[str]]:
    return race(db, "operations", lambda s: [o.id for o in ops.claim(s, pid)])


def test_claims_racing_never_share_an_operation(any_db: Database) -> None:
    pid = add_pipeline(any_db)
    for trial in range(3):
        ids = add_ops(any_db, pid, [OperationKind.gc] * 25)
        got = race_claims(any_db, pid)
        assert not set(got[0]) & set(got[1]), trial
        assert sorted(got[0] + got[1]) == sorted(ids)
        for claimed in got:
            assert claimed == [i for i in ids if i in claimed]  # each oldest first
        with any_db.session() as s:
            statuses = s.scalars(select(Operation.status).where(Operation.id.in_(ids))).all()
            assert set(statuses) == {OperationStatus.running}


def test_reapers_racing_restart_a_pipeline_once(any_db: Database, policy: Settings) -> None:
    """Beat's reap tasks can overlap on a busy worker: both see the crashed run and no live
    one; only one may launch a replacement (two drivers would fight over the storage lock)."""
    pid = add_pipeline(any_db, state=PipelineState.restarting)
    add_run(any_db, pid, state=RunState.failed, started_at=at(0), ended_at=at(1))

    def reap_once(s: Session) -> list[int]:
        return [r.id for r in lifecycle.reap(s, policy, at(1000))]

    got = race(any_db, "pipelines", reap_once)
    assert sorted(len(g) for g in got) == [0, 1]
    with any_db.session() as s:
        runs = s.scalars(select(Run).where(Run.pipeline_id == pid).order_by(Run.id)).all()
        assert [(r.number, r.state, r.restart_count) for r in runs] == [
            (1, RunState.failed, 0),
            (2, RunState.starting, 1),
        ]
    assert get_pipeline(any_db, pid).state == PipelineState.starting


def test_starts_racing_create_one_run(any_db: Database) -> None:
    pid = add_pipeline(any_db, desired=DesiredState.stopped, state=PipelineState.stopped)

    def start(s: Session) -> list[int]:
        p = s.get(Pipeline, pid)
        assert p is not None
        try:
            return [lifecycle.start(s, p).id]
        except Conflict:
            return []

    got = race(any_db, "pipelines", start)
    assert sorted(len(g) for g in got) == [0, 1]
    with any_db.session() as s:
        assert len(s.scalars(select(Run).where(Run.pipeline_id == pid)).all()) == 1


def test_a_deleted_pipelines_driver_leaves_alone_the_run_that_reuses_its_id(
    sqlite_db: Database,
) -> None:
    """SQLite gives a deleted row's id to the next row: a driver still exiting after its
    pipeline was deleted (and its supervisor) must not heartbeat, follow or end the other
    pipeline's run that now has its run's id. (In CI a late exit of a deleted pipeline's
    driver ended a new run of another pipeline, whose replacement then found it alive.)"""
    from workers.jobs.control_db import DatabaseControlPlane
    from workers.runtime.control_plane import Report

    gone = add_pipeline(sqlite_db, name="gone")
    run = add_run(sqlite_db, gone, pid=os.getpid(), started_at=utcnow())
    plane = DatabaseControlPlane(sqlite_db, run)
    assert not plane.report(Report(1)).exit
    with sqlite_db.session() as s:
        s.delete(s.get(Pipeline, gone))
    other = add_pipeline(sqlite_db, name="other")
    reused = add_run(sqlite_db, other, pid=os.getpid() + 1, state=RunState.starting)
    assert reused == run  # the scenario: the id came back
    assert plane.report(Report(7)).exit
    with sqlite_db.session() as s:
        assert not lifecycle.vouch_starting(s, run, os.getpid())
        assert lifecycle.vouch_starting(s, run, os.getpid() + 1)
    r = get_run(sqlite_db, reused)
    assert (r.pipeline_id, r.last_step, r.state) == (other, None, RunState.starting)


def test_a_udf_failure_is_the_reason_though_the_jvm_logs_after_it(sqlite_db: Database) -> None:
    """A partitioned run's JVM may log after the driver's reason line: the reason is the
    `udf error:` line, not the log's last."""
    _, run = started_pipeline(sqlite_db)
    tail = (
        "Traceback ...\n"
        f"{exits.UDF_ERROR_HEADING} udf picky failed on row ('user-3'): KeyError: 'x'\n"
        "26/12/07 23:40:01 ERROR Executor: task failed\n"
        "\tat java.base/java.lang.Thread.run(Thread.java:840)\n"
    )
    exited(sqlite_db, run, 1, tail)
    assert get_run(sqlite_db, run).exit_reason == (
        "exited with code 1: udf error: udf picky failed on row ('user-3'): KeyError: 'x'"
    )


def test_api_replicas_starting_together_register_the_configured_token_once(
    any_db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two API replicas both find the configured admin token missing; the second to insert
    it must go on (CI once saw a replica exit on the unique violation)."""
    from backend.models import ApiToken
    from backend.services import tokens

    secret = "spd_configured-admin-token"
    with any_db.session() as s:
        assert tokens.bootstrap_admin(s, tmp_path, secret) is None
    found = tokens.authenticate
    misses = iter([True])
    # The other replica's check ran before this one's insert was committed.
    monkeypatch.setattr(
        tokens, "authenticate", lambda s, t: None if next(misses, False) else found(s, t)
    )
    with any_db.session() as s:
        assert tokens.bootstrap_admin(s, tmp_path, secret) is None
    with any_db.session() as s:
        assert s.scalars(select(ApiToken.name)).all() == [tokens.BOOTSTRAP_NAME]
