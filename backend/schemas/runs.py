"""A run's driver talking to the control plane (`api/routers/runs.py`): the documents of
`workers.runtime.control_plane`, checked as untrusted input. The database's implementation of the
driver's control plane passes the same documents through these models, so both ways of
reaching the control plane accept exactly the same."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from .common import INT32_MAX, INT64_MAX, Body

Count = Annotated[int, Field(ge=0, le=INT64_MAX)]
Count32 = Annotated[int, Field(ge=0, le=INT32_MAX)]
Ms = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Uuid = Annotated[str, Field(min_length=1, max_length=36)]
Pid = Annotated[int, Field(ge=1, le=INT32_MAX)]
# An input table's offset: a count, or a Kafka table's next offset per "<topic>:<partition>"
# (signed: the database's range is the bound, not the sources' conventions).
Position = Annotated[int, Field(ge=-INT64_MAX, le=INT64_MAX)]
Offset = Position | dict[Annotated[str, Field(max_length=300)], Position]

MAX_CHECKPOINTS = 10_000
MAX_RECORDS = 10_000
MAX_OPERATOR_ID = 128  # storage_engine.manifest.OP_ID_RE


class Record(BaseModel):
    """A record of the driver's metrics: fields the control plane does not keep are
    ignored (the metrics file has them)."""

    model_config = ConfigDict(extra="ignore")


class CheckpointIn(Body):
    """A manifest entry (`storage_engine.manifest.CheckpointInfo`) and its offsets."""

    uuid: Uuid
    step: Count
    fingerprint: str = Field(max_length=200)
    created_at: float = Field(ge=0, allow_inf_nan=False)
    identifier: str | None = Field(None, max_length=255)
    parent: Uuid | None = None
    duration_ms: Ms = 0.0
    total_bytes: Count = 0
    new_bytes: Count = 0
    rows: Count = 0
    files: Count = 0
    # Every input table's offset (`pipeline_spec.offsets.OFFSETS`); a driver of the previous
    # release sends a checkpoint of a one-source release's (`ONE_SOURCE`) as it holds it.
    source_offset: Position | None = None
    source_offsets: dict[Annotated[str, Field(max_length=300)], Offset] | None = None


class CheckpointsIn(Body):
    listed: list[CheckpointIn] = Field(max_length=MAX_CHECKPOINTS)
    remote: list[Uuid] | None = Field(None, max_length=MAX_CHECKPOINTS)


class SkippedIn(Body):
    uuid: Uuid
    reason: str = Field(max_length=2000)


class ViewEndpointIn(Body):
    """Where the driver serves its views (`workers.runtime.view_server`)."""

    url: str = Field(max_length=300, pattern=r"^http://[^/?#\s]+$")
    secret: str = Field(min_length=16, max_length=100)


class OpenedIn(Body):
    pid: Pid
    step: Count
    restored: Uuid | None
    skipped: list[SkippedIn] = Field(max_length=MAX_CHECKPOINTS)
    checkpoints: CheckpointsIn
    views: ViewEndpointIn | None = None  # none from a driver of an earlier release


class ShardIn(Record):
    """One shard of a partitioned pipeline's stateful operator in a step (its operator's
    `shards`): checked, as the control plane counts them (`OperatorShardTotals`)."""

    shard: Count32
    rows_in: Count = 0
    rows_out: Count = 0
    step_ms: Ms = 0.0
    state_rows: Count = 0
    state_bytes: Count = 0


_SHARDS = TypeAdapter(list[ShardIn])


class SampleIn(Record):
    """One step's metrics (`backend.models.MetricSample`)."""

    ts: float = Field(allow_inf_nan=False)
    step: Count
    steps: Count32 = 1
    rows_in: Count = 0
    rows_out: Count = 0
    dead_letters: Count = 0
    late_rows: Count = 0
    step_ms: Ms = 0.0
    spark_ms: Ms = 0.0
    engine_ms: Ms = 0.0
    commit_ms: Ms = 0.0
    latency_ms: float | None = Field(None, allow_inf_nan=False)
    state_rows: Count = 0
    state_bytes: Count = 0
    spine_batches: Count32 = 0
    merge_backlog: Count32 = 0
    memory_bytes: Count = 0
    memory_budget_bytes: Count = 0
    operators: dict[str, Any] | None = None
    inputs: dict[str, Any] | None = None
    sinks: dict[str, Any] | None = None
    # Seconds each checkpoint upload took that finished since the step before: the upload
    # histogram's, not a column of the sample.
    uploads_s: list[Annotated[float, Field(ge=0, le=86_400, allow_inf_nan=False)]] = Field(
        default_factory=list, max_length=1_000
    )

    @field_validator("operators")
    @classmethod
    def _check_shards(cls, operators: dict[str, Any] | None) -> dict[str, Any] | None:
        """Each operator's `shards`, if any, checked (the rest of its figures as they come)."""
        for op_id, m in (operators or {}).items():
            if isinstance(m, dict) and m.get("shards") is not None:
                if len(op_id) > MAX_OPERATOR_ID:
                    raise ValueError(f"an operator id is at most {MAX_OPERATOR_ID} characters")
                m["shards"] = [x.model_dump() for x in _SHARDS.validate_python(m["shards"])]
        return operators


class EventIn(Record):
    """A durability event (`workers.runtime.durability`)."""

    event: str = Field(max_length=64)
    # Not bounded but by the body's size: a report refused for a long message would lose
    # its steps (the pipeline shows the message's start).
    message: str | None = None


class ReportIn(Body):
    pid: Pid
    step: Count
    samples: list[SampleIn] = Field(default_factory=list, max_length=MAX_RECORDS)
    events: list[EventIn] = Field(default_factory=list, max_length=MAX_RECORDS)
    heartbeat: bool = True
    checkpoints: CheckpointsIn | None = None


class FinishIn(Body):
    result: dict[str, Any] | None
    # Not bounded but by the body's size: a refused finish would leave the operation
    # running until the run ends.
    error: str | None
    checkpoints: CheckpointsIn


class DesiredOut(BaseModel):
    exit: bool = False
    paused: bool | None = None
    has_policy: bool = False
    auto_commit_s: float | None = None


class ClaimedOut(BaseModel):
    id: str
    kind: str
    params: dict[str, Any]
    pinned: list[str]


__all__ = [
    "CheckpointIn",
    "CheckpointsIn",
    "ClaimedOut",
    "DesiredOut",
    "EventIn",
    "FinishIn",
    "OpenedIn",
    "ReportIn",
    "SampleIn",
    "ShardIn",
    "SkippedIn",
]
