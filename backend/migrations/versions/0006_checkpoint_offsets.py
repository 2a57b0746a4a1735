"""Every input table's offset per checkpoint (`checkpoints.source_offsets`), for SQL
pipelines that read several tables; `source_offset` stays the `source` table's.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29 10:40:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("checkpoints", sa.Column("source_offsets", sa.JSON(none_as_null=True)))


def downgrade() -> None:
    op.drop_column("checkpoints", "source_offsets")
