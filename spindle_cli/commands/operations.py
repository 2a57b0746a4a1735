"""Asynchronous commands (commit, gc, delete checkpoint, restore, stop) return an operation:
`report` prints it, or with `--wait` polls `GET /api/v1/operations/{id}` until it is done
and prints its result (exit 0) or its error (exit 1). `spindle operations get` reads one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from .. import output
from ..client import DONE, Api, Json
from ..output import JsonOpt
from ..session import EXIT_FAILURE, connect

operations_app = typer.Typer(help="Asynchronous commands' status.", no_args_is_help=True)

WaitOpt = Annotated[bool, typer.Option("--wait", help="Wait until the operation is done.")]
TimeoutOpt = Annotated[
    float, typer.Option("--timeout", min=0.1, help="Seconds to wait with --wait.")
]
DEFAULT_TIMEOUT_S = 180.0


def describe(op: Json) -> str:
    """A finished operation's result in words."""
    res: dict[str, Any] = op.get("result") or {}
    kind = op.get("kind")
    if kind == "commit":
        return f"checkpoint {res.get('checkpoint')} at step {res.get('step')}"
    if kind in ("gc", "delete_checkpoint"):
        deleted = list(res.get("deleted") or [])
        what = ", ".join(deleted) if deleted else "nothing"
        return (
            f"deleted {len(deleted)} checkpoint(s): {what}; "
            f"{res.get('files_removed', 0)} file(s) removed, "
            f"{output.size(res.get('bytes_freed', 0))} freed"
        )
    if kind == "restore":
        applies = res.get("applies")
        tail = f" ({applies})" if applies else ""
        return f"restored checkpoint {res.get('checkpoint')} at step {res.get('step')}{tail}"
    if kind == "stop":
        if res.get("checkpoint"):
            return f"stopped with checkpoint {res['checkpoint']} at step {res.get('step')}"
        if res.get("note"):
            return f"stopped ({res['note']})"
        return f"stopped at step {output.dash(res.get('step'))}"
    return str(res)


def report(
    api: Api,
    op: Json,
    *,
    wait: bool,
    timeout_s: float,
    json_output: bool,
    then: Callable[[Json], None] | None = None,
) -> None:
    """Print an operation (waiting first with `wait`); exit 1 if it failed or timed out.
    `then` runs after a succeeded operation, still within the wait (e.g. until stopped)."""
    if wait:
        op = api.wait_operation(op, timeout_s)
        if op.get("status") == "succeeded" and then is not None:
            then(op)
    status = op.get("status")
    if json_output:
        output.emit_json(op)
    elif status == "succeeded":
        output.say(describe(op))
    elif status != "failed":
        output.say(f"operation {op['id']} ({op.get('kind')}): {status}")
    if status == "failed":
        output.error(f"operation {op['id']} ({op.get('kind')}) failed: {op.get('error')}")
        raise typer.Exit(EXIT_FAILURE)
    if wait and status not in DONE:
        output.error(
            f"operation {op['id']} is still {status} after {timeout_s:g} s; "
            f"check with `spindle operations get {op['id']} --wait`"
        )
        raise typer.Exit(EXIT_FAILURE)
    if not wait and status not in DONE and not json_output:
        output.note(f"follow it with `spindle operations get {op['id']} --wait`")


@operations_app.command("get")
def get(
    op_id: Annotated[str, typer.Argument(metavar="ID", help="Operation id.", show_default=False)],
    wait: WaitOpt = False,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    json_output: JsonOpt = False,
) -> None:
    """An operation's status, with its result or error."""
    with connect() as api:
        op = api.operation(op_id)
        if wait:
            op = api.wait_operation(op, timeout)
    if json_output:
        output.emit_json(op)
    else:
        output.fields(
            [
                ("id", str(op["id"])),
                ("pipeline", str(op.get("pipeline"))),
                ("kind", str(op.get("kind"))),
                ("status", str(op.get("status"))),
                ("created", output.when(op.get("created_at"))),
                ("finished", output.when(op.get("finished_at"))),
                ("result", describe(op) if op.get("status") == "succeeded" else "-"),
                ("error", output.dash(op.get("error"))),
            ]
        )
    if op.get("status") == "failed":
        raise typer.Exit(EXIT_FAILURE)
    if wait and op.get("status") not in DONE:
        output.error(f"operation {op_id} is still {op.get('status')} after {timeout:g} s")
        raise typer.Exit(EXIT_FAILURE)
