"""A pipeline's lineage: `pipelines.origin_pipeline`, `origin_checkpoint`, `origin_step` and
`forked_at`, set when the pipeline was forked from another's checkpoint
(`POST /pipelines/{name}/fork`), null otherwise. The origin's name is kept as it was, not a
foreign key: the origin may be deleted while its forks live on.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-08 01:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)  # backend.models.UTCDateTime


def upgrade() -> None:
    op.add_column("pipelines", sa.Column("origin_pipeline", sa.String(63), nullable=True))
    op.add_column("pipelines", sa.Column("origin_checkpoint", sa.String(36), nullable=True))
    op.add_column("pipelines", sa.Column("origin_step", sa.BigInteger(), nullable=True))
    op.add_column("pipelines", sa.Column("forked_at", TIMESTAMP, nullable=True))


def downgrade() -> None:
    for column in ("forked_at", "origin_step", "origin_checkpoint", "origin_pipeline"):
        op.drop_column("pipelines", column)
