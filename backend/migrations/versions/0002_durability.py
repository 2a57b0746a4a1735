"""Durability visible, counters monotonic.

- `pipelines.durability_error` / `durability_error_at`: the newest durability problem of the
  pipeline's run (a failed checkpoint or upload, the object store unreachable, fencing),
  cleared once a checkpoint is durable again;
- `pipeline_totals`: per pipeline, counters that only grow (steps, rows in and out, dead
  letters, failed commits and uploads, fencings), which Prometheus reports. Before, the
  `*_total` series were sums over the metrics history, which downsampling deletes, so they
  went down. Filled here from the history still kept.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-27 14:20:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)  # backend.models.UTCDateTime
COUNTERS = (
    "steps",
    "rows_in",
    "rows_out",
    "dead_letters",
    "commit_failures",
    "upload_failures",
    "fencings",
)


def upgrade() -> None:
    op.add_column("pipelines", sa.Column("durability_error", sa.Text(), nullable=True))
    op.add_column("pipelines", sa.Column("durability_error_at", TIMESTAMP, nullable=True))
    op.create_table(
        "pipeline_totals",
        sa.Column("pipeline_id", sa.Integer(), nullable=False),
        *(sa.Column(c, sa.BigInteger(), nullable=False, server_default="0") for c in COUNTERS),
        sa.PrimaryKeyConstraint("pipeline_id", name=op.f("pk_pipeline_totals")),
        sa.ForeignKeyConstraint(
            ["pipeline_id"],
            ["pipelines.id"],
            name=op.f("fk_pipeline_totals_pipeline_id_pipelines"),
            ondelete="CASCADE",
        ),
    )
    op.execute(
        "INSERT INTO pipeline_totals (pipeline_id, steps, rows_in, rows_out, dead_letters) "
        "SELECT p.id, COALESCE(SUM(m.steps), 0), COALESCE(SUM(m.rows_in), 0), "
        "COALESCE(SUM(m.rows_out), 0), COALESCE(SUM(m.dead_letters), 0) "
        "FROM pipelines p LEFT JOIN metric_samples m ON m.pipeline_id = p.id GROUP BY p.id"
    )


def downgrade() -> None:
    op.drop_table("pipeline_totals")
    op.drop_column("pipelines", "durability_error_at")
    op.drop_column("pipelines", "durability_error")
