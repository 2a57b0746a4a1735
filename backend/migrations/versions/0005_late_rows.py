"""Watermarks: the rows they drop as late, per step (`metric_samples.late_rows`) and in
the pipeline's monotonic counters (`pipeline_totals.late_rows`).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29 02:20:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for table in ("metric_samples", "pipeline_totals"):
        op.add_column(
            table, sa.Column("late_rows", sa.BigInteger(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    for table in ("metric_samples", "pipeline_totals"):
        op.drop_column(table, "late_rows")
