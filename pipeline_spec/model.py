"""The pipeline spec: what users register (YAML or JSON), validated by pydantic.

    name: clicks-per-user
    tables: [{kind: datagen, generator: clicks, seed: 7, rows_per_second: 5000}]
    transform: {where: "amount > 0", select: ["user", "amount", "ts"]}
    state:
      - {name: per_user, kind: aggregate, group_by: [user],
         aggregates: [{name: n, func: count}, {name: total, func: sum, column: amount}]}
    sinks:
      - {name: out, kind: files, from: per_user, format: parquet, path: out/}
    checkpoint: {every_steps: 10, every: 30s}

The input tables are one list, `tables` (`inputs`: a spec of earlier releases gives the
first as `source`, and still loads). The parts are defined in their own modules (`sources`,
`kafka`, `operators`, `sinks`) and re-exported here. Every error names its field path
(`state.0.group_by`) and reason; `load_spec` raises `SpecError` with all of them. Column
references are checked against the source's schema when the runner plans the query, before
anything starts. The JSON Schema published in `docs/pipeline-spec.schema.json` is
`PipelineSpec.model_json_schema()`.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    ByteSize,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from . import inputs
from .exits import SPEC_ERROR_HEADING
from .fields import DROP_STATE_RE, MAX_COUNT, NAME_RE, EventTime, MemorySize, Seconds
from .fields import SpecModel as _Model
from .kafka import KafkaSink, KafkaSource
from .kinds import InputLogged, Part
from .offsets import Offset, checkpoint_offsets
from .operators import (
    AggregateSpec,
    DistinctOp,
    Expression,
    GroupAggregateOp,
    JoinOp,
    StateOp,
    StreamSpec,
    Transform,
    WindowAggregateOp,
)
from .paths import OBJECT_SCHEME, inside_object_roots, is_object_path, resolve_path
from .postgres_cdc import PostgresCdcSource
from .sinks import DeltaSink, DiscardSink, FilesSink, PostgresSink, Sink, ViewSink
from .sources import DatagenSource, FilesSource, InputSource, LogSource, Source
from .udfs import UdfDeclaration, Udfs

# Where a part of a spec is, as the spec was written: ("tables", 0), ("source",), ...
Location = tuple[str | int, ...]

# -- policies ------------------------------------------------------------------------------


class CheckpointPolicy(_Model):
    every_steps: int | None = Field(10, gt=0, le=MAX_COUNT)
    every: Seconds | None = Field(None, description="and/or every T seconds")
    asynchronous: bool = Field(True, alias="async")
    on_corruption: Literal["fail", "fallback"] = Field(
        "fail",
        description="when the checkpoint a run restores is corrupt: fail (the run fails at "
        "once, naming the corrupt file and the newest intact checkpoint of its timeline) or "
        "fallback (restore that checkpoint instead, with a warning saying which was skipped "
        "and why)",
    )


class RetentionPolicy(_Model):
    keep_last: int = Field(10, ge=1, le=100_000)
    max_age: Seconds | None = None
    min_keep: int = Field(1, ge=1, le=100_000)


class Trigger(_Model):
    interval: Seconds = 1.0


class EngineOptions(_Model):
    """The storage engine's settings for this pipeline's state."""

    memory_budget: MemorySize = Field(
        ByteSize(256 << 20),
        description="bytes of state batches kept in memory (4 MiB to 1 TiB; '64MiB', '1GB' "
        "or a number): at parallelism 1 the whole pipeline's, above it each shard's (its "
        "operators share it). Beyond it the engine writes batches to files in the "
        "pipeline's storage directory and merges stream through them: state may be far "
        "larger than memory",
    )


class PipelineSpec(_Model):
    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, json_schema_extra=inputs.take_source_too
    )

    name: str = Field(pattern=NAME_RE, description="unique slug")
    tables: list[Source] = Field(
        min_length=1,
        max_length=65,
        description="the input tables, each a source of its own with its `table` name; "
        "operators (`state`) read the first, `sql` views any (docs/sql.md, Input tables)",
    )
    transform: Transform = Field(default_factory=Transform)
    state: list[StateOp] = Field(
        default_factory=list, description="stateful operators (or `sql`, not both)"
    )
    sql: str | None = Field(
        None,
        min_length=1,
        max_length=200_000,
        description="CREATE VIEW name AS SELECT ... statements (Spark SQL) over the input "
        "tables (`tables`, docs/sql.md); sinks write views",
    )
    udfs: Udfs | None = Field(
        None,
        description="Python functions views may call (docs/sql.md, Python UDFs); only "
        "admins register pipelines with them",
    )
    sinks: list[Sink] = Field(default_factory=list)
    checkpoint: CheckpointPolicy = Field(default_factory=CheckpointPolicy)
    retention: RetentionPolicy = Field(default_factory=RetentionPolicy)
    trigger: Trigger = Field(default_factory=Trigger)
    parallelism: int = Field(
        1,
        ge=1,
        le=256,
        description="shards the SQL views' state is partitioned into, each stepped by a "
        "Spark task (docs/architecture.md, The partitioned path); 1: the driver steps "
        "them all, in one process",
    )
    engine: EngineOptions = Field(default_factory=EngineOptions)

    # Whether the spec was written with `source` (earlier releases): its fields' paths.
    _gave_source: bool = PrivateAttr(False)

    @model_validator(mode="wrap")
    @classmethod
    def _one_list(cls, data: Any, handler: ModelWrapValidatorHandler[PipelineSpec]) -> PipelineSpec:
        spec = handler(inputs.as_one_list(data))
        spec._gave_source = inputs.gives_source(data)
        return spec

    @property
    def source(self) -> InputSource:
        """The first input table's source: the stream operators (`state`) read."""
        return self.tables[0]

    @model_validator(mode="after")
    def _references(self) -> PipelineSpec:
        if (self.sql is None) == (not self.state):
            raise ValueError("give either state (operators) or sql (views), not both")
        if self.sql is not None:
            t = self.transform
            if t.where is not None or t.select != ["*"]:
                raise ValueError("transform: with sql, filter and project in the views")
            names = [src.table for src in self.input_sources()]
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ValueError(f"tables: table names must be unique, repeated: {dup}")
            # The views, and the sinks' `from`, are checked by the SQL planner (sql package).
            return self
        if self.udfs is not None:
            raise ValueError("udfs: functions are called by sql views")
        if self.parallelism != 1:
            raise ValueError("parallelism: partitioned state needs sql (views)")
        if len(self.tables) > 1:
            raise ValueError("tables: several input tables need sql (views over them)")
        if isinstance(self.source, KafkaSource):
            raise ValueError("source: a kafka source needs sql (views over its table)")
        if self.source.upserted() is not None:
            raise ValueError("source.upsert: a table fed by upserts needs sql (views over it)")
        if self.source.event_time is not None:
            raise ValueError(
                "source.event_time: tables of sql pipelines have one; operators take "
                "transform.event_time and a window_aggregate's lateness"
            )
        ops = [op.name for op in self.state]
        dup = sorted({n for n in ops if ops.count(n) > 1})
        if dup:
            raise ValueError(f"state: operator names must be unique, repeated: {dup}")
        sinks = [s.name for s in self.sinks]
        dup = sorted({n for n in sinks if sinks.count(n) > 1})
        if dup:
            raise ValueError(f"sinks: names must be unique, repeated: {dup}")
        for i, s in enumerate(self.sinks):
            if s.from_ not in ops:
                raise ValueError(f"sinks.{i}.from: {s.from_!r} is not an operator in state {ops}")
        return self

    def input_sources(self) -> list[InputSource]:
        """Every input table's source, in order."""
        return list(self.tables)

    def input_fields(self) -> list[tuple[str, InputSource]]:
        """Every input table's source with its field path as the spec was written
        (`tables.0`, ...; `source`, `tables.0`, ... in a spec giving `source`)."""
        return [(".".join(map(str, loc)), t) for loc, t in self._input_locations()]

    def _input_locations(self) -> list[tuple[Location, InputSource]]:
        return [
            (inputs.written_path(("tables", i), self._gave_source), t)
            for i, t in enumerate(self.tables)
        ]

    def table_spec(self, table: str) -> PipelineSpec:
        """The spec as one input table's reader sees it: that table alone (the runtime
        reads each table as it reads a one-table pipeline's)."""
        src = next(s for s in self.input_sources() if s.table == table)
        return self.model_copy(update={"tables": [src]})

    def offsets(self, metadata: dict[str, Any]) -> dict[str, Offset]:
        """Each input table's offset in a checkpoint's metadata (`offsets.checkpoint_offsets`:
        a checkpoint of a one-source release has only the first table's)."""
        tables = [(s.table, s.offset_per_partition) for s in self.tables]
        return checkpoint_offsets(metadata, tables)

    def input_logs(self) -> list[InputLogged]:
        """The input tables that read the pipeline's own input log (records pushed through
        the ingest API), in order."""
        return [log for t in self.tables if (log := t.input_log()) is not None]

    def readable_views(self) -> list[str]:
        """The sinks whose rows the API serves (`GET /pipelines/{name}/views/{view}`)."""
        return [s.name for s in self.sinks if s.readable]

    def file_paths(self) -> list[tuple[Location, Part, str]]:
        """Every input table's source and sink that reads or writes a path, where the spec
        was written to give it (`("tables", 0)`, `("sinks", 2)`...), and the path."""
        parts: list[tuple[Location, Part]] = [*self._input_locations()]
        parts += [(("sinks", i), s) for i, s in enumerate(self.sinks)]
        if self.udfs is not None:
            parts.append((("udfs",), self.udfs))
        return [(loc, part, path) for loc, part in parts if (path := part.file_path()) is not None]


class SpecError(ValueError):
    """An invalid spec; `errors` lists (field path, reason), every one of them."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        super().__init__(f"{SPEC_ERROR_HEADING}\n" + "\n".join(f"  {p}: {m}" for p, m in errors))


def _path(loc: tuple[Any, ...]) -> str:
    # Drop pydantic's union tags ("datagen", "aggregate"...) that are not field names.
    parts = [str(x) for x in loc if not (isinstance(x, str) and x in _TAGS)]
    return ".".join(parts) or "(spec)"


def _kinds(union: Any) -> set[str]:
    """The `kind` tags of a discriminated union's members."""
    if typing.get_origin(union) is typing.Annotated:
        union = typing.get_args(union)[0]
    return {
        tag
        for member in typing.get_args(union)
        for tag in typing.get_args(member.model_fields["kind"].annotation)
    }


# What pydantic puts in an error's location besides field names: the union members' tags,
# every kind's (so a new kind needs no entry here), and the spec's own validator.
_TAGS = {
    *_kinds(Source),
    *_kinds(StateOp),
    *_kinds(Sink),
    "function-after[_references(), PipelineSpec]",
}


def parse_spec(doc: Any) -> PipelineSpec:
    """Validate a parsed document (dict); raises SpecError naming every bad field."""
    try:
        return PipelineSpec.model_validate(doc)
    except ValidationError as e:
        errors = []
        gave_source = inputs.gives_source(doc)
        for err in e.errors():
            msg = str(err["msg"]).removeprefix("Value error, ")
            errors.append((_path(inputs.written_path(tuple(err["loc"]), gave_source)), msg))
        raise SpecError(errors) from None


def load_spec(text_or_path: str | Path) -> PipelineSpec:
    """A spec from YAML or JSON text, or from a .yaml/.yml/.json file."""
    text = str(text_or_path)
    p = Path(text)
    if "\n" not in text and p.suffix in (".yaml", ".yml", ".json") and p.exists():
        text = p.read_text()
    try:
        doc = yaml.safe_load(text)  # JSON is YAML
    except yaml.YAMLError as e:
        raise SpecError([("(spec)", f"not valid YAML or JSON: {e}")]) from None
    if not isinstance(doc, dict):
        raise SpecError([("(spec)", "a pipeline spec is a mapping (YAML) or object (JSON)")])
    return parse_spec(doc)


def outside_roots(
    spec: PipelineSpec, roots: Sequence[Path], object_roots: Sequence[str] = ()
) -> list[tuple[str, str]]:
    """Errors (field, message) for every path of `spec` outside where it may go: a local
    path that resolves, symlinks followed, outside `roots`, or an object-store path (a
    `files` source's or a `delta` sink's) outside `object_roots`. Checked when a spec is
    validated and again when a run opens the paths (a path may have become a symlink
    since)."""
    where = ", ".join(str(r) for r in roots)
    objects = ", ".join(object_roots) or "none are configured"
    errors = []
    for loc, part, path in spec.file_paths():
        field = ".".join(map(str, (*loc, "path")))
        if is_object_path(path) and not part.object_paths:
            errors.append((field, "an s3:// path is taken by files sources and delta sinks"))
        elif is_object_path(path) and not inside_object_roots(path, object_roots):
            errors.append((field, f"must lie inside the configured object roots ({objects})"))
        elif not is_object_path(path) and resolve_path(path, roots) is None:
            errors.append((field, f"must lie inside the configured file roots ({where})"))
    return errors


def json_schema() -> str:
    return json.dumps(PipelineSpec.model_json_schema(by_alias=True), indent=2, sort_keys=True)


# The spec's parts defined in the modules it is made of, importable from here as the spec's
# one entry point (`from pipeline_spec import model as S`).
__all__ = [
    "DROP_STATE_RE",
    "OBJECT_SCHEME",
    "AggregateSpec",
    "CheckpointPolicy",
    "DatagenSource",
    "DeltaSink",
    "DiscardSink",
    "DistinctOp",
    "EngineOptions",
    "EventTime",
    "Expression",
    "FilesSink",
    "FilesSource",
    "GroupAggregateOp",
    "InputLogged",
    "InputSource",
    "JoinOp",
    "KafkaSink",
    "KafkaSource",
    "Location",
    "LogSource",
    "Offset",
    "Part",
    "PipelineSpec",
    "PostgresCdcSource",
    "PostgresSink",
    "RetentionPolicy",
    "Sink",
    "Source",
    "SpecError",
    "StateOp",
    "StreamSpec",
    "Transform",
    "Trigger",
    "UdfDeclaration",
    "Udfs",
    "ViewSink",
    "WindowAggregateOp",
    "inside_object_roots",
    "is_object_path",
    "json_schema",
    "load_spec",
    "outside_roots",
    "parse_spec",
    "resolve_path",
]
