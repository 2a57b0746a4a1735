"""A run's token (`run_tokens`): the driver's credential for its own run's endpoints of the
REST API, issued as the run starts and revoked when it ends. Only its digest is stored.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06 19:45:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Frozen: a migration must not import backend.models, which moves on.
TIMESTAMP = sa.DateTime(timezone=True)  # backend.models.UTCDateTime

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "run_tokens",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("revoked_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_run_tokens")),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_run_tokens_run_id_runs"), ondelete="CASCADE"
        ),
        sa.UniqueConstraint("token_hash", name=op.f("uq_run_tokens_token_hash")),
    )


def downgrade() -> None:
    op.drop_table("run_tokens")
