"""Initial schema.

Every table of backend/models.py: pipelines, runs, checkpoints, operations, retention
policies, API tokens and metric samples.

Enum columns are VARCHAR(24) with a CHECK constraint listing the values, the same on SQLite and
PostgreSQL (no native enum types), so adding a value is: drop the check, create the new one.
Constraint names follow `backend.db.Base.metadata`'s naming convention and are spelled out
here (`op.f`) so that they never depend on the convention in force when this runs.

Revision ID: 0001
Revises:
Create Date: 2026-11-21 05:34:35

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the models' types and enum values: a migration must not import
# backend.models, which moves on.
TIMESTAMP = sa.DateTime(timezone=True)  # backend.models.UTCDateTime
ENUM = sa.String(length=24)  # backend.models._enum(...): non-native, checked by one_of()
DESIRED_STATE = ("running", "paused", "stopped")
PIPELINE_STATE = ("stopped", "starting", "running", "paused", "stopping", "restarting", "failed")
RUN_STATE = ("starting", "running", "stopped", "finished", "failed", "lost")
OPERATION_KIND = ("commit", "gc", "delete_checkpoint", "restore", "stop")
OPERATION_STATUS = ("pending", "running", "succeeded", "failed")
TOKEN_ROLE = ("viewer", "operator", "admin")


def one_of(column: str, values: tuple[str, ...], name: str) -> sa.CheckConstraint:
    """An enum column's CHECK constraint. The name is the one the naming convention gives
    `sa.Enum(..., name=<enum>, create_constraint=True)`: ck_<table>_<enum>."""
    listed = ", ".join(f"'{v}'" for v in values)
    return sa.CheckConstraint(f"{column} IN ({listed})", name=op.f(name))


def upgrade() -> None:
    op.create_table(
        "pipelines",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("desired_state", ENUM, nullable=False),
        sa.Column("state", ENUM, nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("restore_point", sa.String(length=36), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pipelines")),
        sa.UniqueConstraint("name", name=op.f("uq_pipelines_name")),
        one_of("desired_state", DESIRED_STATE, "ck_pipelines_desired_state"),
        one_of("state", PIPELINE_STATE, "ck_pipelines_pipeline_state"),
    )

    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pipeline_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("state", ENUM, nullable=False),
        sa.Column("from_checkpoint", sa.String(length=64), nullable=False),
        sa.Column("restored_checkpoint", sa.String(length=36), nullable=True),
        sa.Column("restart_count", sa.Integer(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=True),
        sa.Column("ended_at", TIMESTAMP, nullable=True),
        sa.Column("heartbeat_at", TIMESTAMP, nullable=True),
        sa.Column("first_step", sa.BigInteger(), nullable=True),
        sa.Column("last_step", sa.BigInteger(), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("exit_reason", sa.Text(), nullable=True),
        sa.Column("log_path", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.ForeignKeyConstraint(
            ["pipeline_id"],
            ["pipelines.id"],
            name=op.f("fk_runs_pipeline_id_pipelines"),
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("pipeline_id", "number", name=op.f("uq_runs_pipeline_id_number")),
        one_of("state", RUN_STATE, "ck_runs_run_state"),
    )

    op.create_table(
        "checkpoints",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pipeline_id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("identifier", sa.String(length=255), nullable=True),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("parent", sa.String(length=36), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("new_bytes", sa.BigInteger(), nullable=False),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.Column("source_offset", sa.BigInteger(), nullable=True),
        sa.Column("local_durable", sa.Boolean(), nullable=False),
        sa.Column("remote_durable", sa.Boolean(), nullable=False),
        sa.Column("pinned", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_checkpoints")),
        sa.ForeignKeyConstraint(
            ["pipeline_id"],
            ["pipelines.id"],
            name=op.f("fk_checkpoints_pipeline_id_pipelines"),
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("pipeline_id", "uuid", name=op.f("uq_checkpoints_pipeline_id_uuid")),
    )

    op.create_table(
        "operations",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("pipeline_id", sa.Integer(), nullable=False),
        sa.Column("kind", ENUM, nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("status", ENUM, nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=True),
        sa.Column("finished_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_operations")),
        sa.ForeignKeyConstraint(
            ["pipeline_id"],
            ["pipelines.id"],
            name=op.f("fk_operations_pipeline_id_pipelines"),
            ondelete="CASCADE",
        ),
        one_of("kind", OPERATION_KIND, "ck_operations_operation_kind"),
        one_of("status", OPERATION_STATUS, "ck_operations_operation_status"),
    )
    op.create_index(op.f("ix_operations_pipeline_status"), "operations", ["pipeline_id", "status"])

    op.create_table(
        "retention_policies",
        sa.Column("pipeline_id", sa.Integer(), nullable=False),
        sa.Column("keep_last", sa.Integer(), nullable=True),
        sa.Column("max_age_s", sa.Float(), nullable=True),
        sa.Column("min_keep", sa.Integer(), nullable=False),
        sa.Column("auto_commit_interval_s", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("pipeline_id", name=op.f("pk_retention_policies")),
        sa.ForeignKeyConstraint(
            ["pipeline_id"],
            ["pipelines.id"],
            name=op.f("fk_retention_policies_pipeline_id_pipelines"),
            ondelete="CASCADE",
        ),
    )

    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("role", ENUM, nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=12), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("last_used_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
        one_of("role", TOKEN_ROLE, "ck_api_tokens_token_role"),
    )

    op.create_table(
        "metric_samples",
        # BIGSERIAL on PostgreSQL; INTEGER PRIMARY KEY (the rowid) on SQLite.
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("pipeline_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("resolution_s", sa.Integer(), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column("rows_in", sa.BigInteger(), nullable=False),
        sa.Column("rows_out", sa.BigInteger(), nullable=False),
        sa.Column("dead_letters", sa.BigInteger(), nullable=False),
        sa.Column("step_ms", sa.Float(), nullable=False),
        sa.Column("spark_ms", sa.Float(), nullable=False),
        sa.Column("engine_ms", sa.Float(), nullable=False),
        sa.Column("commit_ms", sa.Float(), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("state_rows", sa.BigInteger(), nullable=False),
        sa.Column("state_bytes", sa.BigInteger(), nullable=False),
        sa.Column("spine_batches", sa.Integer(), nullable=False),
        sa.Column("merge_backlog", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metric_samples")),
        sa.ForeignKeyConstraint(
            ["pipeline_id"],
            ["pipelines.id"],
            name=op.f("fk_metric_samples_pipeline_id_pipelines"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
            name=op.f("fk_metric_samples_run_id_runs"),
            ondelete="SET NULL",
        ),
    )
    op.create_index(op.f("ix_metric_samples_pipeline_id"), "metric_samples", ["pipeline_id", "id"])
    op.create_index(op.f("ix_metric_samples_run_id"), "metric_samples", ["run_id"])
    op.create_index(
        op.f("ix_metric_samples_pipeline_id_ts"), "metric_samples", ["pipeline_id", "ts"]
    )


def downgrade() -> None:
    # Children before parents; a table's indexes and constraints go with it.
    op.drop_index(op.f("ix_metric_samples_pipeline_id_ts"), table_name="metric_samples")
    op.drop_index(op.f("ix_metric_samples_run_id"), table_name="metric_samples")
    op.drop_index(op.f("ix_metric_samples_pipeline_id"), table_name="metric_samples")
    op.drop_table("metric_samples")
    op.drop_table("api_tokens")
    op.drop_table("retention_policies")
    op.drop_index(op.f("ix_operations_pipeline_status"), table_name="operations")
    op.drop_table("operations")
    op.drop_table("checkpoints")
    op.drop_table("runs")
    op.drop_table("pipelines")
