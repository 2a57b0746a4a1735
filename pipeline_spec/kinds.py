"""What the rest of Spindle asks an input table's source or a sink, whatever its kind.

Each kind's model answers these itself (`SourceModel`, `SinkModel`), so code outside the
spec and the runtime's connectors never tests which kind a part is: adding a kind adds its
model (and its connector), and nothing that asks these changes. The bases hold no fields:
the JSON Schema is the kinds' own."""

from __future__ import annotations

import os
from typing import ClassVar, Protocol

import pyarrow as pa

from .fields import SpecModel


class InputLogged(Protocol):
    """An input table whose records are pushed through the ingest API (to `stream`) into
    the pipeline's own input log, kept in its storage location until checkpoints no longer
    need them."""

    @property
    def table(self) -> str: ...

    @property
    def stream(self) -> str: ...

    def arrow_schema(self) -> pa.Schema:
        """The records' columns, as pushed records are parsed into."""
        ...

    def log_dir(self, storage: str | os.PathLike[str]) -> str:
        """Where the log lives in the pipeline's storage location `storage`."""
        ...

    def upserted(self) -> tuple[tuple[str, ...], str] | None:
        """Its key columns and op column if its records upsert and delete by key."""
        ...


class Part(SpecModel):
    """An input table's source or a sink in the spec."""

    # Whether its `file_path` may name an object-store location (`s3://bucket/prefix`).
    object_paths: ClassVar[bool] = False

    def file_path(self) -> str | None:
        """The path it reads or writes (a directory, or an object-store prefix), which must
        lie inside the configured roots; None if it has none."""
        return None


class SourceModel(Part):
    """An input table's source in the spec."""

    # Whether the table's offset is the next offset per partition (a Kafka table's) rather
    # than a count (`offsets.Offset`): how a checkpoint's offset of it is read back.
    offset_per_partition: ClassVar[bool] = False

    def columns(self) -> dict[str, str] | None:
        """The table's columns and their Spark SQL types, as the spec declares or implies
        them; None if it gives none (a files table whose files carry their own schema)."""
        raise NotImplementedError

    def input_log(self) -> InputLogged | None:
        """The pipeline's own input log this table reads (None: its input is not kept by
        the pipeline, nor pushed to it)."""
        return None

    def upserted(self) -> tuple[tuple[str, ...], str] | None:
        """For a table fed by upserts and deletes by key: its key columns and the column
        saying which a record is (None: every record inserts a row)."""
        return None


class SinkModel(Part):
    """A sink in the spec."""

    # Whether the API serves the view's rows (`GET /pipelines/{name}/views/{view}`): the
    # sink keeps them in the pipeline's state, which the control plane reads.
    readable: ClassVar[bool] = False

    def key_columns(self) -> list[str]:
        """The view's columns that identify one of its rows, for a sink that takes them
        (checked against the view when the SQL is planned); empty otherwise."""
        return []


__all__ = ["InputLogged", "Part", "SinkModel", "SourceModel"]
