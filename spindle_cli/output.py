"""Rendering: tables and messages for people, one JSON document for programs.

Results go to stdout; notes, progress and errors go to stderr, so `--json` output is always
exactly one JSON document on stdout. Text is printed as is (no rich markup or emoji codes),
so names, messages and log lines cannot be mangled.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any

import typer
from rich.console import Console, RenderableType
from rich.table import Table

from .client import ServerError

# A field error's (field, message) -> its position in the user's file, or None.
Locate = Callable[[str, str], str | None]

JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print one JSON document on stdout instead of text.")
]


def _console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    return Console(
        file=stream,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=True,
        # Not a terminal (pipes, tests): wide and fixed, so uuids are never cut.
        width=None if stream.isatty() else 200,
    )


def stdout() -> Console:
    return _console()


def show(renderable: RenderableType) -> None:
    _console().print(renderable)


def emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    sys.stdout.flush()


def say(text: str) -> None:
    """A result line on stdout."""
    _console().print(text)


def note(text: str) -> None:
    """Progress or advice on stderr (never mixed into results)."""
    _console(stderr=True).print(text)


def error(text: str) -> None:
    _console(stderr=True).print(f"error: {text}")


def server_error(e: ServerError, locate: Locate | None = None) -> None:
    """The server's message verbatim, then each field error, on stderr; `locate` gives a
    field error's position in the user's file, if it knows one."""
    err = _console(stderr=True)
    err.print(f"error: {e.message}")
    for f, m in e.errors:
        at = locate(f, m) if locate is not None else None
        text = f"{m} (at {at})" if at else m
        err.print(f"  {f}: {text}" if f else f"  {text}")


def make_table(columns: Sequence[str], title: str | None = None) -> Table:
    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c, overflow="fold")
    return t


def table(columns: Sequence[str], rows: Iterable[Sequence[str]], title: str | None = None) -> None:
    t = make_table(columns, title)
    for r in rows:
        t.add_row(*r)
    _console().print(t)


def fields(pairs: Sequence[tuple[str, str]]) -> None:
    """`key: value` lines with the values aligned."""
    width = max((len(k) for k, _ in pairs), default=0) + 1
    con = _console()
    for k, v in pairs:
        con.print(f"{k + ':':<{width}} {v}")


# -- value formats ---------------------------------------------------------------------------


def dash(v: object) -> str:
    return "-" if v is None or v == "" else str(v)


def when(v: object) -> str:
    """An API timestamp (ISO 8601) as `YYYY-MM-DD HH:MM:SS` UTC."""
    if not isinstance(v, str) or not v:
        return "-"
    try:
        t = dt.datetime.fromisoformat(v)
    except ValueError:
        return v
    if t.tzinfo is not None:
        t = t.astimezone(dt.UTC)
    return t.strftime("%Y-%m-%d %H:%M:%S")


def size(n: object) -> str:
    if not isinstance(n, int | float):
        return "-"
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(x) < 1024 or unit == "GiB":
            return f"{int(x)} B" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{x:.1f} GiB"  # unreachable


def millis(v: object) -> str:
    return f"{float(v):.1f}" if isinstance(v, int | float) else "-"


def count(v: object) -> str:
    return f"{v:,}" if isinstance(v, int) else dash(v)


def yes(v: object) -> str:
    return "yes" if v else "no"
