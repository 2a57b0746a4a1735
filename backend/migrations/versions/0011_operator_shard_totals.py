"""`operator_shard_totals`: per pipeline, stateful operator and shard (a partitioned
pipeline's, `parallelism` > 1), counters that only grow (rows in and out, step time), which
Prometheus reports as `spindle_operator_shard_*_total`. Each step's figures per shard are in
the metrics history (`metric_samples.operators`, under `shards`), which downsampling folds
and deletes; these are not. Starts empty: the history before has no shards.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-10 09:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "operator_shard_totals",
        sa.Column("pipeline_id", sa.Integer(), nullable=False),
        sa.Column("operator", sa.String(length=128), nullable=False),
        sa.Column("shard", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("rows_in", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("rows_out", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("step_ms", sa.Float(), nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint(
            "pipeline_id", "operator", "shard", name=op.f("pk_operator_shard_totals")
        ),
        sa.ForeignKeyConstraint(
            ["pipeline_id"],
            ["pipelines.id"],
            name=op.f("fk_operator_shard_totals_pipeline_id_pipelines"),
            ondelete="CASCADE",
        ),
    )


def downgrade() -> None:
    op.drop_table("operator_shard_totals")
