"""Entry point of the `spindle` command: mounts the command groups (spindle_cli/commands/*) and the
offline tools (`storage`, `demo`)."""

from __future__ import annotations

import importlib
from typing import Annotated, Any

import typer
import typer.core
import typer.main

from backend.version import installed_version

from .commands import data, lifecycle, observe
from .commands.checkpoints import checkpoints_app, retention_app
from .commands.operations import operations_app
from .commands.pipelines import pipelines_app
from .commands.profiles import profile_app
from .commands.tokens import tokens_app
from .config import ENV_PROFILE
from .session import select_profile

# The offline tools load the storage engine (numpy, pyarrow: about a second); they are
# imported only when invoked or listed, so the REST commands start fast.
_LAZY = {"storage": ("spindle_cli.storage", "storage_app"), "demo": ("spindle_cli.demo", "demo")}


class _Group(typer.core.TyperGroup):
    def list_commands(self, ctx: Any) -> list[str]:
        return [*super().list_commands(ctx), *_LAZY]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in _LAZY:
            return super().get_command(ctx, cmd_name)
        if cmd_name not in self.commands:
            module, attr = _LAZY[cmd_name]
            obj = getattr(importlib.import_module(module), attr)
            if isinstance(obj, typer.Typer):
                cmd: Any = typer.main.get_group(obj)
            else:
                single = typer.Typer(add_completion=False)
                single.command(name=cmd_name)(obj)
                cmd = typer.main.get_command(single)
            cmd.name = cmd_name
            self.commands[cmd_name] = cmd
        return self.commands[cmd_name]


app = typer.Typer(
    cls=_Group,
    help="Spindle: stateful streaming pipelines on a Python-native LSM storage engine.\n\n"
    "Talks to a Spindle server's REST API: SPINDLE_URL and SPINDLE_TOKEN, or a profile "
    "(`spindle profile set`). Exit codes: 0 success, 1 failure reported by the server or "
    "an unreachable server, 2 usage error.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"spindle {installed_version()}")
        raise typer.Exit()


@app.callback()
def root(
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile", "-p", envvar=ENV_PROFILE, help="Profile to use (see `spindle profile`)."
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the installed version and exit.",
        ),
    ] = False,
) -> None:
    select_profile(profile)


app.add_typer(profile_app, name="profile")
app.add_typer(pipelines_app, name="pipelines")
app.command("start")(lifecycle.start)
app.command("stop")(lifecycle.stop)
app.command("pause")(lifecycle.pause)
app.command("resume")(lifecycle.resume)
app.command("wait")(lifecycle.wait)
app.add_typer(checkpoints_app, name="checkpoints")
app.add_typer(retention_app, name="retention")
app.add_typer(operations_app, name="operations")
app.command("runs")(observe.runs)
app.command("logs")(observe.logs)
app.command("metrics")(observe.metrics)
app.command("dataflow")(observe.dataflow)
app.command("ingest")(data.ingest)
app.add_typer(data.views_app, name="views")
app.add_typer(tokens_app, name="tokens")

if __name__ == "__main__":
    app()
