"""Where an input table's rows come from: the spec's `tables` entries (the `kafka` source
is `kafka.py`'s)."""

from __future__ import annotations

import os
from typing import Annotated, ClassVar, Literal

import pyarrow as pa
from pydantic import Field, field_validator, model_validator

from .changes import UpsertMode
from .datagen import DATAGEN_SCHEMAS
from .fields import (
    EVENT_TIME_DOC,
    MAX_COUNT,
    MAX_ROWS,
    NAME_RE,
    TABLE_DOC,
    TABLE_RE,
    EventTime,
    FilePath,
)
from .kafka import KafkaSource
from .kinds import InputLogged, SourceModel
from .postgres_cdc import PostgresCdcSource
from .types import TYPE_NAMES_DOC, arrow_schema, check_types


class DatagenSource(SourceModel):
    """Deterministic generated rows: row i is a pure function of (seed, i)."""

    kind: Literal["datagen"]
    table: str = Field("input", pattern=TABLE_RE, description=TABLE_DOC)
    event_time: EventTime | None = Field(None, description=EVENT_TIME_DOC)
    generator: Literal["clicks", "nexmark"] = Field(
        "clicks",
        description="clicks: (ts, user, page, amount); nexmark: the Nexmark benchmark's "
        "persons, auctions and bids (1 : 3 : 46) in one stream, event_type 0, 1, 2 and each "
        "kind's columns prefixed person_, auction_, bid_ (docs/sql.md)",
    )
    seed: int = Field(0, ge=0, le=MAX_COUNT)
    rows_per_second: float = Field(
        1000.0, gt=0, le=1e9, allow_inf_nan=False, description="target event rate"
    )
    max_rows_per_step: int = Field(100_000, gt=0, le=MAX_ROWS)
    users: int = Field(
        1000,
        gt=0,
        le=MAX_COUNT,
        description="distinct users (clicks) / active persons (nexmark)",
    )
    limit: int | None = Field(None, gt=0, le=MAX_COUNT, description="stop after this many rows")

    def columns(self) -> dict[str, str]:
        """The generator's columns (`datagen.DATAGEN_SCHEMAS`)."""
        pairs = (c.strip().split(" ", 1) for c in DATAGEN_SCHEMAS[self.generator].split(","))
        return {name: kind for name, kind in pairs}


class FilesSource(SourceModel):
    """A directory (or object-store prefix) of immutable files, read in name order; offset =
    files consumed."""

    object_paths: ClassVar[bool] = True

    kind: Literal["files"]
    table: str = Field("input", pattern=TABLE_RE, description=TABLE_DOC)
    event_time: EventTime | None = Field(None, description=EVENT_TIME_DOC)
    path: FilePath = Field(
        description="a directory inside the configured file roots (relative ones start at "
        "the first root), or s3://bucket/prefix inside the configured object roots: its own "
        "files, not its subdirectories'"
    )
    format: Literal["json", "csv", "parquet"]
    schema_: dict[str, str] | None = Field(
        None,
        alias="schema",
        description="column -> Spark SQL type (needed for json and csv), e.g. {ts: timestamp}",
    )
    max_files_per_step: int = Field(10, gt=0, le=1_000_000)

    def columns(self) -> dict[str, str] | None:
        return self.schema_

    def file_path(self) -> str:
        return self.path


class LogSource(SourceModel):
    """The engine's input log of records pushed through the ingest API."""

    kind: Literal["log"]
    table: str = Field("input", pattern=TABLE_RE, description=TABLE_DOC)
    event_time: EventTime | None = Field(None, description=EVENT_TIME_DOC)
    stream: str = Field(pattern=NAME_RE)
    schema_: dict[str, str] = Field(
        alias="schema",
        min_length=1,
        description=f"column -> type, one of {TYPE_NAMES_DOC}",
    )
    max_records_per_step: int = Field(100_000, gt=0, le=MAX_ROWS)
    upsert: UpsertMode | None = Field(
        None, description="records upsert and delete rows by key instead of inserting them"
    )

    @field_validator("schema_")
    @classmethod
    def _types(cls, v: dict[str, str]) -> dict[str, str]:
        return check_types(v)

    @model_validator(mode="after")
    def _upsert(self) -> LogSource:
        if self.upsert is not None:
            self.upsert.check(self.schema_, self.event_time)
        return self

    def columns(self) -> dict[str, str]:
        """The schema's columns, and an upserted table's op column last."""
        if self.upsert is None:
            return self.schema_
        return {**self.schema_, self.upsert.op_column: "string"}

    def upserted(self) -> tuple[tuple[str, ...], str] | None:
        u = self.upsert
        return None if u is None else (tuple(u.key), u.op_column)

    def arrow_schema(self) -> pa.Schema:
        return arrow_schema(self.columns())

    def log_dir(self, storage: str | os.PathLike[str]) -> str:
        """Where the stream's input log lives: in the pipeline's storage location (the
        layout `storage_engine.input_log.LOG_DIR` names, which the object store mirrors)."""
        return os.path.join(storage, "input-log", self.stream)

    def input_log(self) -> InputLogged:
        return self


InputSource = DatagenSource | FilesSource | LogSource | KafkaSource | PostgresCdcSource
Source = Annotated[InputSource, Field(discriminator="kind")]

__all__ = ["DatagenSource", "FilesSource", "InputSource", "LogSource", "Source", "UpsertMode"]
