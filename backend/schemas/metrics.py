from __future__ import annotations

from .common import Out


class MetricOut(Out):
    id: int
    run_id: int | None
    resolution_s: int
    ts: float
    step: int
    steps: int
    rows_in: int
    rows_out: int
    dead_letters: int
    step_ms: float
    spark_ms: float
    engine_ms: float
    commit_ms: float
    latency_ms: float | None
    state_rows: int
    state_bytes: int
    spine_batches: int
    merge_backlog: int


class IngestOut(Out):
    stream: str
    records: int
    first_offset: int
    end_offset: int


class ViewPage(Out):
    view: str
    step: int | None
    checkpoint: str | None
    rows: list[dict[str, object]]
