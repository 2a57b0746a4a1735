"""One Nexmark query on one system, in processes of its own, for `bench.nexmark`: Spindle (a
driver process, `workers.runtime.driver run`), Spark Structured Streaming
(`bench.nexmark_spark`) and Flink SQL (`bench/flink/nexmark_flink.py` in the benchmark's Flink
environment).

Each run's processes (a Python process and its JVM) are sampled for their summed resident
memory; its peak is the run's `peak_rss_bytes`. With `collect`, the query's output is kept
and returned as net rows (`oracles.nexmark.Rows`) for the comparison with the oracle.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import psutil
import pyarrow.parquet as pq
import yaml

from oracles.nexmark import Rows, norm
from storage_engine.schema import WEIGHT
from workers.runtime.connectors.files_sink import STEP

from .nexmark_queries import (
    EVENTS_DDL,
    ROOT,
    Query,
    flink_events_ddl,
    flink_side_ddl,
    flink_statements,
    spark_statements,
)

FLINK_PYTHON = ROOT / ".venv-flink" / "bin" / "python"
FLINK_SCRIPT = ROOT / "bench" / "flink" / "nexmark_flink.py"
CHECKPOINT_S = 10
TIMEOUT_S = 1800
# Flink's own Nexmark setup (flink-benchmarks' nexmark-flink conf): mini-batches of 2 s or
# 50,000 rows, split distinct aggregates, RocksDB in managed memory.
FLINK_CONF = {
    "parallelism.default": 2,
    "table.local-time-zone": "UTC",
    "state.backend.type": "rocksdb",
    "state.backend.rocksdb.memory.managed": "true",
    "taskmanager.memory.managed.size": "1g",
    "execution.checkpointing.interval": f"{CHECKPOINT_S} s",
    "table.exec.mini-batch.enabled": "true",
    "table.exec.mini-batch.allow-latency": "2 s",
    "table.exec.mini-batch.size": 50_000,
    "table.optimizer.distinct-agg.split.enabled": "true",
    "pipeline.object-reuse": "true",
}


class RunFailed(RuntimeError):
    pass


@dataclass(frozen=True)
class SpindleOptions:
    """How Spindle runs beyond the query: its engine's memory budget (the spec's
    `engine.memory_budget`; None: the default) and, on a cluster, what lists its executor
    JVMs now (`executors`, pids), whose processes are sampled too."""

    memory_budget: str | None = None
    executors: Callable[[], list[int]] | None = None


DEFAULTS = SpindleOptions()


@dataclass
class Peaks:
    """A run's peak resident memory: of the command's processes summed (`total`), and of
    each executor's JVM and of its Python processes, each summed at its peak (by JVM pid)."""

    total: int = 0
    executors: dict[int, dict[str, int]] = field(default_factory=dict)

    def sample(self, executors: Callable[[], list[int]] | None) -> None:
        for pid in executors() if executors is not None else []:
            try:
                jvm = psutil.Process(pid)
                python = [p for p in jvm.children(recursive=True) if "python" in (p.name() or "")]
            except psutil.Error:
                continue
            peak = self.executors.setdefault(pid, {"jvm": 0, "python": 0})
            peak["jvm"] = max(peak["jvm"], _rss(jvm))
            peak["python"] = max(peak["python"], sum(_rss(x) for x in python))


def started(cmd: list[str], out: IO[bytes], cwd: Path = ROOT) -> subprocess.Popen[bytes]:
    """`cmd` started in a session of its own (its process group: it and its JVM), its
    output to `out`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TZ": "UTC"}
    return subprocess.Popen(
        cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
        start_new_session=True,
    )  # fmt: skip


def measured(
    cmd: list[str],
    log: Path,
    cwd: Path = ROOT,
    executors: Callable[[], list[int]] | None = None,
) -> Peaks:
    """Run `cmd` to its end (its output to `log`); the peaks of its processes' summed RSS
    and of the `executors`' (`Peaks`)."""
    peaks = Peaks()
    with open(log, "wb") as out:
        p = started(cmd, out, cwd)
        done = threading.Event()

        def sample() -> None:
            proc = psutil.Process(p.pid)
            while not done.wait(0.2):
                try:
                    tree = [proc, *proc.children(recursive=True)]
                    peaks.total = max(peaks.total, sum(_rss(x) for x in tree))
                except psutil.Error:
                    return
                peaks.sample(executors)

        t = threading.Thread(target=sample, daemon=True)
        t.start()
        try:
            rc = p.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            raise RunFailed(f"{cmd[1:4]} ran over {TIMEOUT_S} s") from None
        finally:
            done.set()
            t.join()
    if rc != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RunFailed(f"{' '.join(cmd[:4])} exited {rc}:\n{tail}")
    return peaks


def _rss(p: psutil.Process) -> int:
    try:
        return int(p.memory_info().rss)
    except psutil.Error:
        return 0


def _latency(ms: list[float]) -> dict[str, float]:
    return {
        "p50_batch_ms": float(np.percentile(ms, 50)),
        "p99_batch_ms": float(np.percentile(ms, 99)),
    }


def _dir_bytes(path: Path) -> int:
    """Bytes of the files under `path` (0 if there is none)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _integrated(changes: Iterable[tuple[Iterable[Any], int]]) -> Rows:
    """Rows with weights (or counts), summed: the rows that stand, each as often as it does."""
    net: Rows = Counter()
    for row, weight in changes:
        net[tuple(norm(v) for v in row)] += weight
    return +net


def _json_changes(path: Path) -> Rows:
    """A peer's collected output: JSON lines of `row` and `weight`."""
    lines = path.read_text().splitlines()
    return _integrated((r["row"], r["weight"]) for r in map(json.loads, lines))


def spindle_spec(
    q: Query,
    events: Path,
    work: Path,
    sink: dict[str, Any],
    checkpoint: dict[str, Any],
    parallelism: int = 1,
    memory_budget: str | None = None,
) -> tuple[Path, Path]:
    """The query's example spec over the events' files, its view to `sink` (named `out`),
    with `checkpoint` (the spec's policy), 10 ms trigger, `parallelism`, the engine's
    `memory_budget`: written to `work`; its path and the run's storage location."""
    doc = json.loads(q.spec.model_dump_json(by_alias=True, exclude_none=True))
    if parallelism != 1:
        doc["parallelism"] = parallelism
    if memory_budget is not None:
        doc["engine"] = {"memory_budget": memory_budget}
    first, *rest = doc["tables"]
    events_table = {
        "kind": "files",
        "table": "events",
        "path": str(events),
        "format": "json",
        "schema": dict(c.split() for c in EVENTS_DDL.split(",")),
        "max_files_per_step": 1,
        **({"event_time": first["event_time"]} if q.lateness_s is not None else {}),
    }
    for t in rest:
        t["path"] = str(ROOT / t["path"])
    doc["tables"] = [events_table, *rest]
    doc["sinks"] = [{"name": "out", "from": q.name, **sink}]
    doc["checkpoint"] = checkpoint
    doc["trigger"] = {"interval": "10ms"}
    spec = work / "spec.yaml"
    spec.write_text(yaml.safe_dump(doc))
    return spec, work / "storage"


def driver_command(spec: Path, storage: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "workers.runtime.driver",
        "run",
        str(spec),
        "--storage",
        str(storage),
    ]


def metrics(storage: Path) -> list[dict[str, Any]]:
    """A Spindle run's metrics records (`metrics.jsonl`), a torn last line left out."""
    path = storage / "metrics.jsonl"
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except ValueError:
            break
    return out


def files_output(out: Path) -> Rows:
    """A `files` sink's output (Parquet), integrated."""
    table = pq.read_table(out).drop_columns([STEP])
    weights = table.column(WEIGHT).to_pylist()
    data = table.drop_columns([WEIGHT]).to_pylist()
    return _integrated(zip((r.values() for r in data), weights, strict=True))


def spindle(
    q: Query,
    events: Path,
    work: Path,
    collect: bool,
    parallelism: int = 1,
    options: SpindleOptions = DEFAULTS,
) -> tuple[dict[str, Any], Rows | None]:
    out = work / "out"
    # The timed run's sink reads the view and drops it, as Flink's blackhole and Spark's noop.
    sink = {"kind": "files", "path": str(out)} if collect else {"kind": "discard"}
    checkpoint = {"every_steps": None, "every": CHECKPOINT_S}
    spec, storage = spindle_spec(
        q, events, work, sink, checkpoint, parallelism, options.memory_budget
    )
    peaks = measured(
        [*driver_command(spec, storage), "--stop-when-idle", "3"],
        work / "driver.log",
        executors=options.executors,
    )
    recs = metrics(storage)
    steps = [r for r in recs if "step" in r]
    batches = [r for r in recs if r.get("event") == "batch"]
    started = next(r for r in recs if r.get("event") == "started")
    ms = [b["duration_ms"]["triggerExecution"] for b in batches]
    result = {
        "events": sum(s["rows_in"] for s in steps),
        "span_s": _span_s(steps, batches, ms),
        "startup_s": started["total_ms"] / 1000,
        **_latency(ms),
        "peak_rss_bytes": peaks.total,
        "state_bytes": steps[-1]["state_bytes"],
        "memory_budget_bytes": steps[-1]["memory_budget_bytes"],
        "peak_memory_bytes": max(s["memory_bytes"] for s in steps),
    }
    if parallelism > 1:
        result["shard_state_bytes"] = _shard_state(steps[-1])
    if peaks.executors:
        result["executor_peak_rss_bytes"] = list(peaks.executors.values())
    return result, files_output(out) if collect else None


def _shard_state(step: dict[str, Any]) -> list[int]:
    """Each shard's state (its operators' summed) as of a partitioned run's step."""
    out: dict[int, int] = {}
    for op in step["operators"].values():
        for x in op.get("shards") or []:
            out[x["shard"]] = out.get(x["shard"], 0) + x["state_bytes"]
    return [out[s] for s in sorted(out)]


def _span_s(steps: list[dict[str, Any]], batches: list[dict[str, Any]], ms: list[float]) -> float:
    """A Spindle run's processing time: its query's batches, first to last, and the steps
    the driver took before the query started (its first, a redone one), but not the
    query's start-up between them. (Step and batch records are written as each ends.)"""
    if not batches:
        return float(sum(s["step_ms"] for s in steps)) / 1000
    first = float(batches[0]["ts"]) - ms[0] / 1000
    before = float(sum(s["step_ms"] for s in steps if s["ts"] <= first)) / 1000
    return float(batches[-1]["ts"]) - first + before


def spark(q: Query, events: Path, work: Path, collect: bool) -> tuple[dict[str, Any], Rows | None]:
    cfg = {
        "query": q.name,
        "events": str(events),
        "schema": EVENTS_DDL,
        "watermark": None if q.lateness_s is None else f"{q.lateness_s:g} seconds",
        "side": str(q.side_input) if q.side_input else None,
        "statements": spark_statements(q, checked=collect),
        "collect": collect,
        "work": str(work),
        "out": str(work / "out.jsonl"),
        "result": str(work / "result.json"),
        "files": len(list(events.iterdir())),
        "timeout_s": TIMEOUT_S,
    }
    config = work / "config.json"
    config.write_text(json.dumps(cfg))
    peak = measured([sys.executable, "-m", "bench.nexmark_spark", str(config)], work / "log").total
    got = json.loads((work / "result.json").read_text())
    if "refused" in got:
        return {"refused": got["refused"]}, None
    batches = got["batches"]
    ms = [b["ms"] for b in batches]
    result = {
        "span_s": batches[-1]["ts"] + ms[-1] / 1000 - batches[0]["ts"],
        "startup_s": got["startup_s"],
        "output_mode": got["output_mode"],
        **_latency(ms),
        "peak_rss_bytes": peak,
        "state_bytes": _dir_bytes(work / f"checkpoint-{got['output_mode']}" / "state"),
    }
    return result, _json_changes(work / "out.jsonl") if collect else None


def _one_file(events: Path) -> Path:
    """The events as one file, in a directory of its own (made once). Flink's file source
    hands a directory's files to its readers in no particular order, so two readers would read
    files tens of seconds of event time apart and drop rows behind the watermark as late; one
    file is one split, read in order (the other reader, without a split, ends at once)."""
    one = events.with_name(events.name + "-one-file")
    if not one.exists():
        tmp = one.with_name(one.name + ".tmp")
        tmp.mkdir()
        with open(tmp / "events.json", "wb") as out:
            for f in sorted(events.iterdir()):
                with open(f, "rb") as part:
                    shutil.copyfileobj(part, out)
        tmp.rename(one)
    return one


def flink(q: Query, events: Path, work: Path, collect: bool) -> tuple[dict[str, Any], Rows | None]:
    if not FLINK_PYTHON.exists():
        raise RunFailed(f"no Flink environment at {FLINK_PYTHON.parent.parent}: make bench-flink")
    tables = [flink_events_ddl(str(_one_file(events)), q.lateness_s)]
    if q.side_input:
        tables.append(flink_side_ddl(str(q.side_input)))
    checkpoints = work / "checkpoints"
    cfg = {
        "query": q.name,
        "tables": tables,
        "statements": flink_statements(q),
        "collect": collect,
        "out": str(work / "out.jsonl"),
        "flink_conf": {
            **FLINK_CONF,
            "execution.checkpointing.dir": checkpoints.as_uri(),
            # The timed run ends when its input is processed, as the others' spans do, not
            # after a final checkpoint; the kept run's file sink commits on that checkpoint.
            "execution.checkpointing.checkpoints-after-tasks-finish": str(collect).lower(),
        },
    }
    config = work / "config.json"
    config.write_text(json.dumps(cfg))
    log = work / "log"
    peak = measured([str(FLINK_PYTHON), str(FLINK_SCRIPT), str(config)], log).total
    got = json.loads(log.read_text().strip().splitlines()[-1])
    result = {
        "span_s": got["net_runtime_s"],
        "startup_s": got["startup_s"],
        "peak_rss_bytes": peak,
        # Flink discards a finished job's checkpoints: its state is not measured.
        "state_bytes": None,
    }
    return result, _json_changes(work / "out.jsonl") if collect else None
