"""Per-operator metrics: `metric_samples.operators`, each stateful operator's rows in and
out, time and state per step (SQL pipelines' dataflow graph, REST, SSE and Prometheus).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-28 04:40:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("metric_samples", sa.Column("operators", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("metric_samples", "operators")
