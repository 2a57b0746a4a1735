"""Every state change of pipelines and runs goes through here (DESIGN.md §6, §7).

Pipeline: `desired_state` is what the user asked for; `state` is what is happening. A run
is one driver process. The restart policy: a run that died while its pipeline should be
running is replaced after a backoff (restart_backoff_s doubling to restart_backoff_max_s)
from the latest checkpoint; a run that stayed up restart_reset_s starts the backoff over.
At most max_restarts crashes within restart_window_s (counted since the pipeline was last
started by hand): one more and the pipeline is failed and stopped, saying why, so a driver
that crashes every few minutes is not restarted forever.
"""

from __future__ import annotations

import datetime as dt
import signal
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from pipeline_spec.exits import (
    EXIT_FENCED,
    EXIT_INTERRUPTED,
    EXIT_RELAUNCH,
    EXIT_SPEC,
    EXIT_STATE,
    EXIT_STOPPED,
    FENCED_HEADING,
    SPEC_ERROR_HEADING,
    STATE_ERROR_HEADING,
    UDF_ERROR_HEADING,
)

from ..errors import Conflict
from ..models import (
    ENDED_RUN,
    Checkpoint,
    DesiredState,
    Operation,
    OperationKind,
    OperationStatus,
    Pipeline,
    PipelineState,
    Run,
    RunState,
    utcnow,
)
from ..settings import Settings
from . import operations as ops
from . import run_tokens

LIVE_RUN = (RunState.starting, RunState.running)


def live_run(s: Session, p: Pipeline) -> Run | None:
    return s.scalar(
        select(Run).where(Run.pipeline_id == p.id, Run.state.in_(LIVE_RUN)).order_by(Run.id.desc())
    )


def latest_run(s: Session, p: Pipeline) -> Run | None:
    return s.scalar(select(Run).where(Run.pipeline_id == p.id).order_by(Run.id.desc()).limit(1))


def _new_run(
    s: Session,
    p: Pipeline,
    from_checkpoint: str,
    restart_count: int,
    drop_state: list[str] | None = None,
) -> Run:
    last = latest_run(s, p)
    run = Run(
        pipeline_id=p.id,
        number=(last.number + 1) if last else 1,
        state=RunState.starting,
        from_checkpoint=from_checkpoint,
        drop_state=drop_state or None,
        restart_count=restart_count,
    )
    s.add(run)
    s.flush()
    return run


def _claim_start(s: Session, p: Pipeline) -> bool:
    """Move `p` to `starting` only if the database still holds the state this session saw.
    Of two transactions deciding to start the same pipeline (reapers on two worker threads,
    two start requests), the second's conditional update waits for the first to commit and
    then matches nothing: only one run is created. (Neither SQLite nor PostgreSQL's default
    isolation would stop both from seeing "no live run" and inserting one each.)"""
    seen = p.state
    done = s.execute(
        update(Pipeline)
        .where(Pipeline.id == p.id, Pipeline.state == seen)
        .values(state=PipelineState.starting)
        .execution_options(synchronize_session="fetch")
    )
    return bool(getattr(done, "rowcount", 0) == 1)


def start(
    s: Session, p: Pipeline, from_checkpoint: str = "latest", drop_state: list[str] | None = None
) -> Run:
    """A new run from `from_checkpoint`; `drop_state`: the operators that start empty if
    the query changed since (the run's restarts keep it, until a checkpoint of the changed
    query makes it moot)."""
    if p.state not in (PipelineState.stopped, PipelineState.failed):
        raise Conflict(f"pipeline {p.name!r} is {p.state.value}; stop it first")
    if not _claim_start(s, p):
        raise Conflict(f"pipeline {p.name!r} changed state at the same time; try again")
    if from_checkpoint == "latest" and p.restore_point:
        from_checkpoint = p.restore_point
    run = _new_run(s, p, from_checkpoint, 0, drop_state)
    p.desired_state = DesiredState.running
    p.state = PipelineState.starting
    p.error = None
    return run


def request_stop(s: Session, p: Pipeline) -> Run | None:
    """Ask for a stop; returns the live run that will end, or None if none is running."""
    p.desired_state = DesiredState.stopped
    run = live_run(s, p)
    if run is None:
        p.state = PipelineState.stopped
        return None
    p.state = PipelineState.stopping
    return run


def pause(s: Session, p: Pipeline) -> None:
    if p.desired_state == DesiredState.stopped:
        raise Conflict(f"pipeline {p.name!r} is not running")
    p.desired_state = DesiredState.paused


def resume(s: Session, p: Pipeline) -> None:
    if p.desired_state == DesiredState.stopped:
        raise Conflict(f"pipeline {p.name!r} is not running; start it")
    p.desired_state = DesiredState.running


def run_prepared(s: Session, run: Run, log_path: str, host: str) -> str:
    """The run's driver is about to start on `host`, logging to `log_path`; returns the
    run's token, its credential for the REST API's run endpoints until the run ends."""
    run.log_path = log_path
    run.host = host
    return run_tokens.issue(s, run)


def driver_launched(run: Run, pid: int, log_path: str) -> None:
    """The run's driver process is `pid` (a new process, or the spare that took the run over
    and keeps its own log)."""
    run.pid = pid
    run.log_path = log_path


def vouch_starting(s: Session, run_id: int, pid: int) -> bool:
    """While the driver `pid` starts (Spark takes seconds), its supervisor heartbeats for
    it; once running, the driver's own control loop does. True while the run is starting.
    (The pid guards against a run id reused after its pipeline was deleted.)"""
    res = s.execute(
        update(Run)
        .where(Run.id == run_id, Run.pid == pid, Run.state == RunState.starting)
        .values(heartbeat_at=utcnow())
    )
    return bool(getattr(res, "rowcount", 0))


def run_opened(s: Session, run: Run, first_step: int, restored: str | None, pid: int) -> None:
    """The job (process `pid`) restored its state and is about to process."""
    now = utcnow()
    run.pid = pid
    run.state = RunState.running
    run.started_at = now
    run.heartbeat_at = now
    run.first_step = run.last_step = first_step
    run.restored_checkpoint = restored
    p = run.pipeline
    if p.restore_point and restored == p.restore_point:
        p.restore_point = None
    # The previous run's durability problem: this run reports its own, if it has one.
    p.durability_error = p.durability_error_at = None
    if p.desired_state != DesiredState.stopped:
        p.state = (
            PipelineState.paused
            if p.desired_state == DesiredState.paused
            else PipelineState.running
        )


def run_heartbeat(s: Session, run_id: int, pid: int, step: int) -> None:
    """The running driver `pid` is alive at `step` (not if the run is another process's
    now: a run id reused after its pipeline was deleted)."""
    s.execute(
        update(Run)
        .where(Run.id == run_id, or_(Run.pid == pid, Run.pid.is_(None)))
        .values(heartbeat_at=utcnow(), last_step=step)
    )


def run_follows(run: Run | None, paused: bool) -> None:
    """A running run follows its pipeline's desired state: the pipeline shows paused, or
    running again."""
    if run is None or run.state != RunState.running:
        return
    run.pipeline.state = PipelineState.paused if paused else PipelineState.running


def restore_at_next_start(p: Pipeline, checkpoint: str) -> None:
    """A restore of a stopped pipeline: its next start from "latest" resumes from
    `checkpoint` (until a run has opened it)."""
    p.restore_point = checkpoint


# Durability events (`workers.runtime.durability`) that leave the pipeline in trouble, and those
# that end the trouble.
DURABILITY_PROBLEMS = ("commit_failed", "upload_failed", "remote_unavailable", "fenced")
DURABILITY_OK = ("durable", "remote_available")


def durability_reported(p: Pipeline, events: Sequence[tuple[str, str | None]]) -> None:
    """A run's durability events, (kind, message) oldest first: the newest problem shows
    on the pipeline until a checkpoint is durable again."""
    for kind, message in events:
        if kind in DURABILITY_OK:
            p.durability_error = p.durability_error_at = None
        elif kind in DURABILITY_PROBLEMS:
            p.durability_error = (message or kind)[:2000]
            p.durability_error_at = utcnow()


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


@dataclass
class Exit:
    relaunch: Run | None = None  # a run to start right away (restore)
    restart_due: bool = False  # a crash: the reaper should look now


def run_exited(s: Session, run: Run, code: int, log_tail: str = "") -> Exit:
    """Record how a run's driver ended and what happens next."""
    now = utcnow()
    run.ended_at = now
    run.exit_code = code
    run_tokens.revoke(s, run)
    p = run.pipeline
    tail = log_tail.strip()
    _fail_orphans(s, run, code)
    if code == EXIT_RELAUNCH:
        run.state = RunState.stopped
        op = s.scalar(
            select(Operation).where(
                Operation.pipeline_id == p.id,
                Operation.kind == OperationKind.restore,
                Operation.status == OperationStatus.running,
            )
        )
        if op is not None and p.desired_state != DesiredState.stopped:
            run.exit_reason = f"restore of checkpoint {op.params['checkpoint']}"
            nxt = _new_run(s, p, str(op.params["checkpoint"]), 0)
            return Exit(relaunch=nxt)
        run.exit_reason = "stopped for a restore"
        p.state = PipelineState.stopped
        return Exit()
    if code in (EXIT_STOPPED, EXIT_INTERRUPTED) and (
        code == EXIT_INTERRUPTED or p.desired_state == DesiredState.stopped
    ):
        run.state = RunState.stopped
        if code == EXIT_INTERRUPTED:
            run.exit_reason = "interrupted: the worker shut down"
            if p.desired_state != DesiredState.stopped:
                p.state = PipelineState.restarting  # the reaper restarts it when it can
                return Exit()
        else:
            run.exit_reason = "stopped on request"
        p.state = PipelineState.stopped
        return Exit()
    if code == EXIT_STOPPED:
        # The query ended by itself (nothing asked it to): the pipeline is done.
        run.state = RunState.finished
        run.exit_reason = "the stream ended"
        p.state = PipelineState.stopped
        p.desired_state = DesiredState.stopped
        return Exit()
    run.state = RunState.failed
    # A crash's last log line usually says why (a killed process's says nothing useful),
    # unless it is a UDF's failure: the JVM may log after the driver's reason line.
    last_line = tail.splitlines()[-1] if tail and code > 0 else ""
    udf = _heading_line(tail, UDF_ERROR_HEADING) if last_line else ""
    if udf:
        last_line = f"{UDF_ERROR_HEADING} {udf}"
    run.exit_reason = describe_exit(code) + (f": {last_line}" if last_line else "")
    if code in (EXIT_STATE, EXIT_FENCED):
        # Restarting would restore the same checkpoint, or take the prefix back from the
        # writer that fenced this one: fail now, saying why in full.
        heading = STATE_ERROR_HEADING if code == EXIT_STATE else FENCED_HEADING
        reason = _heading_line(tail, heading) or run.exit_reason
        run.exit_reason = reason
        p.state = PipelineState.failed
        p.desired_state = DesiredState.stopped
        p.error = reason
        fail_restores(s, p, reason)
        return Exit()
    if code == EXIT_SPEC:
        p.state = PipelineState.failed
        p.desired_state = DesiredState.stopped
        p.error = _spec_error(tail) or run.exit_reason
        fail_restores(s, p, p.error)
        return Exit()
    if p.desired_state == DesiredState.stopped:
        p.state = PipelineState.stopped
        fail_restores(s, p, f"the pipeline stopped before the restore: {run.exit_reason}")
        return Exit()
    p.state = PipelineState.restarting
    return Exit(restart_due=True)


def _fail_orphans(s: Session, run: Run, code: int) -> None:
    """Operations the run claimed and did not finish (a commit, a gc when it died): nobody
    else will, so they fail now, saying so. A restore stays: the next run completes it."""
    since = run.started_at or run.created_at
    for op in s.scalars(
        select(Operation).where(
            Operation.pipeline_id == run.pipeline_id,
            Operation.status == OperationStatus.running,
            Operation.kind != OperationKind.restore,
            Operation.started_at >= since,
        )
    ):
        ops.fail(op, f"run {run.number} ended before finishing it ({describe_exit(code)})")


def fail_restores(s: Session, p: Pipeline, reason: str) -> None:
    """Fail the pipeline's restore in progress, if any: no run will open its checkpoint now
    (an operation must not stay `running` for ever, blocking every later restore)."""
    for op in s.scalars(
        select(Operation).where(
            Operation.pipeline_id == p.id,
            Operation.kind == OperationKind.restore,
            Operation.status == OperationStatus.running,
        )
    ):
        ops.fail(op, reason)


def _heading_line(tail: str, heading: str) -> str:
    """The driver's one-line error after `heading` from its log (not a traceback's wrapped
    line)."""
    for line in reversed(tail.splitlines()):
        if line.startswith(heading):
            return line[len(heading) :].strip()[:2000]
    return ""


def _spec_error(tail: str) -> str:
    """The driver's spec error (its heading and one line per field) from the end of its log,
    without the Spark output before it; the log's end if the heading is not there."""
    at = tail.rfind(SPEC_ERROR_HEADING)
    return (tail[at:] if at >= 0 else tail[-2000:]).strip()[:2000]


def backoff_s(settings: Settings, restarts: int) -> float:
    """Delay before automatic restart number `restarts` (1, 2, ...): none before the first
    (a crash after a healthy run, or a first crash, restarts at once: recovery time is
    Spark's start-up, not a wait), then `restart_backoff_s` doubling up to the maximum, so
    a pipeline that keeps crashing is retried ever more slowly until it is given up."""
    if restarts <= 1:
        return 0.0
    delay = settings.restart_backoff_s * 2.0 ** (restarts - 2)
    return float(min(delay, settings.restart_backoff_max_s))


def restart_number(settings: Settings, last: Run) -> int:
    """Which consecutive automatic restart would replace the ended run `last`: 0 after a
    worker shutdown (not a failure), 1 after a run that stayed up restart_reset_s, else one
    more than `last`'s."""
    if last.state == RunState.stopped:
        return 0
    healthy = (
        last.started_at is not None
        and last.ended_at is not None
        and (last.ended_at - last.started_at).total_seconds() >= settings.restart_reset_s
    )
    return 1 if healthy else last.restart_count + 1


def crashes_within_window(s: Session, settings: Settings, p: Pipeline, now: dt.datetime) -> int:
    """The pipeline's runs that crashed (failed or lost) within the last restart_window_s,
    since the run a user started (the newest with no automatic restart before it)."""
    since = now - dt.timedelta(seconds=settings.restart_window_s)
    started = s.scalar(
        select(Run.created_at)
        .where(Run.pipeline_id == p.id, Run.restart_count == 0)
        .order_by(Run.number.desc())
        .limit(1)
    )
    if started is not None and started > since:
        since = started
    crashed = select(func.count()).where(
        Run.pipeline_id == p.id,
        Run.state.in_((RunState.failed, RunState.lost)),
        Run.ended_at >= since,
    )
    return int(s.scalar(crashed) or 0)


def restart_delay_s(settings: Settings, last: Run) -> float:
    """Seconds from `last`'s end until the reaper may replace it."""
    n = restart_number(settings, last)
    return backoff_s(settings, n) if n else 0.0


def reap(s: Session, settings: Settings, now: dt.datetime | None = None) -> list[Run]:
    """Mark runs without heartbeats as lost and start replacements for pipelines that should
    run and have no live run, under the restart policy. Returns the runs to launch."""
    now = now or utcnow()
    timeout = dt.timedelta(seconds=settings.heartbeat_timeout_s)
    for run in s.scalars(select(Run).where(Run.state.in_(LIVE_RUN))):
        seen = run.heartbeat_at or run.created_at
        if now - seen > timeout:
            run.state = RunState.lost
            run.ended_at = now
            run_tokens.revoke(s, run)
            run.exit_reason = (
                f"no heartbeat for {settings.heartbeat_timeout_s:g}s (driver or worker lost)"
            )
            if run.pipeline.desired_state != DesiredState.stopped:
                run.pipeline.state = PipelineState.restarting
            else:
                run.pipeline.state = PipelineState.stopped
    launches: list[Run] = []
    wanted = (DesiredState.running, DesiredState.paused)
    for p in s.scalars(select(Pipeline).where(Pipeline.desired_state.in_(wanted))):
        if live_run(s, p) is not None:
            continue
        last = latest_run(s, p)
        if last is None or last.state not in ENDED_RUN:
            continue
        count = restart_number(settings, last)
        crashes = crashes_within_window(s, settings, p, now) if count else 0
        if crashes > settings.max_restarts:
            p.state = PipelineState.failed
            p.desired_state = DesiredState.stopped
            p.error = (
                f"gave up: {crashes} crashes within {_duration(settings.restart_window_s)} "
                f"(max_restarts {settings.max_restarts}); last run: {last.exit_reason}"
            )
            fail_restores(s, p, p.error)
            continue
        ended = last.ended_at or now
        if count and (now - ended).total_seconds() < backoff_s(settings, count):
            continue
        if not _claim_start(s, p):
            continue  # another reaper restarted it
        launches.append(_new_run(s, p, _resume_point(s, p, last), count, last.drop_state))
    return launches


def _duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _resume_point(s: Session, p: Pipeline, ended: Run) -> str:
    """Where the replacement of run `ended` starts: the newest checkpoint, unless `ended`
    was started elsewhere (`none`, or an older checkpoint) and ended before committing one.
    Then the newest checkpoint is state that start was meant to leave behind, so the
    replacement starts where `ended` did. (If the mirror has not seen a commit the manifest
    has, the replacement redoes that run's steps: slower, not wrong, as sinks roll back.)"""
    if ended.from_checkpoint == "latest":
        return "latest"
    since = ended.started_at or ended.created_at
    newer = select(Checkpoint.id).where(
        Checkpoint.pipeline_id == p.id, Checkpoint.created_at >= since
    )
    if s.scalar(newer.limit(1)) is not None:
        return "latest"
    if ended.from_checkpoint == "none":
        return "none"
    kept = select(Checkpoint.id).where(
        Checkpoint.pipeline_id == p.id, Checkpoint.uuid == ended.from_checkpoint
    )
    return ended.from_checkpoint if s.scalar(kept) is not None else "latest"


__all__ = [
    "Exit",
    "backoff_s",
    "crashes_within_window",
    "describe_exit",
    "durability_reported",
    "fail_restores",
    "latest_run",
    "live_run",
    "pause",
    "reap",
    "request_stop",
    "restart_delay_s",
    "restart_number",
    "restore_at_next_start",
    "resume",
    "run_exited",
    "run_follows",
    "run_heartbeat",
    "run_opened",
    "run_prepared",
    "start",
]
