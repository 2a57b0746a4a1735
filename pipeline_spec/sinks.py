"""Where a pipeline's operators' (or views') output goes: the spec's `sinks` entries."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from .fields import NAME_RE, FilePath, check_sink_variables
from .kafka import KafkaSink
from .kinds import SinkModel

_Column = Annotated[str, Field(min_length=1, max_length=128)]
KeyColumns = Annotated[list[_Column], Field(max_length=64)]
_KEY_DOC = (
    "table mode (required there): the view's columns that identify one of its rows, such as "
    "its GROUP BY columns; the table's primary key"
)


def _check_key(table_mode: bool, key: list[str]) -> None:
    if table_mode and not key:
        raise ValueError("key: a table-mode sink needs the view's key columns")
    if not table_mode and key:
        raise ValueError("key: only a table-mode sink takes key columns")
    if len(set(key)) != len(key):
        raise ValueError("key: a column appears twice")


class FilesSink(SinkModel):
    name: str = Field(pattern=NAME_RE)
    kind: Literal["files"]
    from_: str = Field(
        alias="from", description="the operator (or, with sql, the view) whose output is written"
    )
    path: FilePath
    format: Literal["parquet", "jsonl"] = "parquet"

    def file_path(self) -> str:
        return self.path


class PostgresSink(SinkModel):
    name: str = Field(pattern=NAME_RE)
    kind: Literal["postgres"]
    from_: str = Field(alias="from")
    dsn: str = Field(
        description="libpq connection string; may name an environment variable of the "
        "driver as ${VAR}, only one whose name starts with SPINDLE_SINK_ (credentials the "
        "operator set for sinks: no other variable, such as the server's own secrets, can "
        "be sent to a server a spec names)"
    )
    table: str = Field(pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    mode: Literal["changes", "table"] = Field(
        "changes",
        description="changes: one row per change (the view's columns, step, weight); "
        "table: the view's current contents, one row per key, kept in step by an insert, "
        "update or delete per change",
    )
    key: KeyColumns = Field(default_factory=list, description=_KEY_DOC)

    @model_validator(mode="after")
    def _key_for_table_mode(self) -> PostgresSink:
        _check_key(self.mode == "table", self.key)
        return self

    def key_columns(self) -> list[str]:
        return self.key

    @field_validator("dsn")
    @classmethod
    def _sink_variables_only(cls, v: str) -> str:
        return check_sink_variables(v)


class DeltaSink(SinkModel):
    object_paths: ClassVar[bool] = True

    name: str = Field(pattern=NAME_RE)
    kind: Literal["delta"]
    from_: str = Field(alias="from")
    path: FilePath = Field(
        description="the Delta table's directory (created if missing): a path inside the "
        "file roots, or s3://bucket/prefix inside the configured object roots"
    )
    mode: Literal["append", "table"] = Field(
        "append",
        description="append: the change log, one row per change (the view's columns, "
        "__weight, __step); table: the view's current contents, merged on `key` each step",
    )
    key: KeyColumns = Field(default_factory=list, description=_KEY_DOC)

    @model_validator(mode="after")
    def _key_for_table_mode(self) -> DeltaSink:
        _check_key(self.mode == "table", self.key)
        return self

    def key_columns(self) -> list[str]:
        return self.key

    def file_path(self) -> str:
        return self.path


class ViewSink(SinkModel):
    # Its rows are a spine of the pipeline's state (`view.<name>`), which the API reads.
    readable: ClassVar[bool] = True

    name: str = Field(pattern=NAME_RE)
    kind: Literal["view"]
    from_: str = Field(alias="from")


class DiscardSink(SinkModel):
    """Flink's `blackhole`, Spark's `noop`: the view is computed and its changes counted
    (the sink's rows and last step), then dropped. For benchmarks and for trying a query."""

    name: str = Field(pattern=NAME_RE)
    kind: Literal["discard"]
    from_: str = Field(alias="from")


Sink = Annotated[
    FilesSink | PostgresSink | DeltaSink | KafkaSink | ViewSink | DiscardSink,
    Field(discriminator="kind"),
]
