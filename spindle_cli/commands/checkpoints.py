"""`spindle checkpoints ...` (list, commit, gc, delete, pin, restore) and
`spindle retention get|set` (the pipeline's retention and auto-commit policy)."""

from __future__ import annotations

import re
from typing import Annotated, Any

import typer

from .. import output
from ..client import Json
from ..output import JsonOpt
from ..session import connect
from .operations import DEFAULT_TIMEOUT_S, TimeoutOpt, WaitOpt, report
from .params import CheckpointArg, PipelineArg

checkpoints_app = typer.Typer(
    help="List, take, collect, delete, pin and restore checkpoints.", no_args_is_help=True
)
retention_app = typer.Typer(
    help="Read or change a pipeline's retention and auto-commit policy.", no_args_is_help=True
)


@checkpoints_app.command("ls")
def list_checkpoints(name: PipelineArg, json_output: JsonOpt = False) -> None:
    """A pipeline's checkpoints, oldest first."""
    with connect() as api:
        cps = api.checkpoints(name)
    if json_output:
        output.emit_json(cps)
        return
    if not cps:
        output.say(f"{name} has no checkpoints")
        return
    output.table(
        ["uuid", "identifier", "step", "created (UTC)", "size", "new", "ms", "durable", "pinned"],
        [
            [
                str(c["uuid"]),
                output.dash(c.get("identifier")),
                str(c.get("step")),
                output.when(c.get("created_at")),
                output.size(c.get("size_bytes")),
                output.size(c.get("new_bytes")),
                output.millis(c.get("duration_ms")),
                "remote"
                if c.get("remote_durable")
                else ("local" if c.get("local_durable") else "no"),
                "pinned" if c.get("pinned") else "",
            ]
            for c in cps
        ],
    )


@checkpoints_app.command("commit")
def commit(
    name: PipelineArg,
    identifier: Annotated[
        str | None, typer.Option(help="A human name for the checkpoint ([A-Za-z0-9_.:-]).")
    ] = None,
    wait: WaitOpt = False,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    json_output: JsonOpt = False,
) -> None:
    """Take a checkpoint of a running pipeline."""
    with connect() as api:
        report(
            api, api.commit(name, identifier), wait=wait, timeout_s=timeout, json_output=json_output
        )


@checkpoints_app.command("gc")
def gc(
    name: PipelineArg,
    keep: Annotated[
        int | None,
        typer.Option(min=0, help="Delete the oldest unpinned ones until this many remain."),
    ] = None,
    wait: WaitOpt = False,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    json_output: JsonOpt = False,
) -> None:
    """Delete the oldest unpinned checkpoint (or down to --keep) and unreferenced files.
    Pinned checkpoints and the newest one are never deleted."""
    with connect() as api:
        report(api, api.gc(name, keep), wait=wait, timeout_s=timeout, json_output=json_output)


@checkpoints_app.command("rm")
def remove(
    name: PipelineArg,
    uuid: CheckpointArg,
    wait: WaitOpt = False,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    json_output: JsonOpt = False,
) -> None:
    """Delete one checkpoint (not a pinned one)."""
    with connect() as api:
        report(
            api,
            api.delete_checkpoint(name, uuid),
            wait=wait,
            timeout_s=timeout,
            json_output=json_output,
        )


def _pin(name: str, uuid: str, pinned: bool, json_output: bool) -> None:
    with connect() as api:
        c = api.pin(name, uuid, pinned)
    if json_output:
        output.emit_json(c)
    else:
        output.say(f"{'pinned' if c.get('pinned') else 'unpinned'} checkpoint {c['uuid']}")


@checkpoints_app.command("pin")
def pin(name: PipelineArg, uuid: CheckpointArg, json_output: JsonOpt = False) -> None:
    """Pin a checkpoint: gc and retention never delete it."""
    _pin(name, uuid, True, json_output)


@checkpoints_app.command("unpin")
def unpin(name: PipelineArg, uuid: CheckpointArg, json_output: JsonOpt = False) -> None:
    """Unpin a checkpoint."""
    _pin(name, uuid, False, json_output)


@checkpoints_app.command("restore")
def restore(
    name: PipelineArg,
    uuid: CheckpointArg,
    wait: WaitOpt = False,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    json_output: JsonOpt = False,
) -> None:
    """Make a checkpoint the live state: a running pipeline restarts from it (a new run,
    done when that run has opened it); a stopped one resumes from it at its next start."""
    with connect() as api:
        report(api, api.restore(name, uuid), wait=wait, timeout_s=timeout, json_output=json_output)


# -- retention -------------------------------------------------------------------------------

_DURATION = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_OFF = ("none", "off")


def parse_duration(text: str, hint: str) -> float | None:
    """`90`, `90s`, `500ms`, `10m`, `1.5h`, `7d` as seconds; `none`/`off` as None."""
    t = text.strip().lower()
    if t in _OFF:
        return None
    m = _DURATION.match(t)
    if m is None:
        raise typer.BadParameter(
            f"{text!r} is not a duration like 30s, 10m, 2h, 7d or none", param_hint=hint
        )
    seconds = float(m.group(1)) * _UNIT_S[m.group(2) or "s"]
    if seconds <= 0:
        raise typer.BadParameter("a duration must be positive (or none)", param_hint=hint)
    return seconds


def parse_count(text: str, hint: str) -> int | None:
    t = text.strip().lower()
    if t in _OFF:
        return None
    if not t.isdigit() or int(t) < 1:
        raise typer.BadParameter(f"{text!r} is not a count of at least 1 or none", param_hint=hint)
    return int(t)


def seconds_text(v: Any) -> str:
    if not isinstance(v, int | float):
        return "none"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if v >= size and v % size == 0:
            return f"{int(v // size)}{unit}"
    return f"{v:g}s"


def _show_retention(name: str, pol: Json) -> None:
    output.fields(
        [
            ("pipeline", name),
            ("keep_last", output.dash(pol.get("keep_last")) if pol.get("keep_last") else "none"),
            ("max_age_s", seconds_text(pol.get("max_age_s"))),
            ("min_keep", str(pol.get("min_keep"))),
            ("auto_commit_interval_s", seconds_text(pol.get("auto_commit_interval_s"))),
        ]
    )


@retention_app.command("get")
def get_retention(name: PipelineArg, json_output: JsonOpt = False) -> None:
    """The retention policy (keep_last, max_age_s, min_keep) and the auto-commit interval."""
    with connect() as api:
        pol = api.get_retention(name)
    if json_output:
        output.emit_json(pol)
    else:
        _show_retention(name, pol)


@retention_app.command("set")
def set_retention(
    name: PipelineArg,
    keep_last: Annotated[
        str | None, typer.Option(help="Keep at most N checkpoints (keep_last); `none` unsets.")
    ] = None,
    max_age: Annotated[
        str | None,
        typer.Option(help="Delete checkpoints older than this (max_age_s): 30s, 10m, 7d, none."),
    ] = None,
    min_keep: Annotated[
        int | None, typer.Option(min=0, help="Always keep at least N (min_keep).")
    ] = None,
    auto_commit: Annotated[
        str | None,
        typer.Option(help="Commit every interval while running (auto_commit_interval_s); none."),
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Change the policy; options not given keep their current values."""
    changes: dict[str, Any] = {}
    if keep_last is not None:
        changes["keep_last"] = parse_count(keep_last, "--keep-last")
    if max_age is not None:
        changes["max_age_s"] = parse_duration(max_age, "--max-age")
    if min_keep is not None:
        changes["min_keep"] = min_keep
    if auto_commit is not None:
        changes["auto_commit_interval_s"] = parse_duration(auto_commit, "--auto-commit")
    with connect() as api:
        pol = api.get_retention(name)
        body = {
            k: pol.get(k) for k in ("keep_last", "max_age_s", "min_keep", "auto_commit_interval_s")
        }
        body.update(changes)
        pol = api.put_retention(name, body)
    if json_output:
        output.emit_json(pol)
    else:
        _show_retention(name, pol)
