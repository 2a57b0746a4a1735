"""Per-step metrics history: the job inserts one row per step (resolution 0); every few
minutes `downsample` folds rows older than metrics_raw_s into one row per minute (counts
summed, latencies the bucket's maximum, gauges the last value) and drops rows older than
metrics_keep_s. Live delivery (SSE) polls for rows with a larger id."""

from __future__ import annotations

import bisect
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from ..db import Base
from ..models import DurationBuckets, MetricSample, OperatorShardTotals, PipelineTotals
from ..settings import Settings

BUCKET_S = 60
_SUMS = ("steps", "rows_in", "rows_out", "dead_letters", "late_rows")
_MAXES = ("step_ms", "spark_ms", "engine_ms", "commit_ms", "latency_ms")
_LAST = (
    "step",
    "state_rows",
    "state_bytes",
    "spine_batches",
    "merge_backlog",
    "memory_bytes",
    "memory_budget_bytes",
    "run_id",
    "inputs",
    "sinks",
)


def add_totals(s: Session, pipeline_id: int, **increments: int) -> None:
    """Grow the pipeline's monotonic counters (`PipelineTotals`) by `increments`."""
    increments = {k: v for k, v in increments.items() if v}
    if increments:
        _grow(s, PipelineTotals, {"pipeline_id": pipeline_id}, increments)


def _grow(
    s: Session, model: type[Base], key: Mapping[str, Any], values: Mapping[str, float]
) -> None:
    """Add `values` to the counters of `model`'s row `key` (one statement, so concurrent
    reports both count), making the row if there is none."""
    cols = model.__table__.c
    done = s.execute(
        update(model)
        .where(*(cols[k] == v for k, v in key.items()))
        .values({k: cols[k] + v for k, v in values.items()})
    )
    if getattr(done, "rowcount", 0) == 0:
        s.add(model(**key, **values))
        s.flush()


# Histogram bucket bounds (seconds) for streaming durations, 10 ms to 60 s; one more bucket
# (+Inf) counts the rest. Prometheus' `le` buckets are these, cumulated at scrape time.
BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def observe(s: Session, pipeline_id: int, metric: str, seconds: Iterable[float]) -> None:
    """Add durations to the pipeline's histogram `metric` (`DurationBuckets`)."""
    grown: dict[int, list[float]] = {}
    for x in seconds:
        g = grown.setdefault(bisect.bisect_left(BUCKETS_S, x), [0, 0.0])
        g[0] += 1
        g[1] += x
    for bucket, (n, total) in sorted(grown.items()):
        key = {"pipeline_id": pipeline_id, "metric": metric, "bucket": bucket}
        _grow(s, DurationBuckets, key, {"count": int(n), "sum_s": total})


def add_shard_totals(
    s: Session, pipeline_id: int, operators: Iterable[Mapping[str, Any] | None]
) -> None:
    """Grow the operator-shards' monotonic counters (`OperatorShardTotals`) by steps'
    per-operator figures (samples' `operators`; an operator of a partitioned pipeline has
    its shards' in `shards`, checked by `schemas.runs.SampleIn`)."""
    grown: dict[tuple[str, int], list[float]] = {}
    for ops in operators:
        for op_id, m in (ops or {}).items():
            for x in (m.get("shards") if isinstance(m, dict) else None) or []:
                g = grown.setdefault((op_id, x["shard"]), [0, 0, 0.0])
                g[0] += x["rows_in"]
                g[1] += x["rows_out"]
                g[2] += x["step_ms"]
    for (op_id, shard), (rows_in, rows_out, step_ms) in grown.items():
        key = {"pipeline_id": pipeline_id, "operator": op_id, "shard": shard}
        values = {"rows_in": int(rows_in), "rows_out": int(rows_out), "step_ms": step_ms}
        _grow(s, OperatorShardTotals, key, values)


def history(
    s: Session, pipeline_id: int, since: float | None = None, limit: int = 1000
) -> list[MetricSample]:
    """Samples oldest first (by time: downsampled buckets are inserted after newer rows):
    the newest `limit` since `since` (unix seconds)."""
    q = select(MetricSample).where(MetricSample.pipeline_id == pipeline_id)
    if since is not None:
        q = q.where(MetricSample.ts >= since)
    order = (MetricSample.ts.desc(), MetricSample.id.desc())
    rows = list(s.scalars(q.order_by(*order).limit(limit)))
    rows.reverse()
    return rows


def live(s: Session, pipeline_id: int, after_id: int, limit: int = 500) -> list[MetricSample]:
    """Per-step samples with an id above `after_id`, in order: what the job appended since
    (downsampled buckets are history, not news)."""
    q = select(MetricSample).where(
        MetricSample.pipeline_id == pipeline_id,
        MetricSample.id > after_id,
        MetricSample.resolution_s == 0,
    )
    return list(s.scalars(q.order_by(MetricSample.id).limit(limit)))


def downsample(s: Session, settings: Settings, now: float | None = None) -> int:
    """Fold old per-step rows into per-minute rows; returns rows removed."""
    now = now or time.time()
    s.execute(delete(MetricSample).where(MetricSample.ts < now - settings.metrics_keep_s))
    cutoff = now - settings.metrics_raw_s
    old = list(
        s.scalars(
            select(MetricSample)
            .where(MetricSample.resolution_s == 0, MetricSample.ts < cutoff)
            .order_by(MetricSample.id)
        )
    )
    buckets: dict[tuple[int, int], list[MetricSample]] = defaultdict(list)
    for r in old:
        buckets[(r.pipeline_id, int(r.ts // BUCKET_S))].append(r)
    for (pipeline_id, b), rs in buckets.items():
        agg = MetricSample(pipeline_id=pipeline_id, resolution_s=BUCKET_S, ts=(b + 1) * BUCKET_S)
        for f in _SUMS:
            setattr(agg, f, sum(getattr(r, f) or 0 for r in rs))
        for f in _MAXES:
            vals = [getattr(r, f) for r in rs if getattr(r, f) is not None]
            setattr(agg, f, max(vals) if vals else None)
        for f in _LAST:
            setattr(agg, f, getattr(rs[-1], f))
        agg.operators = _fold_operators([r.operators for r in rs if r.operators])
        s.add(agg)
    if old:
        s.execute(delete(MetricSample).where(MetricSample.id.in_([r.id for r in old])))
    return len(old)


def _fold_operators(steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per-operator figures of several steps as one, as the sample's own are folded."""
    if not steps:
        return None
    out: dict[str, dict[str, Any]] = {}
    for ops in steps:
        for op_id, m in ops.items():
            o = out.setdefault(op_id, {})
            _fold(o, m)
            if m.get("shards"):
                shards = {x["shard"]: x for x in o.get("shards", [])}
                for x in m["shards"]:
                    _fold(shards.setdefault(x["shard"], {"shard": x["shard"]}), x)
                o["shards"] = [shards[k] for k in sorted(shards)]
    return out


def _fold(into: dict[str, Any], m: Mapping[str, Any]) -> None:
    """One step's figures of an operator (or operator-shard) into a bucket's: rows summed,
    the largest step_ms, the last state."""
    into["rows_in"] = into.get("rows_in", 0) + m.get("rows_in", 0)
    into["rows_out"] = into.get("rows_out", 0) + m.get("rows_out", 0)
    into["step_ms"] = max(into.get("step_ms", 0.0), m.get("step_ms", 0.0))
    into["state_rows"] = m.get("state_rows", 0)
    into["state_bytes"] = m.get("state_bytes", 0)


def start_after(s: Session, pipeline_id: int, backlog: int) -> int:
    """The id a live stream starts after so that it first sends the newest `backlog`
    per-step samples (0: only new ones)."""
    ids = list(
        s.scalars(
            select(MetricSample.id)
            .where(MetricSample.pipeline_id == pipeline_id, MetricSample.resolution_s == 0)
            .order_by(MetricSample.id.desc())
            .limit(max(backlog, 1))
        )
    )
    if not ids:
        return 0
    return ids[0] if backlog == 0 else ids[-1] - 1


__all__ = [
    "BUCKETS_S",
    "add_shard_totals",
    "add_totals",
    "downsample",
    "history",
    "live",
    "observe",
    "start_after",
]
