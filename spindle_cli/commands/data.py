"""`spindle ingest NAME STREAM FILE` (push records into a `log` source) and
`spindle views get NAME VIEW` (read a view's materialized rows).

Ingest sends the file in chunks under the server's request limit (each chunk is one
all-or-nothing request; a CSV chunk repeats the header). A 413 shrinks the chunk to the
limit the server names and resends it, so nothing is sent twice or skipped."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Annotated, Any, Literal

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from .. import output
from ..client import Api, Json, ServerError
from ..output import JsonOpt
from ..session import EXIT_FAILURE, connect, fail, target, usage
from .params import PipelineArg

views_app = typer.Typer(help="Read pipelines' materialized views.", no_args_is_help=True)

AS_OF_HELP = "A checkpoint: latest, a uuid or identifier, or the step it was taken at."
DEFAULT_CHUNK = 4 << 20  # well under the server's default ingest limit (16 MiB)


@dataclass(frozen=True)
class Record:
    line: int  # where it starts in the file, 1-based
    data: bytes


def records(f: IO[bytes], fmt: str) -> Iterator[Record]:
    """The file's records with their line endings; blank lines are skipped. A CSV record
    may span lines inside a quoted field (quotes are balanced at its end)."""
    pending, start, inside = b"", 0, False
    for n, line in enumerate(f, 1):
        if fmt == "csv":
            if not pending:
                start = n
            pending += line
            if line.count(b'"') % 2:
                inside = not inside
            if inside:
                continue
            rec, pending = pending, b""
        else:
            start, rec = n, line
        if rec.strip():
            yield Record(start, rec if rec.endswith(b"\n") else rec + b"\n")
    if pending.strip():
        yield Record(start, pending if pending.endswith(b"\n") else pending + b"\n")


class Chunks:
    """Records grouped into request bodies of at most `limit` bytes, with put-back."""

    def __init__(self, recs: Iterator[Record], header: bytes, limit: int) -> None:
        self._recs = recs
        self._back: list[Record] = []
        self.header = header
        self.limit = limit

    def put_back(self, recs: list[Record]) -> None:
        self._back = recs + self._back

    def _next(self) -> Record | None:
        if self._back:
            return self._back.pop(0)
        return next(self._recs, None)

    def take(self) -> list[Record]:
        out: list[Record] = []
        size = len(self.header)
        while (rec := self._next()) is not None:
            if size + len(rec.data) > self.limit:
                if not out:
                    raise ValueError(
                        f"the record at line {rec.line} ({len(rec.data)} B) does not fit in "
                        f"one request ({self.limit} B)"
                    )
                self._back.insert(0, rec)
                break
            out.append(rec)
            size += len(rec.data)
        return out


def _format(path: str, given: str | None) -> str:
    if given:
        return given
    return "csv" if path.lower().endswith((".csv", ".csv.txt")) else "ndjson"


def _open(path: str) -> tuple[IO[bytes], int | None]:
    if path == "-":
        return sys.stdin.buffer, None
    p = Path(path)
    try:
        return p.open("rb"), p.stat().st_size
    except OSError as e:
        raise usage(f"cannot read {path}: {e.strerror or e}") from None


def ingest(
    name: PipelineArg,
    stream: Annotated[
        str, typer.Argument(metavar="STREAM", help="The log source's stream.", show_default=False)
    ],
    file: Annotated[
        str,
        typer.Argument(
            metavar="FILE",
            help="NDJSON or CSV (with a header) file; `-` reads stdin.",
            show_default=False,
        ),
    ],
    fmt: Annotated[
        Literal["ndjson", "csv"] | None,
        typer.Option("--format", help="Default: csv for *.csv files, else ndjson."),
    ] = None,
    chunk_bytes: Annotated[
        int, typer.Option(min=1024, help="Largest request body, in bytes.")
    ] = DEFAULT_CHUNK,
    json_output: JsonOpt = False,
) -> None:
    """Append records to a pipeline's input log (its `log` source); the pipeline processes
    them in its next steps. Prints the offsets they got."""
    kind = _format(file, fmt)
    f, total = _open(file)
    t = target()
    sent: list[Json] = []
    err = Console(stderr=True)
    progress = Progress(
        TextColumn("ingest {task.fields[records]:,} records"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err,
        disable=not err.is_terminal,
        transient=True,
    )
    try:
        with f, progress, Api(t.url, t.token) as api:
            header = b""
            recs = records(f, kind)
            if kind == "csv":
                first = next(recs, None)
                if first is None:
                    raise usage(f"{file} holds no records")
                header = first.data
            chunks = Chunks(recs, header, chunk_bytes)
            task = progress.add_task("ingest", total=total, records=0)
            done = len(header)
            while batch := chunks.take():
                body = header + b"".join(r.data for r in batch)
                try:
                    sent.append(api.ingest(name, stream, body, kind))
                except ServerError as e:
                    limit = e.details.get("limit_bytes")
                    if (
                        e.code == "payload_too_large"
                        and isinstance(limit, int)
                        and limit < chunks.limit
                    ):
                        chunks.limit = limit - 1024 if limit > 4096 else limit
                        chunks.put_back(batch)
                        continue
                    _partial(sent, batch[0].line)
                    raise fail(e, t) from None
                done += sum(len(r.data) for r in batch)
                progress.update(task, completed=done, records=_total(sent))
    except ValueError as e:  # a record larger than one request
        _partial(sent, None)
        output.error(str(e))
        raise typer.Exit(EXIT_FAILURE) from None
    except ServerError as e:
        raise fail(e, t) from None
    if not sent:
        raise usage(f"{file} holds no records")
    doc = {
        "pipeline": name,
        "stream": stream,
        "records": _total(sent),
        "first_offset": sent[0]["first_offset"],
        "end_offset": sent[-1]["end_offset"],
        "requests": len(sent),
    }
    if json_output:
        output.emit_json(doc)
    else:
        output.say(
            f"ingested {doc['records']:,} records into {name}/{stream}: offsets "
            f"[{doc['first_offset']}, {doc['end_offset']}) in {doc['requests']} request(s)"
        )


def _total(sent: list[Json]) -> int:
    return sum(int(r["records"]) for r in sent)


def _partial(sent: list[Json], line: int | None) -> None:
    if sent:
        at = f" (from line {line} on, nothing was)" if line is not None else ""
        output.note(
            f"{_total(sent):,} records before this were ingested: offsets "
            f"[{sent[0]['first_offset']}, {sent[-1]['end_offset']}){at}"
        )


@views_app.command("get")
def get_view(
    name: PipelineArg,
    view: Annotated[
        str, typer.Argument(metavar="VIEW", help="View (a `view` sink's name).", show_default=False)
    ],
    key: Annotated[
        list[str] | None,
        typer.Option("--key", "-k", help="Value of a leading column; repeat for more columns."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Rows per page.")] = 100,
    page: Annotated[int | None, typer.Option(min=1, help="Page number (1-based).")] = None,
    offset: Annotated[int | None, typer.Option(min=0, help="Rows to skip.")] = None,
    ge: Annotated[
        str | None,
        typer.Option("--ge", help="The column after the --key ones is at least this."),
    ] = None,
    lt: Annotated[
        str | None, typer.Option("--lt", help="The column after the --key ones is below this.")
    ] = None,
    as_of: Annotated[
        str | None,
        typer.Option(
            "--as-of",
            help=f"{AS_OF_HELP} Default: the running pipeline's newest step, else the newest "
            "checkpoint.",
            show_default=False,
        ),
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """A view's rows as of the running pipeline's newest step, else its newest checkpoint,
    or an older retained one (--as-of): by key (--key, and a range of the next column:
    --ge, --lt), or paged."""
    if page is not None and offset is not None:
        raise usage("give either --page or --offset")
    skip = offset if offset is not None else ((page or 1) - 1) * limit
    with connect() as api:
        got = api.view(name, view, key or [], skip, limit, as_of, ge, lt)
    if json_output:
        output.emit_json(got)
        return
    rows: list[dict[str, Any]] = list(got.get("rows") or [])
    if got.get("live"):
        where = f"view {view} of {name} at step {got.get('step')} (live)"
    elif got.get("checkpoint") is None:
        output.say(f"view {view} of {name} has no checkpointed state yet")
        return
    else:
        where = f"view {view} of {name} at step {got.get('step')} (checkpoint {got['checkpoint']})"
    if not rows:
        output.say(f"{where}: no rows")
        return
    _rows_table(rows, where)


@views_app.command("diff")
def diff_view(
    name: PipelineArg,
    view: Annotated[
        str, typer.Argument(metavar="VIEW", help="View (a `view` sink's name).", show_default=False)
    ],
    old: Annotated[str, typer.Option("--from", help=AS_OF_HELP, show_default=False)],
    new: Annotated[str, typer.Option("--to", help=AS_OF_HELP)] = "latest",
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Rows at most.")] = 1000,
    json_output: JsonOpt = False,
) -> None:
    """What changed in a view between two retained checkpoints: each row whose count
    differs, with its weight (+n: n more in --to, -n: n fewer)."""
    with connect() as api:
        got = api.view_diff(name, view, old, new, 0, limit)
    if json_output:
        output.emit_json(got)
        return
    a, b = got["from"], got["to"]
    where = f"view {view} of {name}, step {a['step']} -> step {b['step']}"
    rows: list[dict[str, Any]] = list(got.get("rows") or [])
    if not rows:
        output.say(f"{where}: no change")
        return
    _rows_table(rows, where)


def _rows_table(rows: list[dict[str, Any]], title: str) -> None:
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    output.table(cols, [[output.dash(r.get(c)) for c in cols] for r in rows], title=title)
