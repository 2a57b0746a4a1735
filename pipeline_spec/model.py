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
first as `source`, and still loads). Every error names its field path (`state.0.group_by`)
and reason; `load_spec` raises
`SpecError` with all of them. Column references are checked against the source's schema
when the runner plans the query, before anything starts. The JSON Schema published in
`docs/pipeline-spec.schema.json` is `PipelineSpec.model_json_schema()`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import pyarrow as pa
import yaml
from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from . import expressions, inputs
from .exits import SPEC_ERROR_HEADING
from .fields import (
    DROP_STATE_RE,
    EVENT_TIME_DOC,
    MAX_COUNT,
    MAX_ROWS,
    NAME_RE,
    OP_RE,
    TABLE_DOC,
    TABLE_RE,
    EventTime,
    FilePath,
    PositiveSeconds,
    Seconds,
)
from .fields import SpecModel as _Model
from .kafka import KafkaSink, KafkaSource
from .offsets import Offset, checkpoint_offsets
from .sinks import DeltaSink, DiscardSink, FilesSink, PostgresSink, Sink, ViewSink
from .types import TYPE_NAMES_DOC, arrow_schema, check_types

# -- sources -----------------------------------------------------------------------------


class DatagenSource(_Model):
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


class FilesSource(_Model):
    """A directory (or object-store prefix) of immutable files, read in name order; offset =
    files consumed."""

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


class LogSource(_Model):
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

    @field_validator("schema_")
    @classmethod
    def _types(cls, v: dict[str, str]) -> dict[str, str]:
        return check_types(v)

    def arrow_schema(self) -> pa.Schema:
        return arrow_schema(self.schema_)

    def log_dir(self, storage: str | os.PathLike[str]) -> str:
        """Where the stream's input log lives: in the pipeline's storage location (the
        layout `storage_engine.input_log.LOG_DIR` names, which the object store mirrors)."""
        return os.path.join(storage, "input-log", self.stream)


InputSource = DatagenSource | FilesSource | LogSource | KafkaSource
Source = Annotated[InputSource, Field(discriminator="kind")]


def _expression(text: str) -> str:
    expressions.check(text)  # an ExpressionError is a ValueError: pydantic names the field
    return text


Expression = Annotated[
    str,
    AfterValidator(_expression),
    Field(
        min_length=1,
        max_length=10_000,
        description="a Spark SQL expression; it may call Spark's built-in functions except "
        "those that reach the JVM, the host or files (docs/pipelines.md, Expressions), and "
        "hold no subquery",
    ),
]


class Transform(_Model):
    """Stateless, done by Spark: a filter, then a projection (Spark SQL expressions)."""

    where: Expression | None = None
    select: list[Expression] = Field(default_factory=lambda: ["*"], min_length=1)
    event_time: str | None = Field(
        None,
        min_length=1,
        description="a timestamp column of the transformed stream holding each row's event "
        "time (wall clock, UTC), for the end-to-end latency metric (latency_ms: the step's "
        "sink writes done minus the oldest event time among its rows that passed the "
        "filter); default: the first window_aggregate's time_column, except for datagen "
        "sources, whose timestamps are synthetic (none)",
    )


# -- stateful operators --------------------------------------------------------------------


class AggregateSpec(_Model):
    name: str
    func: Literal["count", "sum", "avg", "min", "max"]
    column: str | None = None

    @model_validator(mode="after")
    def _column_needed(self) -> AggregateSpec:
        if self.column is None and self.func != "count":
            raise ValueError(f"{self.func} needs a column")
        return self


class StreamSpec(_Model):
    """One input of a join: rows of the transformed stream, filtered and projected."""

    where: Expression | None = None
    select: list[Expression] = Field(default_factory=lambda: ["*"], min_length=1)


class GroupAggregateOp(_Model):
    name: str = Field(pattern=OP_RE)
    kind: Literal["aggregate"]
    group_by: list[str] = Field(default_factory=list)
    aggregates: list[AggregateSpec] = Field(min_length=1)


class WindowAggregateOp(_Model):
    name: str = Field(pattern=OP_RE)
    kind: Literal["window_aggregate"]
    time_column: str
    size: PositiveSeconds
    slide: PositiveSeconds | None = Field(None, description="hopping windows; default: tumbling")
    lateness: Seconds = 0.0
    group_by: list[str] = Field(default_factory=list)
    aggregates: list[AggregateSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _slide_divides_size(self) -> WindowAggregateOp:
        if self.slide is not None:
            ratio = self.size / self.slide
            if abs(ratio - round(ratio)) > 1e-9:
                raise ValueError("size must be a whole multiple of slide")
        return self


class DistinctOp(_Model):
    name: str = Field(pattern=OP_RE)
    kind: Literal["distinct"]
    columns: list[str] | None = None


class JoinOp(_Model):
    name: str = Field(pattern=OP_RE)
    kind: Literal["join"]
    left: StreamSpec
    right: StreamSpec
    left_on: list[str] = Field(min_length=1)
    right_on: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _pairs(self) -> JoinOp:
        if len(self.left_on) != len(self.right_on):
            raise ValueError("left_on and right_on must have the same length")
        return self


StateOp = Annotated[
    GroupAggregateOp | WindowAggregateOp | DistinctOp | JoinOp, Field(discriminator="kind")
]


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
        if self.parallelism != 1:
            raise ValueError("parallelism: partitioned state needs sql (views)")
        if len(self.tables) > 1:
            raise ValueError("tables: several input tables need sql (views over them)")
        if isinstance(self.source, KafkaSource):
            raise ValueError("source: a kafka source needs sql (views over its table)")
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
        return [
            (".".join(map(str, inputs.written_path(("tables", i), self._gave_source))), t)
            for i, t in enumerate(self.tables)
        ]

    def table_spec(self, table: str) -> PipelineSpec:
        """The spec as one input table's reader sees it: that table alone (the runtime
        reads each table as it reads a one-table pipeline's)."""
        src = next(s for s in self.input_sources() if s.table == table)
        return self.model_copy(update={"tables": [src]})

    def offsets(self, metadata: dict[str, Any]) -> dict[str, Offset]:
        """Each input table's offset in a checkpoint's metadata (`source_offsets`; a
        checkpoint of a one-source release has only `source_offset`, the source's)."""
        tables = [(s.table, isinstance(s, KafkaSource)) for s in self.tables]
        return checkpoint_offsets(metadata, tables)


class SpecError(ValueError):
    """An invalid spec; `errors` lists (field path, reason), every one of them."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        super().__init__(f"{SPEC_ERROR_HEADING}\n" + "\n".join(f"  {p}: {m}" for p, m in errors))


def _path(loc: tuple[Any, ...]) -> str:
    # Drop pydantic's union tags ("datagen", "aggregate"...) that are not field names.
    parts = [str(x) for x in loc if not (isinstance(x, str) and x in _TAGS)]
    return ".".join(parts) or "(spec)"


_TAGS = {
    "datagen",
    "files",
    "log",
    "kafka",
    "aggregate",
    "window_aggregate",
    "distinct",
    "join",
    "postgres",
    "view",
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


def resolve_path(path: str, roots: Sequence[Path]) -> Path | None:
    """`path` (relative ones against the first root) with symlinks resolved, if it lies
    inside one of `roots`; else None."""
    full = Path(os.path.realpath(Path(roots[0]) / path))
    for root in roots:
        r = Path(os.path.realpath(root))
        if full == r or r in full.parents:
            return full
    return None


OBJECT_SCHEME = "s3://"


def is_object_path(path: str) -> bool:
    """Whether a spec's path names an object-store location (`s3://bucket/prefix`)."""
    return path.startswith(OBJECT_SCHEME)


def inside_object_roots(path: str, object_roots: Sequence[str]) -> bool:
    """Whether object-store path `path` lies under one of `object_roots` (`s3://bucket/p`),
    compared segment by segment; a `.` or `..` segment, an empty one or a backslash never
    does."""
    segments = path[len(OBJECT_SCHEME) :].split("/")
    if any(s in ("", ".", "..") or "\\" in s for s in segments):
        return False
    for root in object_roots:
        want = root[len(OBJECT_SCHEME) :].strip("/").split("/")
        if is_object_path(root) and segments[: len(want)] == want:
            return True
    return False


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
    paths: list[tuple[str, FilesSource | FilesSink | DeltaSink]] = [
        (f"{f}.path", s) for f, s in spec.input_fields() if isinstance(s, FilesSource)
    ]
    for i, sink in enumerate(spec.sinks):
        if isinstance(sink, FilesSink | DeltaSink):
            paths.append((f"sinks.{i}.path", sink))
    for field, part in paths:
        path = part.path
        if is_object_path(path) and isinstance(part, FilesSink):
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
    "DeltaSink",
    "DiscardSink",
    "EventTime",
    "FilesSink",
    "InputSource",
    "KafkaSink",
    "KafkaSource",
    "Offset",
    "PipelineSpec",
    "PostgresSink",
    "Sink",
    "SpecError",
    "ViewSink",
    "inside_object_roots",
    "is_object_path",
    "json_schema",
    "load_spec",
    "outside_roots",
    "parse_spec",
    "resolve_path",
]
