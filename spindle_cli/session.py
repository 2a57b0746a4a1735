"""One command's connection: resolve the target (config.resolve), open an `Api`, and turn
every failure into a message and an exit code (EXIT_FAILURE for the server's or the
network's, EXIT_USAGE for a bad profile or file), never a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer

from . import config, output
from .client import Api, ServerError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


_selected: list[str | None] = [None]


def select_profile(name: str | None) -> None:
    """Set by the root `--profile` option (or SPINDLE_PROFILE, which Typer reads into it)
    before any command runs."""
    _selected[0] = name


def target() -> config.Target:
    try:
        return config.resolve(_selected[0])
    except config.ConfigError as e:
        output.error(str(e))
        raise typer.Exit(EXIT_USAGE) from None


def fail(
    e: ServerError, t: config.Target | None = None, locate: output.Locate | None = None
) -> typer.Exit:
    output.server_error(e, locate)
    if e.status == 401 and t is not None and t.token is None:
        output.note(
            "hint: no token is configured; export SPINDLE_TOKEN or run "
            "`spindle profile set NAME --url URL --token TOKEN`"
        )
    return typer.Exit(EXIT_FAILURE)


@contextmanager
def connect(timeout_s: float = 30.0, locate: output.Locate | None = None) -> Iterator[Api]:
    """An Api for the selected target; a ServerError inside the block exits 1 (`locate`:
    where its field errors are in the user's file, `output.server_error`)."""
    t = target()
    try:
        with Api(t.url, t.token, timeout_s=timeout_s) as api:
            yield api
    except ServerError as e:
        raise fail(e, t, locate) from None


def usage(message: str) -> typer.Exit:
    """A usage error found after parsing (exit 2, like Typer's own)."""
    output.error(message)
    return typer.Exit(EXIT_USAGE)


def failure(message: str) -> typer.Exit:
    output.error(message)
    return typer.Exit(EXIT_FAILURE)
