"""The `postgres_cdc` source's spec: a PostgreSQL table read as an input table, its rows
then its changes, through logical replication (docs/connectors.md, PostgreSQL CDC)."""

from __future__ import annotations

from typing import ClassVar, Literal

import pyarrow as pa
from pydantic import Field, field_validator, model_validator

from .fields import MAX_ROWS, TABLE_DOC, TABLE_RE, check_sink_variables
from .kinds import SourceModel
from .types import TYPE_NAMES_DOC, arrow_schema, check_types

# PostgreSQL's identifiers as the source takes them: unquoted, lower case.
PG_NAME_RE = r"^[a-z_][a-z0-9_]{0,62}$"
# The table's column saying whether a change upserts or deletes its key's row: the
# replication stream's, never the source table's.
OP_COLUMN = "__op"


class PostgresCdcSource(SourceModel):
    """A PostgreSQL table: a snapshot of its rows, then every committed insert, update and
    delete, through a logical replication slot (pgoutput); offset = the snapshot's rows
    read and the replication stream's position (LSN)."""

    offset_per_partition: ClassVar[bool] = True

    kind: Literal["postgres_cdc"]
    table: str = Field("input", pattern=TABLE_RE, description=TABLE_DOC)
    event_time: None = Field(None, description="none: an update is never late")
    dsn: str = Field(
        description="libpq connection string of the source database (a user with the "
        "REPLICATION attribute who may read the table); may name an environment variable of "
        "the driver as ${VAR}, only one whose name starts with SPINDLE_SINK_"
    )
    source_schema: str = Field("public", pattern=PG_NAME_RE, description="the table's schema")
    source_table: str = Field(pattern=PG_NAME_RE, description="the table to read")
    schema_: dict[str, str] = Field(
        alias="schema",
        min_length=1,
        description=f"the columns read -> type, one of {TYPE_NAMES_DOC} (the source's "
        "other columns are ignored)",
    )
    key: list[str] = Field(
        min_length=1, max_length=32, description="the table's primary key columns"
    )
    slot: str = Field(
        pattern=PG_NAME_RE,
        description="the replication slot the pipeline creates and owns: one per table and "
        "pipeline (it keeps the server's WAL until the pipeline's checkpoints no longer "
        "need it)",
    )
    publication: str | None = Field(
        None,
        pattern=PG_NAME_RE,
        description="the publication the slot streams (default: the slot's name), created "
        "for the table if it does not exist",
    )
    max_changes_per_step: int = Field(100_000, gt=0, le=MAX_ROWS)

    @field_validator("schema_")
    @classmethod
    def _types(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if name == OP_COLUMN:
                raise ValueError(f"{OP_COLUMN!r} is the table's op column")
        return check_types(v)

    @field_validator("dsn")
    @classmethod
    def _sink_variables_only(cls, v: str) -> str:
        return check_sink_variables(v)

    @model_validator(mode="after")
    def _key(self) -> PostgresCdcSource:
        missing = [k for k in self.key if k not in self.schema_]
        if missing:
            raise ValueError(f"key: {missing} are not columns of the schema")
        return self

    def columns(self) -> dict[str, str]:
        """The columns read, and the op column last."""
        return {**self.schema_, OP_COLUMN: "string"}

    def upserted(self) -> tuple[tuple[str, ...], str] | None:
        return tuple(self.key), OP_COLUMN

    def arrow_schema(self) -> pa.Schema:
        return arrow_schema(self.columns())

    def publication_name(self) -> str:
        return self.publication or self.slot


__all__ = ["OP_COLUMN", "PostgresCdcSource"]
