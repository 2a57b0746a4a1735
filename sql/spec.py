"""A pipeline spec's SQL planned, without Spark: the source's rows as the table
`source.table` (schema from the spec: a datagen generator's columns, or the `schema` the
spec gives), the views over it, and the sinks' `from` checked against the views. Errors are
the spec's (`SpecError`), at field `sql` with the line and column in the message."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from pipeline_spec import model as S
from pipeline_spec.datagen import DATAGEN_SCHEMAS

from .errors import SqlError
from .parse import parse
from .planner import PlannedView, plan
from .types import TYPE_NAMES
from .watermarks import EventTime


@dataclass(frozen=True)
class SqlPlan:
    table: str
    schema: pa.Schema
    views: dict[str, PlannedView]
    event_time: dict[str, EventTime]  # per table that declares one


def table_schema(source: S.DatagenSource | S.FilesSource | S.LogSource) -> pa.Schema:
    """The Arrow schema of the source's rows; SpecError at `source.schema` for a type SQL
    tables do not take."""
    if isinstance(source, S.DatagenSource):
        columns = [c.strip().split(" ", 1) for c in DATAGEN_SCHEMAS[source.generator].split(",")]
        pairs = [(name, kind) for name, kind in columns]
    elif source.schema_:
        pairs = list(source.schema_.items())
    else:
        raise S.SpecError([("source.schema", "give the columns and types of the input")])
    fields = []
    for name, kind in pairs:
        t = TYPE_NAMES.get(kind.strip().lower())
        if t is None:
            raise S.SpecError(
                [
                    (
                        f"source.schema.{name}",
                        f"type {kind!r}: SQL tables take {', '.join(sorted(TYPE_NAMES))}",
                    )
                ]
            )
        fields.append(pa.field(name, t))
    return pa.schema(fields)


def plan_spec(spec: S.PipelineSpec) -> SqlPlan:
    """The spec's views planned over its source; SpecError naming every problem."""
    assert spec.sql is not None
    schema = table_schema(spec.source)
    table = spec.source.table
    try:
        views = plan(parse(spec.sql), {table: schema})
    except SqlError as e:
        raise S.SpecError([("sql", str(p)) for p in e.problems]) from None
    errors = [
        (f"sinks.{i}.from", f"{s.from_!r} is not a view of sql ({', '.join(views)})")
        for i, s in enumerate(spec.sinks)
        if s.from_ not in views
    ]
    if errors:
        raise S.SpecError(errors)
    return SqlPlan(table, schema, views, _event_time(spec.source, schema))


def _event_time(
    source: S.DatagenSource | S.FilesSource | S.LogSource, schema: pa.Schema
) -> dict[str, EventTime]:
    et = source.event_time
    if et is None:
        return {}
    if et.column not in schema.names:
        where = "source.event_time.column"
        raise S.SpecError([(where, f"{et.column!r} is not a column of {schema.names}")])
    if not pa.types.is_timestamp(schema.field(et.column).type):
        kind = schema.field(et.column).type
        where = "source.event_time.column"
        raise S.SpecError([(where, f"{et.column!r} is {kind}: the event time is a timestamp")])
    return {source.table: EventTime(et.column, round(et.lateness * 1_000_000))}


__all__ = ["SqlPlan", "plan_spec", "table_schema"]
