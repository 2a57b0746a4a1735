"""`runs.views_url`, `runs.views_secret`: where a running driver serves its views' live rows
(`workers.runtime.view_server`) and the secret the API presents there. Null for runs
before, and for runs without a `view` sink.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-08 01:20:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("views_url", sa.String(length=300), nullable=True))
    op.add_column("runs", sa.Column("views_secret", sa.String(length=100), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "views_secret")
    op.drop_column("runs", "views_url")
