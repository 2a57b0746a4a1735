"""Tables fed by changes by key, not inserts: a `log` or `kafka` table's `upsert` mode, its
vocabulary of ops, and which of a batch's records are not changes the table can apply
(docs/connectors.md, "Upserts and deletes"). The engine applies them (`storage_engine`'s
`Upsert`); ingest refuses a body holding a bad one, Kafka makes it a dead letter."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from .fields import TABLE_RE, SpecModel

# What an op column may say (any case): the deletes (the engine's `DELETE_OPS`), and the
# words Debezium and CDC tools use for the rest, which upsert.
DELETE_OPS = ("delete", "d")
OPS = ("upsert", "insert", "update", "i", "u", "c", "r", *DELETE_OPS)
_OPS = pa.array(OPS, pa.string())


class UpsertMode(SpecModel):
    """Records that upsert or delete a row by key, not insert one (docs/connectors.md,
    Upserts)."""

    key: list[str] = Field(min_length=1, max_length=32, description="the key columns")
    op_column: str = Field(
        "op",
        pattern=TABLE_RE,
        description="the records' column saying what each is: `delete` or `d` (any case) "
        "deletes the key's row; absent, NULL or `upsert` upserts it",
    )

    def check(self, columns: dict[str, str], event_time: object) -> None:
        """ValueError unless the key columns are among `columns` (the table's declared ones)
        and the op column is not; an upserted table has no event time."""
        missing = [k for k in self.key if k not in columns]
        if missing:
            raise ValueError(f"upsert.key: {missing} are not columns of the schema")
        if self.op_column in columns:
            raise ValueError(f"upsert.op_column: {self.op_column!r} is a column of the schema")
        if event_time is not None:
            raise ValueError("event_time: an upserted table has none (an update is never late)")


def bad_changes(table: pa.Table, key: tuple[str, ...], op: str) -> dict[int, tuple[str, str]]:
    """The rows of `table` (parsed records of an upserted table) that are no change: each
    one's index -> (the column at fault, why), the first fault of a row only."""
    out: dict[int, tuple[str, str]] = {}
    for k in key:
        why = f"key column {k!r} is missing: an upsert or delete names its key"
        for i in pc.indices_nonzero(pc.is_null(table.column(k))).to_pylist():
            out.setdefault(i, (k, why))
    ops = table.column(op)
    known = pc.or_(pc.is_null(ops), pc.is_in(pc.utf8_lower(ops), _OPS))
    for i in pc.indices_nonzero(pc.invert(known)).to_pylist():
        out.setdefault(
            i,
            (op, f"{op} {ops[i].as_py()!r} is not one of {', '.join(OPS)} (or absent: an upsert)"),
        )
    return dict(sorted(out.items()))


__all__ = ["DELETE_OPS", "OPS", "UpsertMode", "bad_changes"]
