"""Prometheus series per pipeline, computed from the database at scrape time (so every API
replica reports the same values and nothing is lost when one restarts)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..db import Database
from ..models import (
    Checkpoint,
    DurationBuckets,
    MetricSample,
    OperatorShardTotals,
    Pipeline,
    PipelineState,
    PipelineTotals,
    Run,
)
from .metrics import BUCKETS_S

WINDOW_S = 60.0  # throughput and latency quantiles over the last minute
QUANTILES = (0.5, 0.99)


def _quantile(sorted_vals: list[float], q: float) -> float:
    i = min(int(q * len(sorted_vals)), len(sorted_vals) - 1)
    return sorted_vals[i]


class _OperatorFamilies:
    """Each stateful operator's series (labels pipeline, operator): its state now, and its
    rows and step times over the last minute's steps; and a partitioned pipeline's, each
    operator-shard's (labels pipeline, operator, shard): its state now, and its rows and
    time as counters."""

    def __init__(self) -> None:
        labels = ["pipeline", "operator"]
        self.rows = GaugeMetricFamily(
            "spindle_operator_state_rows", "the operator's state rows", labels=labels
        )
        self.bytes = GaugeMetricFamily(
            "spindle_operator_state_bytes",
            "the operator's state size (memory and files)",
            labels=labels,
        )
        self.rows_in = GaugeMetricFamily(
            "spindle_operator_input_rows_per_second",
            f"rows (changes) into the operator per second over the last {WINDOW_S:g}s",
            labels=labels,
        )
        self.rows_out = GaugeMetricFamily(
            "spindle_operator_output_rows_per_second",
            f"rows (changes) out of the operator per second over the last {WINDOW_S:g}s",
            labels=labels,
        )
        self.step = GaugeMetricFamily(
            "spindle_operator_step_seconds",
            f"the operator's time per step, quantiles over the last {WINDOW_S:g}s",
            labels=[*labels, "quantile"],
        )
        shard = [*labels, "shard"]
        self.shard_rows = GaugeMetricFamily(
            "spindle_operator_shard_state_rows",
            "the operator-shard's state rows, as of the newest step that stepped it",
            labels=shard,
        )
        self.shard_bytes = GaugeMetricFamily(
            "spindle_operator_shard_state_bytes",
            "the operator-shard's state size (memory and files), as of the newest step that "
            "stepped it",
            labels=shard,
        )
        self.shard_rows_in = CounterMetricFamily(
            "spindle_operator_shard_rows_in",
            "rows (changes) into the operator-shard",
            labels=shard,
        )
        self.shard_rows_out = CounterMetricFamily(
            "spindle_operator_shard_rows_out",
            "rows (changes) out of the operator-shard",
            labels=shard,
        )
        self.shard_seconds = CounterMetricFamily(
            "spindle_operator_shard_step_seconds",
            "time of the shard tasks that stepped the operator-shard, its part",
            labels=shard,
        )

    def add(self, pipeline: str, recent: list[dict[str, Any]], last: dict[str, Any]) -> None:
        """`recent`: the window's samples' `operators`; `last`: the newest sample's."""
        for op_id, m in last.items():
            lab = [pipeline, op_id]
            self.rows.add_metric(lab, float(m.get("state_rows", 0)))
            self.bytes.add_metric(lab, float(m.get("state_bytes", 0)))
            steps = [r[op_id] for r in recent if op_id in r]
            self.rows_in.add_metric(lab, sum(x.get("rows_in", 0) for x in steps) / WINDOW_S)
            self.rows_out.add_metric(lab, sum(x.get("rows_out", 0) for x in steps) / WINDOW_S)
            times = sorted(x.get("step_ms", 0.0) / 1000 for x in steps)
            for q in QUANTILES if times else ():
                self.step.add_metric([*lab, str(q)], _quantile(times, q))
            for x in m.get("shards") or []:
                shard = [*lab, str(x.get("shard"))]
                self.shard_rows.add_metric(shard, float(x.get("state_rows", 0)))
                self.shard_bytes.add_metric(shard, float(x.get("state_bytes", 0)))

    def add_totals(self, pipeline: str, totals: list[OperatorShardTotals]) -> None:
        """The operator-shards' counters (`OperatorShardTotals`)."""
        for t in totals:
            lab = [pipeline, t.operator, str(t.shard)]
            self.shard_rows_in.add_metric(lab, float(t.rows_in))
            self.shard_rows_out.add_metric(lab, float(t.rows_out))
            self.shard_seconds.add_metric(lab, t.step_ms / 1000)

    def families(self) -> list[Metric]:
        return [
            self.rows,
            self.bytes,
            self.rows_in,
            self.rows_out,
            self.step,
            self.shard_rows,
            self.shard_bytes,
            self.shard_rows_in,
            self.shard_rows_out,
            self.shard_seconds,
        ]


class PipelineCollector(Collector):
    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[Metric]:
        now = time.time()
        up = GaugeMetricFamily(
            "spindle_pipeline_up", "1 if the pipeline is running", labels=["pipeline"]
        )
        state = GaugeMetricFamily(
            "spindle_pipeline_state",
            "1 for the pipeline's current state",
            labels=["pipeline", "state"],
        )
        step = GaugeMetricFamily(
            "spindle_pipeline_last_step", "last step processed", labels=["pipeline"]
        )
        rows_in = CounterMetricFamily(
            "spindle_pipeline_rows_in", "input rows processed", labels=["pipeline"]
        )
        rows_out = CounterMetricFamily(
            "spindle_pipeline_rows_out", "output rows (changes) produced", labels=["pipeline"]
        )
        tput = GaugeMetricFamily(
            "spindle_pipeline_throughput_rows_per_second",
            f"input rows per second over the last {WINDOW_S:g}s",
            labels=["pipeline"],
        )
        latency = GaugeMetricFamily(
            "spindle_pipeline_step_latency_seconds",
            f"step latency quantiles over the last {WINDOW_S:g}s",
            labels=["pipeline", "quantile"],
        )
        e2e = GaugeMetricFamily(
            "spindle_pipeline_e2e_latency_seconds",
            "end-to-end latency (a step's sink writes done minus the oldest event time of its "
            f"input rows) quantiles over the steps of the last {WINDOW_S:g}s that have one",
            labels=["pipeline", "quantile"],
        )
        sbytes = GaugeMetricFamily(
            "spindle_pipeline_state_bytes", "state size", labels=["pipeline"]
        )
        srows = GaugeMetricFamily("spindle_pipeline_state_rows", "state rows", labels=["pipeline"])
        mem = GaugeMetricFamily(
            "spindle_pipeline_memory_bytes",
            "state batches in memory after the newest step (shards summed)",
            labels=["pipeline"],
        )
        mem_budget = GaugeMetricFamily(
            "spindle_pipeline_memory_budget_bytes",
            "the budget of state batches in memory: the spec's engine.memory_budget "
            "(times the shards at parallelism > 1)",
            labels=["pipeline"],
        )
        lag = GaugeMetricFamily(
            "spindle_input_lag",
            "what waits to be read after the newest step: records (log, Kafka) or files",
            labels=["pipeline", "table"],
        )
        sink_step = GaugeMetricFamily(
            "spindle_sink_last_step",
            "the last step that wrote rows to the sink (as of the newest step)",
            labels=["pipeline", "sink"],
        )
        cp_count = GaugeMetricFamily(
            "spindle_checkpoints", "retained checkpoints", labels=["pipeline"]
        )
        cp_dur = GaugeMetricFamily(
            "spindle_checkpoint_duration_seconds",
            "duration of the newest checkpoint",
            labels=["pipeline"],
        )
        cp_age = GaugeMetricFamily(
            "spindle_checkpoint_age_seconds", "age of the newest checkpoint", labels=["pipeline"]
        )
        restarts = CounterMetricFamily(
            "spindle_pipeline_restarts", "automatic restarts of runs", labels=["pipeline"]
        )
        dead = CounterMetricFamily(
            "spindle_pipeline_dead_letters",
            "input records sent to dead letters",
            labels=["pipeline"],
        )
        late = CounterMetricFamily(
            "spindle_pipeline_late_rows",
            "input rows dropped as late by a watermark",
            labels=["pipeline"],
        )
        commit_failures = CounterMetricFamily(
            "spindle_pipeline_commit_failures", "checkpoints that failed", labels=["pipeline"]
        )
        upload_failures = CounterMetricFamily(
            "spindle_pipeline_upload_failures",
            "checkpoints that could not be uploaded to the object store",
            labels=["pipeline"],
        )
        fencings = CounterMetricFamily(
            "spindle_pipeline_fencings",
            "runs stopped because another writer claimed the object-store prefix",
            labels=["pipeline"],
        )
        durable = GaugeMetricFamily(
            "spindle_pipeline_durability_ok",
            "0 while the pipeline's run reports a durability problem (a failed checkpoint or "
            "upload, the object store unreachable, fencing), else 1",
            labels=["pipeline"],
        )
        histograms = {
            "step": HistogramMetricFamily(
                "spindle_pipeline_step_duration_seconds",
                "the duration of each step (micro-batch)",
                labels=["pipeline"],
            ),
            "commit": HistogramMetricFamily(
                "spindle_pipeline_commit_duration_seconds",
                "the duration of each checkpoint's commit, until it is locally durable",
                labels=["pipeline"],
            ),
            "upload": HistogramMetricFamily(
                "spindle_pipeline_upload_duration_seconds",
                "the duration of each checkpoint's upload to the object store, from locally "
                "durable to named by the remote manifest",
                labels=["pipeline"],
            ),
        }
        ops = _OperatorFamilies()
        with self.db.session() as s:
            for p in s.scalars(select(Pipeline)):
                lab = [p.name]
                up.add_metric(lab, 1.0 if p.state == PipelineState.running else 0.0)
                for st in PipelineState:
                    state.add_metric([p.name, st.value], 1.0 if p.state == st else 0.0)
                # Counters from the monotonic totals: the history is downsampled and deleted.
                t = s.get(PipelineTotals, p.id) or PipelineTotals(
                    rows_in=0, rows_out=0, dead_letters=0, late_rows=0, commit_failures=0,
                    upload_failures=0, fencings=0,
                )  # fmt: skip
                rows_in.add_metric(lab, float(t.rows_in))
                rows_out.add_metric(lab, float(t.rows_out))
                dead.add_metric(lab, float(t.dead_letters))
                late.add_metric(lab, float(t.late_rows))
                commit_failures.add_metric(lab, float(t.commit_failures))
                upload_failures.add_metric(lab, float(t.upload_failures))
                fencings.add_metric(lab, float(t.fencings))
                durable.add_metric(lab, 0.0 if p.durability_error else 1.0)
                _add_histograms(s, p, histograms)
                ops.add_totals(
                    p.name,
                    list(
                        s.scalars(
                            select(OperatorShardTotals)
                            .where(OperatorShardTotals.pipeline_id == p.id)
                            .order_by(OperatorShardTotals.operator, OperatorShardTotals.shard)
                        )
                    ),
                )
                last_step = s.scalar(
                    select(func.max(MetricSample.step)).where(MetricSample.pipeline_id == p.id)
                )
                step.add_metric(lab, float(last_step or 0))
                recent = s.execute(
                    select(
                        MetricSample.rows_in,
                        MetricSample.step_ms,
                        MetricSample.state_bytes,
                        MetricSample.state_rows,
                        MetricSample.latency_ms,
                        MetricSample.operators,
                    )
                    .where(
                        MetricSample.pipeline_id == p.id,
                        MetricSample.resolution_s == 0,
                        MetricSample.ts >= now - WINDOW_S,
                    )
                    .order_by(MetricSample.id)
                ).all()
                tput.add_metric(lab, sum(r[0] for r in recent) / WINDOW_S)
                if recent:
                    lat = sorted(r[1] / 1000 for r in recent)
                    for q in QUANTILES:
                        latency.add_metric([p.name, str(q)], _quantile(lat, q))
                ends = sorted(r[4] / 1000 for r in recent if r[4] is not None)
                if ends:
                    for q in QUANTILES:
                        e2e.add_metric([p.name, str(q)], _quantile(ends, q))
                last = s.scalar(
                    select(MetricSample)
                    .where(MetricSample.pipeline_id == p.id)
                    .order_by(MetricSample.id.desc())
                    .limit(1)
                )
                if last is not None:
                    sbytes.add_metric(lab, float(last.state_bytes))
                    srows.add_metric(lab, float(last.state_rows))
                    if last.memory_budget_bytes:  # 0: a sample from before it was reported
                        mem.add_metric(lab, float(last.memory_bytes))
                        mem_budget.add_metric(lab, float(last.memory_budget_bytes))
                    ops.add(p.name, [r[5] for r in recent if r[5]], last.operators or {})
                    for table, figures in (last.inputs or {}).items():
                        if isinstance(figures, dict) and figures.get("lag") is not None:
                            lag.add_metric([p.name, table], float(figures["lag"]))
                    for sink, figures in (last.sinks or {}).items():
                        if isinstance(figures, dict) and figures.get("last_step") is not None:
                            sink_step.add_metric([p.name, sink], float(figures["last_step"]))
                newest = s.scalar(
                    select(Checkpoint)
                    .where(Checkpoint.pipeline_id == p.id)
                    .order_by(Checkpoint.created_at.desc())
                    .limit(1)
                )
                n = s.scalar(
                    select(func.count())
                    .select_from(Checkpoint)
                    .where(Checkpoint.pipeline_id == p.id)
                )
                cp_count.add_metric(lab, float(n or 0))
                if newest is not None:
                    cp_dur.add_metric(lab, newest.duration_ms / 1000)
                    cp_age.add_metric(lab, max(now - newest.created_at.timestamp(), 0.0))
                r = s.scalar(
                    select(func.count())
                    .select_from(Run)
                    .where(Run.pipeline_id == p.id, Run.restart_count > 0)
                )
                restarts.add_metric(lab, float(r or 0))
        yield from (
            up,
            state,
            step,
            rows_in,
            rows_out,
            tput,
            latency,
            e2e,
            sbytes,
            srows,
            mem,
            mem_budget,
            lag,
            sink_step,
            cp_count,
            cp_dur,
            cp_age,
            restarts,
            dead,
            late,
            commit_failures,
            upload_failures,
            fencings,
            *ops.families(),
            durable,
            *histograms.values(),
        )


def _add_histograms(s: Session, p: Pipeline, into: dict[str, HistogramMetricFamily]) -> None:
    """The pipeline's duration histograms (`DurationBuckets`), cumulated into `le` buckets;
    one with no observations yet is all zeros."""
    rows = s.scalars(select(DurationBuckets).where(DurationBuckets.pipeline_id == p.id)).all()
    for metric, family in into.items():
        counts = [0] * (len(BUCKETS_S) + 1)
        total = 0.0
        for r in rows:
            if r.metric == metric and 0 <= r.bucket < len(counts):
                counts[r.bucket] += r.count
                total += r.sum_s
        bounds = [*(f"{b:g}" for b in BUCKETS_S), "+Inf"]
        cumulative = [float(c) for c in itertools.accumulate(counts)]
        buckets = list(zip(bounds, cumulative, strict=True))
        family.add_metric([p.name], buckets=buckets, sum_value=total)


__all__ = ["PipelineCollector"]
