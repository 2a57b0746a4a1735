"""A pipeline spec's SQL planned, without Spark: each input table's rows (`source`, then
`tables`; schema from the spec: a datagen generator's columns, or the `schema` the spec
gives), the views over them, and the sinks' `from` (and `key`) checked against the views. Errors are
the spec's (`SpecError`), at field `sql` with the line and column in the message."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import sqlglot
from sqlglot import exp

from pipeline_spec import model as S
from pipeline_spec.types import arrow_type
from pipeline_spec.udfs import digest

from .dataflow import Dataflow
from .errors import SqlError
from .functions import FUNCTIONS
from .parse import parse
from .planner import PlannedView, plan
from .udafs import Udaf
from .udfs import Udf, declared
from .watermarks import EventTime


@dataclass(frozen=True)
class SqlPlan:
    tables: dict[str, pa.Schema]  # every input table, `source`'s first
    views: dict[str, PlannedView]
    event_time: dict[str, EventTime]  # per table that declares one

    @property
    def table(self) -> str:
        """The table `source` is read as."""
        return next(iter(self.tables))

    @property
    def schema(self) -> pa.Schema:
        return self.tables[self.table]


def table_schema(source: S.InputSource, where: str = "source") -> pa.Schema:
    """The Arrow schema of the source's rows; SpecError at `<where>.schema` for a type SQL
    tables do not take."""
    columns = source.columns()
    if not columns:
        raise S.SpecError([(f"{where}.schema", "give the columns and types of the input")])
    fields = []
    for name, kind in columns.items():
        try:
            fields.append(pa.field(name, arrow_type(kind)))
        except ValueError as e:
            raise S.SpecError([(f"{where}.schema.{name}", str(e))]) from None
    return pa.schema(fields)


def plan_spec(
    spec: S.PipelineSpec,
    udf_source: str | None = None,
    udf_impls: Mapping[str, Any] | None = None,
) -> SqlPlan:
    """The spec's views planned over its input tables; SpecError naming every problem.

    With `udfs`, the module's source (`udf_source`; the spec's own `code` if not given)
    goes into the operators' fingerprints, and views call `udf_impls` (the runtime's
    loaded functions; without them, a call fails when evaluated: planning only)."""
    assert spec.sql is not None
    tables = {src.table: table_schema(src, where) for where, src in spec.input_fields()}
    udfs = _udfs(spec, udf_source, udf_impls)
    upserts = {src.table: u for _, src in spec.input_fields() if (u := src.upserted()) is not None}
    try:
        views = plan(dataclasses.replace(parse(spec.sql), udfs=udfs), tables, upserts)
    except SqlError as e:
        raise S.SpecError([("sql", str(p)) for p in e.problems]) from None
    errors = [
        (f"sinks.{i}.from", f"{s.from_!r} is not a view of sql ({', '.join(views)})")
        for i, s in enumerate(spec.sinks)
        if s.from_ not in views
    ]
    errors += [
        (f"sinks.{i}.key", f"{k!r} is not a column of view {s.from_} ({', '.join(names)})")
        for i, s in enumerate(spec.sinks)
        if s.from_ in views
        for names in [views[s.from_].names]
        for k in s.key_columns()
        if k not in names
    ]
    if errors:
        raise S.SpecError(errors)
    event_time: dict[str, EventTime] = {}
    for where, src in spec.input_fields():
        if src.event_time is not None:
            event_time[src.table] = _event_time(src.event_time, tables[src.table], where)
    if any(v.emit_final for v in views.values()):
        try:  # an emit_final column needs a watermark's bound, which the dataflow derives
            Dataflow(views, event_time=event_time)
        except SqlError as e:
            raise S.SpecError([("sql", str(p)) for p in e.problems]) from None
    return SqlPlan(tables, views, event_time)


def _udfs(
    spec: S.PipelineSpec,
    source: str | None,
    impls: Mapping[str, Any] | None,
) -> dict[str, Udf | Udaf]:
    u = spec.udfs
    if u is None:
        return {}
    errors = [
        (f"udfs.functions.{i}.name", f"{f.name!r} is a built-in function of Spark SQL")
        for i, f in enumerate(u.functions)
        if f.name in FUNCTIONS
        or not isinstance(sqlglot.parse_one(f"{f.name}(1)", read="spark"), exp.Anonymous)
    ]
    if errors:
        raise S.SpecError(errors)
    code = source if source is not None else (u.code or "")
    signatures = [
        (f.name, [arrow_type(t) for t in f.args], arrow_type(f.returns))
        for f in u.functions
        if f.kind == "scalar"
    ]
    out: dict[str, Udf | Udaf] = dict(declared(signatures, digest(code), impls))
    for f in u.functions:
        if f.kind == "aggregate":
            args = [arrow_type(t) for t in f.args]
            impl = (impls or {}).get(f.name)
            out[f.name] = Udaf(f.name, args, arrow_type(f.returns), digest(code), impl)
    return out


def _event_time(et: S.EventTime, schema: pa.Schema, where: str) -> EventTime:
    where = f"{where}.event_time.column"
    if et.column not in schema.names:
        raise S.SpecError([(where, f"{et.column!r} is not a column of {schema.names}")])
    if not pa.types.is_timestamp(schema.field(et.column).type):
        kind = schema.field(et.column).type
        raise S.SpecError([(where, f"{et.column!r} is {kind}: the event time is a timestamp")])
    return EventTime(et.column, round(et.lateness * 1_000_000))


__all__ = ["SqlPlan", "plan_spec", "table_schema"]
