"""`metric_samples.memory_bytes` and `memory_budget_bytes`: a step's state batches in
memory and the budget they are kept under (the spec's `engine.memory_budget`; at
parallelism > 1 summed over the shards). Rows written before hold 0 for both.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07 12:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for name in ("memory_bytes", "memory_budget_bytes"):
        op.add_column(
            "metric_samples",
            sa.Column(name, sa.BigInteger(), nullable=False, server_default="0"),
        )


def downgrade() -> None:
    for name in ("memory_budget_bytes", "memory_bytes"):
        op.drop_column("metric_samples", name)
