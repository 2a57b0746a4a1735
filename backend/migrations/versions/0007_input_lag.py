"""Each step's input tables' offsets and lag (`metric_samples.inputs`), for the pipeline
page's input lag (a Kafka table's per partition).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-29 14:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("metric_samples", sa.Column("inputs", sa.JSON(none_as_null=True)))


def downgrade() -> None:
    op.drop_column("metric_samples", "inputs")
