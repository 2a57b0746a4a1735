"""`spindle runs|logs|metrics|dataflow NAME`: a pipeline's run history, driver log, metrics
and dataflow.

`logs -f` follows by polling the log tail and printing what was appended; `metrics --watch`
keeps a live table fed by the Server-Sent Events stream; `dataflow --watch` polls."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from typing import Annotated

import typer
from rich.live import Live
from rich.table import Table

from .. import output
from ..client import Json
from ..output import JsonOpt
from ..session import EXIT_OK, connect, usage
from .params import PipelineArg


def runs(
    name: PipelineArg,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Newest N runs.")] = 20,
    json_output: JsonOpt = False,
) -> None:
    """Run history, newest first: state, exit reason, restarts, steps."""
    with connect() as api:
        rs = api.runs(name, limit)
    if json_output:
        output.emit_json(rs)
        return
    if not rs:
        output.say(f"{name} has no runs")
        return

    def steps(r: Json) -> str:
        first, last = r.get("first_step"), r.get("last_step")
        return "-" if last is None else f"{output.dash(first)}..{last}"

    def ended(r: Json) -> str:
        code, reason = r.get("exit_code"), r.get("exit_reason")
        if code is None and not reason:
            return "-"
        return f"{output.dash(code)}: {output.dash(reason)}"

    output.table(
        ["run", "state", "from", "restored", "restarts", "started", "ended", "steps", "exit"],
        [
            [
                f"#{r['number']}",
                str(r.get("state")),
                str(r.get("from_checkpoint")),
                output.dash(r.get("restored_checkpoint")),
                str(r.get("restart_count", 0)),
                output.when(r.get("started_at")),
                output.when(r.get("ended_at")),
                steps(r),
                ended(r),
            ]
            for r in rs
        ],
    )


def appended(old: Sequence[str], new: Sequence[str]) -> list[str]:
    """The lines of tail `new` that were not in the earlier tail `old` of the same log.

    Both are the last lines of a growing file, so `new` starts with a suffix of `old` and
    continues with what was appended; the longest such overlap wins. The first line of a
    tail may be cut short (the server tails by bytes), so it only has to match the end of
    the line it overlaps."""
    for k in range(min(len(old), len(new)), 0, -1):
        a, b = new[0], old[len(old) - k]
        if list(new[1:k]) == list(old[len(old) - k + 1 :]) and (a.endswith(b) or b.endswith(a)):
            return list(new[k:])
    return list(new)


def as_displayed(line: str) -> str:
    """A log line as a terminal leaves it: progress bars redraw with carriage returns."""
    return line.rstrip("\r").rsplit("\r", 1)[-1]


def logs(
    name: PipelineArg,
    lines: Annotated[int, typer.Option("--lines", "-n", min=1, max=10_000)] = 200,
    run: Annotated[int | None, typer.Option(min=1, help="Run number (default: latest).")] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines (Ctrl-C ends).")
    ] = False,
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between polls with -f.")] = 1.0,
    json_output: JsonOpt = False,
) -> None:
    """The tail of a run's driver log."""
    if follow and json_output:
        raise usage("--json cannot be combined with --follow")
    with connect() as api:
        got = api.logs(name, lines, run)
        if json_output:
            output.emit_json(got)
            return
        con = output.stdout()
        if got.get("run") is None:
            output.note(f"{name} has not run yet")
        for line in got.get("lines") or []:
            con.print(as_displayed(line))
        if not follow:
            return
        prev_run, prev = got.get("run"), list(got.get("lines") or [])
        window = max(lines, 1000)
        try:
            while True:
                time.sleep(interval)
                got = api.logs(name, window, run)
                cur = list(got.get("lines") or [])
                if got.get("run") != prev_run:
                    output.note(f"--- run #{got.get('run')} ---")
                    fresh = cur
                else:
                    fresh = appended(prev, cur)
                for line in fresh:
                    con.print(as_displayed(line))
                prev_run, prev = got.get("run"), cur
        except KeyboardInterrupt:
            raise typer.Exit(EXIT_OK) from None


METRIC_COLUMNS = [
    ("step", "step"),
    ("rows in", "rows_in"),
    ("rows out", "rows_out"),
    ("step ms", "step_ms"),
    ("spark ms", "spark_ms"),
    ("engine ms", "engine_ms"),
    ("commit ms", "commit_ms"),
    ("state rows", "state_rows"),
    ("state size", "state_bytes"),
    ("batches", "spine_batches"),
    ("backlog", "merge_backlog"),
]


def _metric_row(m: Json) -> list[str]:
    row = [time.strftime("%H:%M:%S", time.gmtime(float(m.get("ts") or 0)))]
    for _, key in METRIC_COLUMNS:
        v = m.get(key)
        if key == "state_bytes":
            row.append(output.size(v))
        elif key.endswith("_ms"):
            row.append(output.millis(v))
        else:
            row.append(output.count(v))
    return row


def _metric_table(samples: Sequence[Json], title: str) -> Table:
    t = output.make_table(["time (UTC)", *(c for c, _ in METRIC_COLUMNS)], title=title)
    for m in samples:
        t.add_row(*_metric_row(m))
    return t


def metrics(
    name: PipelineArg,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Newest N samples.")] = 20,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="A live table from the metrics stream.")
    ] = False,
    count: Annotated[
        int | None, typer.Option(min=1, help="With --watch: stop after N new steps.")
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Per-step metrics: rows, time split (Spark, engine, commit), state size."""
    if watch and json_output:
        raise usage("--json cannot be combined with --watch")
    with connect() as api:
        if not watch:
            samples = api.metrics(name, limit)
            if json_output:
                output.emit_json(samples)
            elif not samples:
                output.say(f"{name} has no metrics yet")
            else:
                output.show(_metric_table(samples, f"{name}: last {len(samples)} samples"))
            return
        # The recent history first, then the stream from the newest sample on.
        shown: deque[Json] = deque(api.metrics(name, limit), maxlen=limit)
        after = max((int(m["id"]) for m in shown if m.get("resolution_s") == 0), default=None)
        title = f"{name}: live (Ctrl-C ends)"
        seen = 0
        try:
            table, con = _metric_table(list(shown), title), output.stdout()
            with Live(table, console=con, auto_refresh=False) as live:
                for sample in api.metric_events(name, after=after):
                    shown.append(sample)
                    live.update(_metric_table(list(shown), title), refresh=True)
                    seen += 1
                    if count is not None and seen >= count:
                        break
            if not con.is_terminal:
                con.line()  # the final table is printed without one
        except KeyboardInterrupt:
            raise typer.Exit(EXIT_OK) from None


_FIGURES = ("rows_in", "rows_out", "step_ms", "state_rows", "state_bytes")


def _figures(m: Json) -> list[str]:
    """An operator's (or operator-shard's) figures as the dataflow table's last columns."""
    return [
        output.count(m.get("rows_in")),
        output.count(m.get("rows_out")),
        output.millis(m.get("step_ms")),
        output.count(m.get("state_rows")),
        output.size(m.get("state_bytes")),
    ]


def skew(values: Sequence[object]) -> str:
    """How much the largest of the shards' figures exceeds their mean ("1.00x": even; "-"
    with nothing to compare)."""
    xs = [float(v) for v in values if isinstance(v, int | float)]
    mean = sum(xs) / len(xs) if xs else 0.0
    return f"{max(xs) / mean:.2f}x" if mean > 0 else "-"


def _dataflow_table(flow: Json, title: str) -> Table:
    inputs: dict[str, list[str]] = {}
    for e in flow.get("edges") or []:
        inputs.setdefault(str(e["target"]), []).append(str(e["source"]))
    columns = ["node", "kind", "label", "reads", "rows in", "rows out", "step ms"]
    t = output.make_table([*columns, "state rows", "state size"], title=title)
    for n in flow.get("nodes") or []:
        m = n.get("metrics") or {}
        t.add_row(
            str(n["id"]),
            str(n["kind"]),
            str(n["label"]),
            ", ".join(inputs.get(str(n["id"]), [])) or "-",
            *(_figures(m) if m else ["-"] * len(_FIGURES)),
        )
        # A partitioned pipeline's operator: each shard's figures, then their skew.
        shards = m.get("shards") or []
        for x in shards:
            t.add_row(f"  shard {x.get('shard')}", "shard", "-", "-", *_figures(x))
        if shards:
            ratios = [skew([x.get(k) for x in shards]) for k in _FIGURES]
            t.add_row("  skew", "max/mean", "-", "-", *ratios)
    return t


def dataflow(
    name: PipelineArg,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Refresh until Ctrl-C (or --count).")
    ] = False,
    interval: Annotated[float, typer.Option(min=0.2, help="Seconds between polls.")] = 2.0,
    count: Annotated[int | None, typer.Option(min=1, help="With --watch: N refreshes.")] = None,
    json_output: JsonOpt = False,
) -> None:
    """The dataflow: input, operators, views and sinks, each stateful operator with its
    rows in and out, time and state in the newest step; at parallelism > 1, each of its
    shards' too, and their skew (the largest over the mean)."""
    if watch and json_output:
        raise usage("--json cannot be combined with --watch")
    with connect() as api:
        flow = api.dataflow(name)
        if json_output:
            output.emit_json(flow)
            return

        def title(f: Json) -> str:
            return f"{name}: dataflow as of step {output.dash(f.get('step'))}"

        if not watch:
            output.show(_dataflow_table(flow, title(flow)))
            return
        con, shown = output.stdout(), 0
        try:
            with Live(_dataflow_table(flow, title(flow)), console=con, auto_refresh=False) as live:
                while count is None or shown < count:
                    time.sleep(interval)
                    flow = api.dataflow(name)
                    live.update(_dataflow_table(flow, title(flow)), refresh=True)
                    shown += 1
            if not con.is_terminal:
                con.line()
        except KeyboardInterrupt:
            raise typer.Exit(EXIT_OK) from None
