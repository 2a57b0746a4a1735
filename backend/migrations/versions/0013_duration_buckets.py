"""`duration_buckets`: per pipeline, histograms of step and commit durations (counts and sums
per bucket, only growing), which Prometheus reports as `spindle_pipeline_step_duration_seconds`
and `spindle_pipeline_commit_duration_seconds`. Starts empty: durations before are not
bucketed.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07 13:20:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "duration_buckets",
        sa.Column("pipeline_id", sa.Integer(), nullable=False),
        sa.Column("metric", sa.String(length=32), nullable=False),
        sa.Column("bucket", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("sum_s", sa.Float(), nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint(
            "pipeline_id", "metric", "bucket", name=op.f("pk_duration_buckets")
        ),
        sa.ForeignKeyConstraint(
            ["pipeline_id"],
            ["pipelines.id"],
            name=op.f("fk_duration_buckets_pipeline_id_pipelines"),
            ondelete="CASCADE",
        ),
    )


def downgrade() -> None:
    op.drop_table("duration_buckets")
