"""The control plane's records (SQLAlchemy 2.0). Changing a model needs an Alembic revision;
`tests/backend/test_migrations.py` fails when models and migrations disagree."""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Mapped, mapped_column, relationship

from pipeline_spec.offsets import first_total

from .db import Base


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """Timezone-aware UTC on the way in and out (SQLite keeps no zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime stored; use backend.models.utcnow()")
        return value.astimezone(dt.UTC)

    def process_result_value(self, value: Any, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        assert isinstance(value, dt.datetime)
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value


class DesiredState(enum.StrEnum):
    running = "running"
    paused = "paused"
    stopped = "stopped"


class PipelineState(enum.StrEnum):
    stopped = "stopped"
    starting = "starting"
    running = "running"
    paused = "paused"
    stopping = "stopping"
    restarting = "restarting"  # a run died; the reaper starts another after a backoff
    failed = "failed"  # gave up: the restart policy is exhausted or the spec cannot run


class RunState(enum.StrEnum):
    starting = "starting"
    running = "running"
    stopped = "stopped"  # ended on request (stop, restore)
    finished = "finished"  # the source ended
    failed = "failed"  # the driver exited with an error or was killed
    lost = "lost"  # heartbeats stopped (its worker died)


ENDED_RUN = (RunState.stopped, RunState.finished, RunState.failed, RunState.lost)


class OperationKind(enum.StrEnum):
    commit = "commit"
    gc = "gc"
    delete_checkpoint = "delete_checkpoint"
    restore = "restore"
    stop = "stop"


class OperationStatus(enum.StrEnum):
    pending = "pending"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"


class Role(enum.StrEnum):
    viewer = "viewer"
    operator = "operator"
    admin = "admin"

    @property
    def rank(self) -> int:
        return ("viewer", "operator", "admin").index(self.value)


def _enum(e: type[enum.Enum], name: str) -> Enum:
    # Stored as strings checked by the database, so adding a value is a small migration.
    return Enum(
        e, name=name, native_enum=False, length=24, validate_strings=True, create_constraint=True
    )


class Pipeline(Base):
    __tablename__ = "pipelines"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    desired_state: Mapped[DesiredState] = mapped_column(
        _enum(DesiredState, "desired_state"), default=DesiredState.stopped
    )
    state: Mapped[PipelineState] = mapped_column(
        _enum(PipelineState, "pipeline_state"), default=PipelineState.stopped
    )
    error: Mapped[str | None] = mapped_column(Text, default=None)
    # The checkpoint the next start resumes from when the start says "latest" (set by a
    # restore while stopped); cleared once a run has opened it.
    restore_point: Mapped[str | None] = mapped_column(String(36), default=None)
    # The newest durability problem its run reported (a failed checkpoint or upload, the
    # object store unreachable, fencing), cleared once a checkpoint is durable again.
    durability_error: Mapped[str | None] = mapped_column(Text, default=None)
    durability_error_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, default=None)
    # Lineage of a fork (`services/forks.py`): the pipeline and checkpoint it was forked from
    # (the origin's name as it was: the origin may be deleted since), and when.
    origin_pipeline: Mapped[str | None] = mapped_column(String(63), default=None)
    origin_checkpoint: Mapped[str | None] = mapped_column(String(36), default=None)
    origin_step: Mapped[int | None] = mapped_column(BigInteger, default=None)
    forked_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, default=None)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    runs: Mapped[list[Run]] = relationship(
        back_populates="pipeline", cascade="all, delete-orphan", passive_deletes=True
    )
    retention: Mapped[RetentionPolicy | None] = relationship(
        cascade="all, delete-orphan", passive_deletes=True
    )


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (UniqueConstraint("pipeline_id", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    pipeline_id: Mapped[int] = mapped_column(ForeignKey("pipelines.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)  # 1, 2, ... per pipeline
    state: Mapped[RunState] = mapped_column(_enum(RunState, "run_state"))
    from_checkpoint: Mapped[str] = mapped_column(String(64), default="latest")
    # Operators that start empty if their state no longer fits the query (`*`: all such).
    drop_state: Mapped[list[str] | None] = mapped_column(JSON(none_as_null=True), default=None)
    restored_checkpoint: Mapped[str | None] = mapped_column(String(36), default=None)
    restart_count: Mapped[int] = mapped_column(Integer, default=0)  # consecutive automatic
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, default=None)
    ended_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, default=None)
    heartbeat_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, default=None)
    first_step: Mapped[int | None] = mapped_column(BigInteger, default=None)
    last_step: Mapped[int | None] = mapped_column(BigInteger, default=None)
    pid: Mapped[int | None] = mapped_column(Integer, default=None)
    host: Mapped[str | None] = mapped_column(String(255), default=None)
    exit_code: Mapped[int | None] = mapped_column(Integer, default=None)
    exit_reason: Mapped[str | None] = mapped_column(Text, default=None)
    log_path: Mapped[str | None] = mapped_column(Text, default=None)
    # Where the running driver serves its views' live rows, and the secret to present.
    views_url: Mapped[str | None] = mapped_column(String(300), default=None)
    views_secret: Mapped[str | None] = mapped_column(String(100), default=None)

    pipeline: Mapped[Pipeline] = relationship(back_populates="runs")


class Checkpoint(Base):
    """A mirror of one entry of the engine's manifest; the manifest wins on disagreement."""

    __tablename__ = "checkpoints"
    __table_args__ = (UniqueConstraint("pipeline_id", "uuid"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    pipeline_id: Mapped[int] = mapped_column(ForeignKey("pipelines.id", ondelete="CASCADE"))
    uuid: Mapped[str] = mapped_column(String(36))
    identifier: Mapped[str | None] = mapped_column(String(255), default=None)
    step: Mapped[int] = mapped_column(BigInteger)
    parent: Mapped[str | None] = mapped_column(String(36), default=None)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    new_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    duration_ms: Mapped[float] = mapped_column(Float, default=0.0)
    # Every input table's (SQL pipelines may read several): {table: offset}, in the spec's
    # order, where a Kafka table's offset is {"<topic>:<partition>": next offset}.
    source_offsets: Mapped[dict[str, int | dict[str, int]] | None] = mapped_column(
        JSON(none_as_null=True), default=None
    )
    local_durable: Mapped[bool] = mapped_column(Boolean, default=True)
    remote_durable: Mapped[bool] = mapped_column(Boolean, default=False)
    pinned: Mapped[bool] = mapped_column(Boolean, default=False)

    @property
    def source_offset(self) -> int | None:
        """The first input table's offset as one number, as the API has always shown it:
        derived here, never stored (`source_offsets` is the one record of the offsets)."""
        return first_total(self.source_offsets)


class Operation(Base):
    """An asynchronous command. A running job claims and performs its pipeline's pending
    operations; for a stopped pipeline the worker performs them on the storage location."""

    __tablename__ = "operations"
    __table_args__ = (Index("ix_operations_pipeline_status", "pipeline_id", "status"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    pipeline_id: Mapped[int] = mapped_column(ForeignKey("pipelines.id", ondelete="CASCADE"))
    kind: Mapped[OperationKind] = mapped_column(_enum(OperationKind, "operation_kind"))
    params: Mapped[dict[str, Any]] = mapped_column(JSON(none_as_null=True), default=dict)
    status: Mapped[OperationStatus] = mapped_column(
        _enum(OperationStatus, "operation_status"), default=OperationStatus.pending
    )
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, default=None)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, default=None)


class RetentionPolicy(Base):
    __tablename__ = "retention_policies"

    pipeline_id: Mapped[int] = mapped_column(
        ForeignKey("pipelines.id", ondelete="CASCADE"), primary_key=True
    )
    keep_last: Mapped[int | None] = mapped_column(Integer, default=None)
    max_age_s: Mapped[float | None] = mapped_column(Float, default=None)
    min_keep: Mapped[int] = mapped_column(Integer, default=1)
    auto_commit_interval_s: Mapped[float | None] = mapped_column(Float, default=None)


class ApiToken(Base):
    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    role: Mapped[Role] = mapped_column(_enum(Role, "token_role"))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(12))  # shown in listings, to tell tokens apart
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_used_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, default=None)


class RunToken(Base):
    """A run's credential for its own endpoints of the REST API (the driver's control plane
    over HTTP): issued as the run starts, revoked when it ends; only the digest is kept."""

    __tablename__ = "run_tokens"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, default=None)


class PipelineTotals(Base):
    """Counters of a pipeline that only grow (Prometheus `*_total`): the metrics history is
    downsampled and deleted, these are not."""

    __tablename__ = "pipeline_totals"

    pipeline_id: Mapped[int] = mapped_column(
        ForeignKey("pipelines.id", ondelete="CASCADE"), primary_key=True
    )
    steps: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    rows_in: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    rows_out: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    dead_letters: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    late_rows: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    commit_failures: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    upload_failures: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    fencings: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class OperatorShardTotals(Base):
    """Counters of each shard of a partitioned pipeline's stateful operator that only grow
    (Prometheus `spindle_operator_shard_*_total`), kept apart from the metrics history as
    `PipelineTotals` are."""

    __tablename__ = "operator_shard_totals"

    pipeline_id: Mapped[int] = mapped_column(
        ForeignKey("pipelines.id", ondelete="CASCADE"), primary_key=True
    )
    operator: Mapped[str] = mapped_column(String(128), primary_key=True)  # its persistent id
    shard: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    rows_in: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    rows_out: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    step_ms: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")


class DurationBuckets(Base):
    """A pipeline's histogram of one duration (`metric`: `step`, `commit`, `upload`), kept as
    Prometheus histograms are: per bucket (`services.metrics.BUCKETS_S`; the last is +Inf),
    the observations that fell in it and their sum. Only grows."""

    __tablename__ = "duration_buckets"

    pipeline_id: Mapped[int] = mapped_column(
        ForeignKey("pipelines.id", ondelete="CASCADE"), primary_key=True
    )
    metric: Mapped[str] = mapped_column(String(32), primary_key=True)
    bucket: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    count: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    sum_s: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")


class MetricSample(Base):
    """One step's metrics (resolution 0), or a downsampled bucket of them (resolution in
    seconds: sums of counts and the maximum of latencies over the bucket)."""

    __tablename__ = "metric_samples"
    __table_args__ = (
        Index("ix_metric_samples_pipeline_id", "pipeline_id", "id"),
        Index("ix_metric_samples_run_id", "run_id"),
        Index("ix_metric_samples_pipeline_id_ts", "pipeline_id", "ts"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    pipeline_id: Mapped[int] = mapped_column(ForeignKey("pipelines.id", ondelete="CASCADE"))
    run_id: Mapped[int | None] = mapped_column(
        ForeignKey("runs.id", ondelete="SET NULL"), default=None
    )
    resolution_s: Mapped[int] = mapped_column(Integer, default=0)
    ts: Mapped[float] = mapped_column(Float)  # unix seconds the step completed
    step: Mapped[int] = mapped_column(BigInteger)
    steps: Mapped[int] = mapped_column(Integer, default=1)
    rows_in: Mapped[int] = mapped_column(BigInteger, default=0)
    rows_out: Mapped[int] = mapped_column(BigInteger, default=0)
    dead_letters: Mapped[int] = mapped_column(BigInteger, default=0)
    late_rows: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    step_ms: Mapped[float] = mapped_column(Float, default=0.0)
    spark_ms: Mapped[float] = mapped_column(Float, default=0.0)
    engine_ms: Mapped[float] = mapped_column(Float, default=0.0)
    commit_ms: Mapped[float] = mapped_column(Float, default=0.0)
    latency_ms: Mapped[float | None] = mapped_column(Float, default=None)
    state_rows: Mapped[int] = mapped_column(BigInteger, default=0)
    state_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    spine_batches: Mapped[int] = mapped_column(Integer, default=0)
    merge_backlog: Mapped[int] = mapped_column(Integer, default=0)
    # State batches in memory after the step, and their budget (summed over the shards).
    memory_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    memory_budget_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # Per stateful operator (by id): rows_in, rows_out, step_ms, state_rows, state_bytes;
    # an operator of a partitioned pipeline, the same per shard in `shards` (with `shard`).
    operators: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), default=None)
    # Per input table after the step: offset (one number), lag (records, files or Kafka
    # records not read yet; None: unknown) and a Kafka table's lag per partition.
    inputs: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), default=None)
    # Per sink after the step: rows it wrote, the last step that wrote any (None: none yet).
    sinks: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), default=None)


__all__ = [
    "ENDED_RUN",
    "ApiToken",
    "Checkpoint",
    "DesiredState",
    "MetricSample",
    "Operation",
    "OperationKind",
    "OperationStatus",
    "OperatorShardTotals",
    "Pipeline",
    "PipelineState",
    "RetentionPolicy",
    "Role",
    "Run",
    "RunState",
    "RunToken",
    "utcnow",
]
