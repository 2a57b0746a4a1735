"""Per-operator state drop: `runs.drop_state`, the operators a run starts empty when the
query changed since its checkpoint (`*`: every one whose state no longer fits).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-28 15:30:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("drop_state", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "drop_state")
