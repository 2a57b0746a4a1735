"""`spindle storage ...`: offline tools over a storage location (no server needed).

Every command but `pull` is read-only (no lock taken, nothing removed), so it can run while a
pipeline owns the location; `pull` creates a new location from the object store. `--json`
prints one JSON document on stdout instead of tables.

Exit codes: 0 all good; 1 something is corrupt or unreadable (each problem is printed with
its file and, for batch files, the block); 2 bad usage or a path that does not exist.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from storage_engine import tools
from storage_engine.errors import StorageError

EXIT_OK = 0
EXIT_CORRUPT = 1
EXIT_USAGE = 2

T = TypeVar("T")

storage_app = typer.Typer(
    help="Inspect, validate and dump storage locations offline.", no_args_is_help=True
)

LocationArg = Annotated[
    Path, typer.Argument(help="Storage location directory.", show_default=False)
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def _console() -> Console:
    # Not a terminal (pipes, tests): a wide fixed width so uuids and paths are never cut.
    # No markup or emoji codes: keys, paths and messages are printed exactly as they are.
    return Console(
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=True,
        width=None if sys.stdout.isatty() else 200,
    )


def _fail(message: str, code: int) -> typer.Exit:
    Console(stderr=True, highlight=False, markup=False, emoji=False, soft_wrap=True).print(
        f"error: {message}"
    )
    return typer.Exit(code)


def _run(fn: Callable[[], T]) -> T:
    """Run a tool; a bad path exits 2, any other storage or OS error exits 1, no traceback."""
    try:
        return fn()
    except tools.ToolPathError as e:
        raise _fail(str(e), EXIT_USAGE) from None
    except (StorageError, OSError) as e:
        raise _fail(str(e), EXIT_CORRUPT) from None


def _emit_json(report: object) -> None:
    typer.echo(json.dumps(tools.to_jsonable(report), indent=2))


def _rel(path: str, root: str) -> str:
    rel = os.path.relpath(path, root)
    return path if rel.startswith("..") else rel


def _print_problems(console: Console, problems: list[tools.Problem], root: str) -> None:
    for p in problems:
        where = _rel(p.path, root)
        if p.block is not None:
            where += f" block {p.block}"
        console.print(f"CORRUPT {where}: {p.message}")


def _when(ts: float) -> str:
    try:
        return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return str(ts)


def _exit_for(problems: list[tools.Problem]) -> None:
    if problems:
        raise typer.Exit(EXIT_CORRUPT)


# -- commands ------------------------------------------------------------------------------


@storage_app.command("inspect")
def inspect_cmd(directory: LocationArg, json_output: JsonOpt = False) -> None:
    """Checkpoints, their spines, batch files and leftovers of a storage location."""
    report = _run(lambda: tools.inspect_location(directory))
    if json_output:
        _emit_json(report)
        _exit_for(report.problems)
        return
    con, root = _console(), report.path
    con.print(f"storage location {root}")
    con.print(
        f"{len(report.checkpoints)} checkpoint(s), {len(report.batch_files)} batch file(s) "
        f"({report.batch_bytes:,} B), {report.total_bytes:,} B in total"
        + ("" if report.manifest_present else "; no manifest")
    )
    for c in report.checkpoints:
        label = f" ({c.identifier})" if c.identifier else ""
        state = "" if c.readable else " (metadata unreadable)"
        con.print(
            f"\ncheckpoint {c.uuid}{label} step {c.step}, {_when(c.created_at)} UTC, "
            f"{c.files} file(s), {c.total_bytes:,} B ({c.new_bytes:,} B new), "
            f"{c.rows:,} rows{state}"
        )
        if c.spines:
            t = Table("spine", "batches", "rows", "bytes", "lower bound")
            for s in c.spines:
                lb = "" if s.lower_bound is None else json.dumps(s.lower_bound, default=str)
                t.add_row(s.op_id, str(s.batch_count), f"{s.rows:,}", f"{s.bytes:,}", lb)
            con.print(t)
    if report.batch_files:
        t = Table("batch file", "bytes", "rows", "blocks", "checkpoints", title="batch files")
        for f in report.batch_files:
            t.add_row(
                f.name,
                f"{f.size:,}",
                "?" if f.rows is None else f"{f.rows:,}",
                "?" if f.blocks is None else str(f.blocks),
                str(len(f.referenced_by)) if f.referenced_by else "unreferenced",
            )
        con.print(t)
    for label, names in (
        ("unreferenced batch files", report.unreferenced),
        ("missing batch files", report.missing),
        ("leftover *.mut files", report.mut_files),
        ("checkpoint directories not in the manifest", report.orphan_dirs),
    ):
        if names:
            con.print(f"{label}: {', '.join(names)}")
    _print_problems(con, report.problems, root)
    _exit_for(report.problems)


@storage_app.command("validate")
def validate_cmd(directory: LocationArg, json_output: JsonOpt = False) -> None:
    """Verify every checksum of a storage location; exit 1 if anything is corrupt."""
    report = _run(lambda: tools.validate_location(directory))
    if json_output:
        _emit_json(report)
        _exit_for(report.problems)
        return
    con = _console()
    _print_problems(con, report.problems, report.path)
    summary = (
        f"{report.checkpoints_checked} checkpoint(s), {report.files_checked} batch file(s), "
        f"{report.blocks_checked} block(s), {report.bytes_checked:,} B checked"
    )
    if report.ok:
        con.print(f"OK {report.path}: {summary}")
    else:
        files = len({p.path for p in report.problems})
        con.print(
            f"FAILED {report.path}: {len(report.problems)} problem(s) in {files} file(s); {summary}"
        )
    _exit_for(report.problems)


@storage_app.command("checkpoints")
def checkpoints_cmd(directory: LocationArg, json_output: JsonOpt = False) -> None:
    """List the checkpoints of a storage location, oldest first."""
    listing = _run(lambda: tools.list_checkpoints(directory))
    if json_output:
        _emit_json(listing)
        _exit_for(listing.problems)
        return
    con = _console()
    if listing.checkpoints:
        t = Table("uuid", "identifier", "step", "created (UTC)", "parent", "files", "bytes", "rows")
        for c in listing.checkpoints:
            t.add_row(
                c.uuid,
                c.identifier or "",
                str(c.step),
                _when(c.created_at),
                c.parent or "",
                str(c.files),
                f"{c.total_bytes:,}",
                f"{c.rows:,}",
            )
        con.print(t)
    elif not listing.problems:
        con.print(f"no checkpoints in {listing.path}")
    _print_problems(con, listing.problems, listing.path)
    _exit_for(listing.problems)


@storage_app.command("dump")
def dump_cmd(
    file: Annotated[Path, typer.Argument(help="A batch file.", show_default=False)],
    limit: Annotated[int, typer.Option(min=0, help="Rows to print.")] = 20,
    json_output: JsonOpt = False,
) -> None:
    """Header, schema, block index and the first rows of one batch file."""
    dump = _run(lambda: tools.dump_batch_file(file, limit))
    if json_output:
        _emit_json(dump)
        _exit_for(dump.problems)
        return
    con = _console()
    root = os.path.dirname(dump.path)
    con.print(f"batch file {dump.path} ({dump.size:,} B)")
    if dump.header is not None and dump.schema is not None:
        h, s = dump.header, dump.schema
        con.print(
            f"format v{h.format_version}, compression {h.compression or 'none'}, "
            f"bloom {f'yes ({h.bloom_probes} probes)' if h.bloom else 'no'}, "
            f"{h.rows:,} rows in {h.blocks} block(s)"
        )
        cols = ", ".join(f"{c.name} {c.type}" for c in s.keys)
        vals = ", ".join(f"{c.name} {c.type}" for c in s.values) or "-"
        con.print(f"keys: {cols}; values: {vals}; schema fingerprint {s.fingerprint}")
        t = Table("block", "offset", "length", "bloom", "rows", "checksum", "first key", "last key")
        for b in dump.blocks:
            t.add_row(
                str(b.block),
                str(b.offset),
                str(b.length),
                str(b.bloom_length),
                str(b.rows),
                f"{b.crc:08x}",
                _key(b.first_key),
                _key(b.last_key),
            )
        con.print(t)
    if dump.rows:
        names = list(dump.rows[0])
        t = Table(*names, title=f"first {len(dump.rows)} row(s)")
        for r in dump.rows:
            t.add_row(*(_cell(r[n]) for n in names))
        con.print(t)
    _print_problems(con, dump.problems, root)
    _exit_for(dump.problems)


@storage_app.command("pull")
def pull_cmd(
    directory: Annotated[
        Path, typer.Argument(help="New (absent or empty) directory to restore into.")
    ],
    checkpoint: Annotated[
        str, typer.Option(help="'latest', or a checkpoint uuid or identifier.")
    ] = "latest",
    lazy: Annotated[
        bool,
        typer.Option(
            "--lazy", help="Fetch only manifest and metadata; batch files come on demand."
        ),
    ] = False,
    fallback: Annotated[
        bool,
        typer.Option(
            "--fallback", help="If an object is missing or corrupt, take the newest intact one."
        ),
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Restore a storage location from the object store (SPINDLE_S3_* settings).

    Downloads every batch file of the chosen checkpoint (with a progress bar) and verifies
    every block, unless --lazy. Takes no ownership: the location becomes the prefix's writer
    only when a pipeline opens it with the object store configured.
    """
    from pydantic import ValidationError
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    from storage_engine.fileio import PosixFileLayer
    from storage_engine.objstore import ObjectStore, ObjectStoreSettings
    from storage_engine.remote_pull import pull

    try:
        store = ObjectStore(ObjectStoreSettings())  # from the env
    except ValidationError as e:
        missing = ", ".join("SPINDLE_S3_" + str(err["loc"][0]).upper() for err in e.errors())
        raise _fail(f"object store not configured: set {missing}", EXIT_USAGE) from None
    show = not json_output and sys.stderr.isatty()
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        disable=not show,
        console=Console(stderr=True),
    ) as bar:
        task = bar.add_task("downloading", total=None)
        result = _run(
            lambda: pull(
                store,
                str(directory),
                PosixFileLayer(),
                checkpoint=checkpoint,
                eager=not lazy,
                fallback=fallback,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )
        )
    c = result.checkpoint
    if json_output:
        _emit_json(
            {
                "directory": str(directory),
                "checkpoint": c.to_json(),
                "skipped": result.skipped,
                "downloaded_bytes": result.downloaded_bytes,
            }
        )
        return
    con = _console()
    con.print(
        f"restored checkpoint {c.uuid} (step {c.step}) from {store.url('')} into {directory}"
        f" ({result.downloaded_bytes:,} B downloaded{', lazy' if lazy else ''})"
    )
    for uid, why in result.skipped.items():
        con.print(f"skipped checkpoint {uid}: {why}")


def _key(values: list[Any]) -> str:
    return ", ".join(_cell(v) for v in values)


def _cell(v: Any) -> str:
    """A value as shown: a decimal with all its digits, as the API gives it (never 0E-8)."""
    return str(tools.to_jsonable(v)) if isinstance(v, Decimal) else str(v)
