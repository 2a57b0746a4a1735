"""Entry point of the `spindle` command."""

from __future__ import annotations

import typer

from .demo import demo
from .storage import storage_app

app = typer.Typer(
    help="Spindle: stateful streaming pipelines on a Python-native LSM storage engine.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(storage_app, name="storage")
app.command()(demo)

if __name__ == "__main__":
    app()
