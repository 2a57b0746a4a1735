"""`spindle start|stop|pause|resume NAME`: a pipeline's lifecycle. `--wait` polls the
pipeline until it reaches the requested state (or fails: exit 1)."""

from __future__ import annotations

import re
import time
from typing import Annotated

import typer

from .. import output
from ..client import Api, Json
from ..output import JsonOpt
from ..session import EXIT_FAILURE, connect
from .operations import DEFAULT_TIMEOUT_S, TimeoutOpt, WaitOpt, report
from .params import PipelineArg

_FROM = re.compile(r"^(latest|none|[0-9a-f-]{36})$")


def _check_not_ended(api: Api, name: str, p: Json) -> None:
    """Exit 1 if the pipeline failed or stopped for good (nothing more will happen)."""
    state = p.get("state")
    if state == "failed":
        output.error(f"pipeline {name} failed: {p.get('error')}")
        output.note(f"see `spindle logs {name}` and `spindle runs {name}`")
        raise typer.Exit(EXIT_FAILURE)
    if state == "stopped" and p.get("desired_state") == "stopped":
        # It will not get anywhere else by itself (e.g. its source ended).
        runs = api.runs(name, limit=1)
        why = runs[0].get("exit_reason") if runs else None
        output.error(f"pipeline {name} stopped" + (f": {why}" if why else ""))
        raise typer.Exit(EXIT_FAILURE)


def wait_state(api: Api, name: str, goal: tuple[str, ...], timeout_s: float) -> Json:
    """Poll until the pipeline's state is in `goal`; exit 1 if it fails, stops for good or
    time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        p = api.get_pipeline(name)
        state = p.get("state")
        if state in goal:
            return p
        _check_not_ended(api, name, p)
        if time.monotonic() >= deadline:
            output.error(
                f"pipeline {name} is still {state} after {timeout_s:g} s "
                f"(waiting for {' or '.join(goal)})"
            )
            raise typer.Exit(EXIT_FAILURE)
        time.sleep(0.5)


def _summary(p: Json) -> str:
    run = p.get("current_run") or {}
    where = f" (run #{run['number']})" if run else ""
    return f"{p['name']} is {p['state']}{where}"


def _from_checkpoint(value: str) -> str:
    if not _FROM.match(value):
        raise typer.BadParameter("expected latest, none or a checkpoint uuid")
    return value


def start(
    name: PipelineArg,
    from_checkpoint: Annotated[
        str,
        typer.Option(
            "--from-checkpoint",
            help="latest (resume), none (fresh state) or a checkpoint uuid.",
            callback=_from_checkpoint,
        ),
    ] = "latest",
    drop_state: Annotated[
        list[str] | None,
        typer.Option(
            "--drop-state",
            help="After a change to the query: this operator (as `spindle dataflow` names "
            "it) starts empty if its state no longer fits; repeat for several, `*` for all "
            "such. The others keep their state.",
        ),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until it is running.")] = False,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    json_output: JsonOpt = False,
) -> None:
    """Start a pipeline: a new run resumes from a checkpoint."""
    with connect() as api:
        p = api.start(name, from_checkpoint, drop_state or ())
        if wait:
            p = wait_state(api, name, ("running", "paused", "stopped"), timeout)
    if json_output:
        output.emit_json(p)
    else:
        output.say(_summary(p))


def stop(
    name: PipelineArg,
    checkpoint: Annotated[
        bool, typer.Option("--checkpoint", help="Take a checkpoint before stopping.")
    ] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until it has stopped.")] = False,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    json_output: JsonOpt = False,
) -> None:
    """Stop a pipeline (an operation; with --checkpoint its result names the checkpoint)."""
    with connect() as api:

        def until_stopped(_: Json) -> None:  # the operation is done before the run ends
            wait_state(api, name, ("stopped",), timeout)

        op = api.stop(name, checkpoint)
        report(api, op, wait=wait, timeout_s=timeout, json_output=json_output, then=until_stopped)


def _desire(name: str, action: str, goal: str, wait: bool, timeout: float, as_json: bool) -> None:
    with connect() as api:
        p = api.pause(name) if action == "pause" else api.resume(name)
        if wait:
            p = wait_state(api, name, (goal,), timeout)
    if as_json:
        output.emit_json(p)
    else:
        output.say(_summary(p))


def pause(
    name: PipelineArg,
    wait: WaitOpt = False,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    json_output: JsonOpt = False,
) -> None:
    """Pause processing; the run and its state stay open."""
    _desire(name, "pause", "paused", wait, timeout, json_output)


def resume(
    name: PipelineArg,
    wait: WaitOpt = False,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    json_output: JsonOpt = False,
) -> None:
    """Resume a paused pipeline."""
    _desire(name, "resume", "running", wait, timeout, json_output)


def wait(
    name: PipelineArg,
    state: Annotated[
        str | None,
        typer.Option(help="Wait for this state: running, paused, stopped, ..."),
    ] = None,
    step: Annotated[
        int | None,
        typer.Option(min=0, help="Wait until the current run has completed this step."),
    ] = None,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    json_output: JsonOpt = False,
) -> None:
    """Wait until a pipeline is in a state and/or has reached a step (exit 1 on failure or
    timeout). Without options: until it is running."""
    goal = state or ("running" if step is None else None)
    deadline = time.monotonic() + timeout
    with connect() as api:
        p = api.get_pipeline(name)
        if goal is not None:
            p = wait_state(api, name, (goal,), timeout)
        while step is not None:
            last = p.get("last_step")
            run = p.get("current_run") or {}
            if last is not None and last >= step and run.get("state") == "running":
                break
            _check_not_ended(api, name, p)
            if time.monotonic() >= deadline:
                output.error(f"pipeline {name} is at step {last} after {timeout:g} s")
                raise typer.Exit(EXIT_FAILURE)
            time.sleep(0.5)
            p = api.get_pipeline(name)
    if json_output:
        output.emit_json(p)
    else:
        at = f", step {p.get('last_step')}" if p.get("last_step") is not None else ""
        output.say(f"{_summary(p)}{at}")
