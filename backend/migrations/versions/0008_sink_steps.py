"""Each step's figures per sink (`metric_samples.sinks`: rows written, the last step that
wrote any), for the pipeline page's sinks.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-29 17:10:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("metric_samples", sa.Column("sinks", sa.JSON(none_as_null=True)))


def downgrade() -> None:
    op.drop_column("metric_samples", "sinks")
