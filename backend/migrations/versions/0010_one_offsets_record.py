"""A checkpoint's offsets are recorded once, per input table (`checkpoints.source_offsets`):
`checkpoints.source_offset`, the first table's again, goes; the API derives it from
`source_offsets` (`backend.models.Checkpoint.source_offset`).

Rows that have only `source_offset` (mirrored from checkpoints of one-source releases) get
it as their pipeline's first input table's (`source`, or the first of `tables`; named
`input` unless the spec names it), as the runtime reads such a checkpoint. The downgrade
puts back the first table's offset as one number (a Kafka table's: its partitions' sum).
Plain SQL per dialect, so that `alembic upgrade --sql` writes it too.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-08 10:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The first input table's name in a pipeline's spec (`p.spec`): `source`'s in a spec giving
# it (earlier releases), else the first of `tables`'.
_FIRST_TABLE = {
    "sqlite": """CASE WHEN json_type(p.spec, '$.source') IS NOT NULL
        THEN coalesce(json_extract(p.spec, '$.source.table'), 'input')
        ELSE coalesce(json_extract(p.spec, '$.tables[0].table'), 'input') END""",
    "postgresql": """CASE WHEN p.spec -> 'source' IS NOT NULL
        THEN coalesce(p.spec -> 'source' ->> 'table', 'input')
        ELSE coalesce(p.spec -> 'tables' -> 0 ->> 'table', 'input') END""",
}
_OBJECT = {"sqlite": "json_object", "postgresql": "json_build_object"}

# The first entry of `source_offsets` (the spec's order) as one number.
_FIRST_OFFSET = {
    "sqlite": """SELECT CASE WHEN e.type = 'object'
            THEN (SELECT sum(p.value) FROM json_each(e.value) p) ELSE e.value END
        FROM json_each(checkpoints.source_offsets) e ORDER BY e.id LIMIT 1""",
    "postgresql": """SELECT CASE WHEN json_typeof(e.value) = 'object'
            THEN (SELECT sum(p.value::bigint) FROM json_each_text(e.value) p)
            ELSE e.value::text::bigint END
        FROM json_each(checkpoints.source_offsets) WITH ORDINALITY AS e(key, value, n)
        ORDER BY e.n LIMIT 1""",
}


def _dialect() -> str:
    return op.get_context().dialect.name


def upgrade() -> None:
    d = _dialect()
    op.execute(
        sa.text(
            f"""UPDATE checkpoints SET source_offsets = {_OBJECT[d]}(
                (SELECT {_FIRST_TABLE[d]} FROM pipelines p WHERE p.id = checkpoints.pipeline_id),
                source_offset)
            WHERE source_offsets IS NULL AND source_offset IS NOT NULL"""
        )
    )
    op.drop_column("checkpoints", "source_offset")


def downgrade() -> None:
    op.add_column("checkpoints", sa.Column("source_offset", sa.BigInteger(), nullable=True))
    op.execute(
        sa.text(
            f"""UPDATE checkpoints SET source_offset = ({_FIRST_OFFSET[_dialect()]})
            WHERE source_offsets IS NOT NULL"""
        )
    )
