"""Nexmark side by side: Spindle, Spark Structured Streaming and Apache Flink SQL on the same
events, each query checked against a DuckDB batch query.

    python -m bench.nexmark [--quick] [--json] [--queries q1,q5] [--systems spindle,spark]
        [--parallelism 1,2] [--events N] [--per-file N]
        [--spark-master spark://host:7077 | --cluster 2] [--memory-budget 64MiB]

N events from Spindle's Nexmark generator (deterministic; 1,000 events per second of event
time, so timestamps are whole milliseconds and every system reads them exactly) are written
once as JSON-lines files, `per_file` events each, that all three systems read (Flink's
distribution has no Parquet format; JSON is the format every system reads as it comes). The
last file ends with one event of another type an hour later, which no query selects: it moves
the watermark past the last window, which Spark's append mode needs to emit it (Flink ends its
bounded input with a final watermark; Spindle's views are never held back).

Per query and system, in processes of their own: one run over the N events to a sink that
discards the output (Spindle: a `discard` sink; Spark: `noop`; Flink: `blackhole`),
reading one file per step (Spindle, Spark; Flink reads the same events concatenated into one
file, in order: see `nexmark_runs._one_file`), checkpoints every 10 s (Spark checkpoints every
micro-batch: it cannot do otherwise), parallelism 2; then one run over `check_events` events
whose output is kept and compared with DuckDB's batch query (`oracles/nexmark.py`): a fast
wrong answer is not a result. Figures per query and system: events/s (the events over the
processing span: Spindle and Spark from the first micro-batch's start to the last one's end,
Flink its job's net runtime; the start-up before it reported apart), p50/p99 micro-batch
latency (Spindle, Spark: Spark's triggerExecution of each), peak RSS of the run's processes,
state bytes at the end (Spindle: its spines; Spark: its state store directory; Flink: not
measured, it discards a finished job's checkpoints), `correct`. A query Spark's streaming
engine refuses is reported with Spark's reason. Spindle's runs also report their engine
memory budget and the most state in memory after a step; at parallelism > 1 each shard's
state; on a `--cluster`, each executor's peak RSS (its JVM, and its Python processes summed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from oracles.nexmark import Rows, oracle
from workers.runtime.nexmark import events as generate

from . import nexmark_runs as runs
from .nexmark_queries import EVENTS_DDL, Query, load, names
from .nexmark_recovery import QUERIES as RECOVERY_QUERIES
from .nexmark_recovery import recovery
from .report import Log, clean, engine_revision, log_to_stderr, machine_info, quiet, versions

SEED, RATE, ACTIVE_PEOPLE, EPOCH_US = 1, 1_000.0, 1_000, 1_704_067_200_000_000
SYSTEMS = ("spindle", "spark", "flink")
SENTINEL_TYPE = 3


@dataclass(frozen=True)
class Profile:
    events: int
    per_file: int
    check_events: int
    check_per_file: int
    queries: tuple[str, ...] | None  # None: every example


PROFILES = {
    "full": Profile(1_000_000, 100_000, 60_000, 10_000, None),
    "quick": Profile(200_000, 50_000, 20_000, 5_000, ("q1", "q5")),
    "smoke": Profile(4_000, 2_000, 4_000, 2_000, ("q1",)),
}


def write_events(d: Path, n: int, per_file: int) -> None:
    """Events [0, n) as JSON-lines files of `per_file` each, in name order, timestamps as
    `yyyy-MM-dd HH:mm:ss.SSS` (UTC); the watermark-moving sentinel at the end."""
    d.mkdir(parents=True)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    fmt = "'%Y-%m-%d %H:%M:%S.%g'"
    for i, start in enumerate(range(0, n, per_file)):
        chunk = pa.table(
            generate(SEED, RATE, start, min(n, start + per_file), ACTIVE_PEOPLE, EPOCH_US)
        )
        if start + per_file >= n:
            last = chunk.column("date_time")[-1].value + 3_600_000_000
            sentinel: dict[str, list[Any]] = {c: [None] for c in chunk.column_names}
            sentinel.update(event_type=[SENTINEL_TYPE], date_time=[last])
            chunk = pa.concat_tables([chunk, pa.table(sentinel, schema=chunk.schema)])
        con.register("chunk", chunk)
        con.execute(
            f"COPY (SELECT * REPLACE (strftime(date_time, {fmt}) AS date_time, "
            f"strftime(auction_expires, {fmt}) AS auction_expires) FROM chunk) "
            f"TO '{d / f'part-{i:05d}.json'}' (FORMAT JSON)"
        )
        con.unregister("chunk")


def read_events(d: Path) -> pa.Table:
    """The files as the systems read them (the oracle's input)."""
    types = {c.split()[0]: c.split()[1].upper() for c in EVENTS_DDL.split(",")}
    cols = ", ".join(f"'{k}': '{'VARCHAR' if v == 'STRING' else v}'" for k, v in types.items())
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    return con.sql(f"SELECT * FROM read_json('{d}/*.json', columns = {{{cols}}})").to_arrow_table()


def _side_tables(q: Query) -> dict[str, pa.Table]:
    if q.side_input is None:
        return {}
    rows = duckdb.connect().sql(
        f"SELECT * FROM read_csv('{q.side_input}/*.csv', columns = "
        "{'key': 'BIGINT', 'value': 'VARCHAR'}, header = true)"
    )
    return {"side_input": rows.to_arrow_table()}


def _run(
    system: str,
    q: Query,
    events: Path,
    work: Path,
    collect: bool,
    spindle: runs.SpindleOptions,
) -> tuple[dict[str, Any], Rows | None]:
    work.mkdir(parents=True)
    if system.startswith("spindle"):
        return runs.spindle(q, events, work, collect, parallelism_of(system), spindle)
    if system == "spark":
        return runs.spark(q, events, work, collect)
    return runs.flink(q, events, work, collect)


def parallelism_of(system: str) -> int:
    """Spindle's parallelism in a system's name: `spindle` (1), `spindle-p2` (2)."""
    return int(system.rpartition("-p")[2]) if system.startswith("spindle-p") else 1


def with_parallelism(systems: Sequence[str], parallelism: Sequence[int]) -> list[str]:
    """`systems` with Spindle once per parallelism (`spindle` at 1, `spindle-pN` at N)."""
    out: list[str] = []
    for s in systems:
        if s == "spindle":
            out += ["spindle" if p == 1 else f"spindle-p{p}" for p in parallelism]
        else:
            out.append(s)
    return out


def run_query(
    q: Query,
    systems: Sequence[str],
    data: dict[str, Path],
    check_input: pa.Table,
    events: int,
    work: Path,
    log: Log,
    spindle: runs.SpindleOptions = runs.DEFAULTS,
) -> dict[str, Any]:
    """`events`: how many the timed runs read (the sentinel included); `check_input`: the
    checked runs' events, as the oracle reads them."""
    want = oracle(q.name, q.spec.sql or "", {"events": check_input, **_side_tables(q)})
    out: dict[str, Any] = {"oracle_rows": sum(want.values())}
    for system in systems:
        log(f"{q.name}: {system}")
        try:
            fig, _ = _run(system, q, data["bench"], work / q.name / system, False, spindle)
            if "refused" not in fig:
                fig["events_per_s"] = events / fig["span_s"]
                check = work / q.name / f"{system}-check"
                _, got = _run(system, q, data["check"], check, True, spindle)
                fig["correct"] = got == want
                if got != want and got is not None:
                    fig["check"] = _difference(got, want)
        except runs.RunFailed as e:
            fig = {"failed": str(e)[-2000:]}
        out[system] = fig
        log(f"{q.name}: {system}: {_cell(fig)} {json.dumps(clean(fig))[:400]}")
    return out


def _difference(got: Rows, want: Rows) -> dict[str, Any]:
    extra, missing = got - want, want - got
    return {
        "rows": sum(got.values()),
        "extra": sum(extra.values()),
        "missing": sum(missing.values()),
        "extra_sample": [list(r) for r in list(extra)[:3]],
        "missing_sample": [list(r) for r in list(missing)[:3]],
    }


def run_benchmark(
    mode: str = "full",
    base_dir: str | None = None,
    log: Log = quiet,
    queries: Sequence[str] | None = None,
    systems: Sequence[str] = SYSTEMS,
    events: int | None = None,
    per_file: int | None = None,
    spindle: runs.SpindleOptions = runs.DEFAULTS,
) -> dict[str, Any]:
    """`events`, `per_file`: instead of the profile's (timed runs' events, and per file,
    which is per step); `spindle`: how Spindle runs besides."""
    prof = PROFILES[mode]
    prof = replace(prof, events=events or prof.events, per_file=per_file or prof.per_file)
    chosen = list(queries or prof.queries or names())
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="spindle-bench-nexmark-", dir=base_dir))
    report: dict[str, Any] = {
        "benchmark": "nexmark",
        "mode": mode,
        "events": prof.events,
        "events_per_file": prof.per_file,
        "check_events": prof.check_events,
        "systems": list(systems),
        "spark_master": os.environ.get("SPINDLE_SPARK_MASTER", "local[2]"),
        "memory_budget": spindle.memory_budget,
        "machine": machine_info(),
        "versions": versions(**_peer_versions(systems)),
        "revision": engine_revision(),
        "queries": {},
    }
    try:
        log(f"writing {prof.events} + {prof.check_events} events")
        data = {"bench": work / "events", "check": work / "check-events"}
        write_events(data["bench"], prof.events, prof.per_file)
        write_events(data["check"], prof.check_events, prof.check_per_file)
        check_input = read_events(data["check"])
        for name in chosen:
            report["queries"][name] = run_query(
                load(name),
                systems,
                data,
                check_input,
                prof.events + 1,
                work / "runs",
                log,
                spindle,
            )
        if "spindle" in systems and per_file is None and events is None:
            again = [n for n in chosen if n in RECOVERY_QUERIES]
            report["recovery"] = _recoveries(again, data["bench"], report, work / "recovery", log)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["elapsed_s"] = time.perf_counter() - started
    cleaned: dict[str, Any] = clean(report)
    return cleaned


def _recoveries(
    chosen: Sequence[str], events: Path, report: dict[str, Any], work: Path, log: Log
) -> dict[str, Any]:
    """Each chosen query killed and recovered (`bench.nexmark_recovery`), against the
    target: its first step within Spark's start-up (the median of this report's) + 2 s."""
    out: dict[str, Any] = {}
    if not chosen:
        return out
    every = read_events(events)
    starts = [
        q["spark"]["startup_s"]
        for q in report["queries"].values()
        if "startup_s" in q.get("spark", {})
    ]
    spark_s = float(statistics.median(starts)) if starts else None
    for name in chosen:
        q = load(name)
        log(f"{name}: spindle, killed and recovered")
        want = oracle(q.name, q.spec.sql or "", {"events": every, **_side_tables(q)})
        try:
            fig = recovery(q, events, want, work / name)
            fig["spark_startup_s"] = spark_s
            fig["within_target"] = None if spark_s is None else fig["first_step_s"] <= spark_s + 2
        except runs.RunFailed as e:
            fig = {"failed": str(e)[-2000:]}
        out[name] = fig
        log(f"{name}: recovery: {json.dumps(clean(fig))[:400]}")
    return out


def _peer_versions(systems: Sequence[str]) -> dict[str, str]:
    import pyspark

    out = {"spark": pyspark.__version__}
    if "flink" in systems and runs.FLINK_PYTHON.exists():
        import subprocess

        got = subprocess.run(
            [str(runs.FLINK_PYTHON), "-m", "pip", "show", "apache-flink"],
            capture_output=True,
            text=True,
        ).stdout
        out["flink"] = next(
            (x.split()[-1] for x in got.splitlines() if x.startswith("Version")), "?"
        )
    return out


def _cell(fig: dict[str, Any]) -> str:
    for outcome in ("refused", "failed"):
        if outcome in fig:
            return outcome
    return f"{fig['events_per_s']:>9.0f} ev/s {'ok' if fig['correct'] else 'WRONG'}"


def _table(report: dict[str, Any], write: Callable[[str], None]) -> None:
    systems = report["systems"]
    write("query  " + "".join(f"{s:>24}" for s in systems))
    for name, q in report["queries"].items():
        cells = [_cell(q.get(s, {})) for s in systems]
        write(f"{name:<7}" + "".join(f"{c:>24}" for c in cells))


@contextlib.contextmanager
def _cluster(workers: int, base_dir: str | None, log: Log) -> Iterator[Callable[[], list[int]]]:
    """A standalone cluster of `workers` one-core workers for Spindle's drivers, from the
    installed PySpark (`local_servers.spark_cluster`), stopped at the end; yields what
    lists its executor JVMs now."""
    from local_servers.spark_cluster import SparkCluster
    from pipeline_spec.spark_conf import ENV as SPARK_CONF_ENV

    where = Path(tempfile.mkdtemp(prefix="spindle-bench-cluster-", dir=base_dir))
    log(f"starting a standalone cluster: {workers} workers")
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    try:
        with SparkCluster(where, workers=workers, cores=1, memory="3g", env=env) as cluster:
            os.environ["SPINDLE_SPARK_MASTER"] = cluster.master_url
            os.environ[SPARK_CONF_ENV] = json.dumps({"spark.executor.memory": "2g"})
            os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
            yield lambda: [pid for w in range(workers) for pid in cluster.executor_pids(w)]
    finally:
        shutil.rmtree(where, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.nexmark", description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="print only the JSON report to stdout")
    p.add_argument("--quick", action="store_true", help="fewer events, two queries (< 5 min)")
    p.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--queries", default=None, help="comma-separated, e.g. q1,q5 (default: all)")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset")
    p.add_argument("--dir", default=None, help="where to put temporary files (default: tmp)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument(
        "--parallelism",
        default="1",
        help="Spindle's parallelism, comma-separated: 1,2 runs it at both (spindle, spindle-p2)",
    )
    p.add_argument("--events", type=int, default=None, help="events of the timed runs")
    p.add_argument("--per-file", type=int, default=None, help="events per file (per step)")
    p.add_argument(
        "--spark-master",
        default=None,
        help="Spindle's Spark master (SPINDLE_SPARK_MASTER; default local[2])",
    )
    p.add_argument(
        "--cluster",
        type=int,
        default=0,
        help="run Spindle on a standalone cluster of this many one-core workers, started here",
    )
    p.add_argument(
        "--memory-budget",
        default=None,
        help="Spindle's engine memory budget (the spec's engine.memory_budget, e.g. 64MiB; "
        "at parallelism > 1 each shard's)",
    )
    args = p.parse_args(argv)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    systems = [s for s in args.systems.split(",") if s]
    if unknown := set(systems) - set(SYSTEMS):
        p.error(f"--systems: unknown {sorted(unknown)}; choose from {', '.join(SYSTEMS)}")
    try:
        parallelism = [int(x) for x in args.parallelism.split(",") if x]
    except ValueError:
        p.error(f"--parallelism: {args.parallelism!r} is not a list of integers")
    if not parallelism or any(not 1 <= x <= 256 for x in parallelism):
        p.error("--parallelism: each between 1 and 256")
    systems = with_parallelism(systems, parallelism)
    if args.spark_master:
        os.environ["SPINDLE_SPARK_MASTER"] = args.spark_master
    queries = args.queries.split(",") if args.queries else None
    if queries and (unknown := set(queries) - set(names())):
        p.error(f"--queries: no example for {sorted(unknown)} in docs/examples/nexmark/")
    log = quiet if args.quiet else log_to_stderr
    spindle = runs.SpindleOptions(memory_budget=args.memory_budget)
    with contextlib.ExitStack() as stack:
        if args.cluster:
            executors = stack.enter_context(_cluster(args.cluster, args.dir, log))
            spindle = replace(spindle, executors=executors)
        report = run_benchmark(
            mode, args.dir, log, queries, systems, args.events, args.per_file, spindle
        )
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _table(report, print)
    return 0


if __name__ == "__main__":
    sys.exit(main())
