"""What a run reports: a record per step (to the metrics file, `<storage>/metrics.jsonl` by
default, and to every other metrics sink, e.g. the control plane's), durability events (to
every sink), and records only the file gets: where the start-up went (`started`), Spark's
own account of each micro-batch (`batch`), steps skipped at restore."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from storage_engine.circuit import OperatorMetrics
from storage_engine.spine import Spine

MetricsSink = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class StepTimes:
    """A step's parts, in ms: Spark's (from the batch's start), the engine's (circuit and
    sinks), the commit's on the step's thread, the whole step; and its end-to-end latency
    (None without an event time)."""

    spark_ms: float
    engine_ms: float
    commit_ms: float
    step_ms: float
    latency_ms: float | None


class RunMetrics:
    def __init__(self, path: str, sinks: list[MetricsSink] | None = None) -> None:
        self.path = path
        self.sinks: list[MetricsSink] = [self.to_file, *(sinks or [])]
        # Spark's listener thread writes `batch` records while steps write theirs.
        self._lock = threading.Lock()
        self._counted: dict[str, OperatorMetrics] = {}  # operators' counters at the last step

    def step(
        self,
        step: int,
        rows: tuple[int, int, int, int],
        times: StepTimes,
        spines: list[Spine],
        operators: Mapping[str, OperatorMetrics],
        inputs: Mapping[str, dict[str, Any]] | None = None,
        sinks: Mapping[str, dict[str, Any]] | None = None,
        memory: tuple[int, int] = (0, 0),
        uploads_s: list[float] | None = None,
    ) -> None:
        """One step's record; `rows`: (in, out, dead letters, dropped as late);
        `uploads_s`: the durations of the checkpoint uploads that finished since the last
        step (`DurabilityWatch.take_uploads`);
        `memory`: bytes of state batches in memory after the step, and their budget (the
        run's `memory()`);
        `operators`: the circuit's `operator_metrics()` after the step; `inputs`: per input
        table, its offset (one number) and input lag after the step (`StepInput.lag`);
        `sinks`: per sink, rows written and the last step that wrote any (`WrittenSteps`)."""
        stats = [sp.stats() for sp in spines]
        sharded = [m for m in operators.values() if m.shards]
        rows_in, rows_out, bad, late = rows
        rec = {
            "ts": time.time(),
            "step": step,
            "rows_in": rows_in,
            "rows_out": rows_out,
            "dead_letters": bad,
            "late_rows": late,
            "spark_ms": round(times.spark_ms, 3),
            "engine_ms": round(times.engine_ms, 3),
            "commit_ms": round(times.commit_ms, 3),
            "step_ms": round(times.step_ms, 3),
            # max over the step's input rows that passed the filter of (sink writes done -
            # event time); None without an event-time column or an event time in the step
            "latency_ms": None if times.latency_ms is None else round(times.latency_ms, 3),
            # The driver's spines, and a partitioned run's operators' state in its shards.
            "state_rows": sum(s.rows for s in stats) + sum(m.state_rows for m in sharded),
            "state_bytes": sum(s.mem_bytes + s.file_bytes for s in stats)
            + sum(m.state_bytes for m in sharded),
            "spine_batches": sum(s.batches for s in stats),
            "merge_backlog": sum(s.merge_backlog for s in stats),
            "memory_bytes": memory[0],
            "memory_budget_bytes": memory[1],
            "uploads_s": [round(x, 6) for x in uploads_s or ()],
            "operators": self._operators(operators),
            "inputs": dict(inputs) if inputs is not None else None,
            "sinks": dict(sinks) if sinks is not None else None,
        }
        self.event(rec)

    def _operators(self, now: Mapping[str, OperatorMetrics]) -> dict[str, dict[str, Any]]:
        """Per operator: the step's rows in and out and ms (the counters' growth since the
        last step), and its state after it; an operator in shards (a partitioned run), the
        same of each shard in `shards`, in shard order."""
        out = {}
        for op_id, m in now.items():
            before = self._counted.get(op_id, _ZERO)
            out[op_id] = _step_figures(m, before)
            if m.shards:
                out[op_id]["shards"] = [
                    {"shard": i, **_step_figures(s, _nth(before.shards, i))}
                    for i, s in enumerate(m.shards)
                ]
        self._counted = dict(now)
        return out

    def event(self, rec: dict[str, Any]) -> None:
        """Something a user must see (a step, a durability failure): to every sink."""
        for sink in self.sinks:
            sink(rec)

    def to_file(self, rec: dict[str, Any]) -> None:
        """A record for the metrics file only (readers of steps skip records without
        `step`)."""
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")

    def batch_durations(self, query_name: str) -> Callable[[dict[str, Any]], None]:
        """A `QueryProgress` callback: Spark's own account of each micro-batch of the query
        `query_name` that ran a step, its durationMs (triggerExecution = the whole batch:
        offsets, planning, our foreachBatch, Spark's offset and commit logs), as a `batch`
        record. A step's `step_ms` is only the foreachBatch part; this is what Spark's own
        queries report as their batch time."""

        def on_progress(progress: dict[str, Any]) -> None:
            durations = progress.get("durationMs", {})
            # Triggers that found no input run no batch (no addBatch): not a step.
            if progress.get("name") != query_name or "addBatch" not in durations:
                return
            rec = {"ts": time.time(), "event": "batch", "batch_id": progress["batchId"]}
            self.to_file({**rec, "duration_ms": durations})

        return on_progress


_ZERO = OperatorMetrics(0, 0, 0.0, 0, 0)


def _nth(shards: tuple[OperatorMetrics, ...], i: int) -> OperatorMetrics:
    return shards[i] if i < len(shards) else _ZERO


def _step_figures(now: OperatorMetrics, before: OperatorMetrics) -> dict[str, Any]:
    """An operator's (or operator-shard's) figures in a step: its counters' growth since
    `before`, its state `now`."""
    return {
        "rows_in": now.rows_in - before.rows_in,
        "rows_out": now.rows_out - before.rows_out,
        "step_ms": round(now.step_ms - before.step_ms, 3),
        "state_rows": now.state_rows,
        "state_bytes": now.state_bytes,
    }


__all__ = ["MetricsSink", "RunMetrics", "StepTimes"]
