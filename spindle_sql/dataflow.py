"""A pipeline's planned views as an incremental dataflow: each step takes the input tables'
deltas (Z-sets: rows with a `__weight`) and returns every view's delta.

Linear operators run on the delta alone: `Filter` and `Project` evaluate their expressions
on Arrow (`evaluate.py`), `UnionAll` concatenates. Stateful ones are the engine's circuit
operators, keeping their state in the storage location: `Aggregate` a `GroupAggregate`,
`WindowAggregate` a `WindowAggregate`,
`Join` a `Join` (ΔA⋈B + A⋈ΔB + ΔA⋈ΔB), `Distinct` a `Distinct`, `TopN` a `TopN`,
`RowsOver` a `RowsOver`, `Sessions` a `SessionWindows`. A node read by several views (a
view read by others) is computed once per step.

Operator ids and column names come from the `Layout` (`layout.py`): SQL views' or operator
specs'. SQL's ids are `<view>.<kind><n>`, numbered in the order the view's plan is walked
(inputs first, left before right): the same SQL gives the same ids, so a restored checkpoint
finds its state. Each SQL operator's fingerprint covers its layout and its plan down to the
input tables (an operator below it by that operator's fingerprint): a change to the query
changes the fingerprints of the operators it reaches, and only theirs. Engine operators
name their columns by position, and descriptions name internal columns by order of first
use, so an edit that renumbers the planner's internal names changes neither. An operator
spec's operator (`operators.py`) has the spec's name and user's column names, and its
fingerprint covers its layout alone.

`step` evaluates every node in order. The partitioned path (`shard_level.py`) evaluates a
level's nodes on one shard from the rows the shard received, through the same pieces:
`admit`, `scan_value`, `node_value`, `forget`, `hold_final` and `release_final`, with
`view_delta` finishing each view's rows on the driver.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Container, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from storage_engine.circuit import (
    Circuit,
    EmitFinal,
    GroupAggregate,
    Join,
    OperatorMetrics,
    Upsert,
)
from storage_engine.circuit.operator import consolidate, empty_delta, fingerprint, weighted
from storage_engine.schema import WEIGHT

from . import plan as P
from .engine_columns import from_engine, to_engine
from .errors import Problem, SqlError
from .evaluate import evaluate, evaluate_predicate
from .expr import Literal
from .layout import Layout, Stateful, positional
from .planner import PlannedView
from .watermarks import Bound, EventTime, Watermarks, column_bounds
from .windows import assign

METADATA_KEY = "sql"
# Per view, a fingerprint of its query down to the input tables (`changed_views`).
VIEWS_KEY = "view_fingerprints"
_TS = pa.timestamp("us", tz="UTC")  # every bounded column's type (watermarks.py)


@dataclass
class _Final:
    """A view's `emit_final` stage: its rows held until the bound of `column` passes them."""

    op: EmitFinal
    columns: list[str]  # the view root's columns as the operator names them
    bound: Bound


class Dataflow:
    """The views' plans, runnable step by step once the runtime has opened `circuit` (the
    stateful operators) on a storage location and called `resume`."""

    def __init__(
        self,
        views: Mapping[str, PlannedView],
        inputs: Mapping[str, str] | None = None,
        event_time: Mapping[str, EventTime] | None = None,
        layout: Layout | None = None,
    ) -> None:
        """`inputs`: names `step` takes deltas by, for tables named otherwise (input name
        -> table); `event_time`: per table, its event-time column and lateness; `layout`:
        the operators' ids and column names (default: SQL views')."""
        self.views = dict(views)
        self.layout = layout or Layout()
        self.watermarks = Watermarks(event_time or {})
        # The current step's processing time (`step`; a shard's level step sets it too).
        self.proctime_us: int | None = None
        self._bounds: dict[int, dict[str, Bound]] = {}
        self._aliases = {table: name for name, table in (inputs or {}).items()}
        self._tables = dict(inputs or {})  # input name -> table
        self._stateful: dict[int, Stateful] = {}
        self._order: list[P.Node] = []  # every node once, inputs before their readers
        self._owner: dict[int, str] = {}  # node -> the view whose plan reached it first
        self._seen: set[int] = set()
        self._roots = {name: v.root for name, v in self.views.items()}
        for name, view in self.views.items():
            counter = itertools.count()
            self._walk(view.root, name, counter)
        tables = {f.name for n in self._order if isinstance(n, P.Scan) for f in n.schema}
        used = {f.name for n in self._order if not isinstance(n, P.Scan) for f in n.schema}
        self._internal = frozenset(used - tables)
        self._final = self._finals()
        self._view_fps: dict[str, str] = {}  # set by `_upstream` (SQL pipelines)
        ops = [*(s.op for s in self._stateful.values()), *(f.op for f in self._final.values())]
        # An operator spec's fingerprints cover each operator's layout only, as they did
        # before these pipelines were planned as views (their checkpoints restore).
        self.circuit = Circuit(ops, self._upstream() if self.layout.sql else None)
        self.operators = self.circuit.operators
        self._first = True

    @property
    def fingerprint(self) -> str:
        return self.circuit.fingerprint

    @property
    def tables(self) -> dict[str, pa.Schema]:
        """The input tables the views read, with the schemas their deltas must have."""
        return {n.table: n.schema for n in self._order if isinstance(n, P.Scan)}

    def nodes(self) -> list[tuple[P.Node, str | None, str | None]]:
        """Every plan node once, inputs before their readers, with the view whose plan
        reached it first (None for a reference to a view) and its operator's id (None for
        a linear node)."""
        return [
            (
                n,
                self._owner.get(id(n)),
                s.op.id if (s := self._stateful.get(id(n))) is not None else None,
            )
            for n in self._order
        ]

    def _walk(self, node: P.Node, view: str, counter: Iterator[int]) -> None:
        if id(node) in self._seen:
            return
        if isinstance(node, P.ViewRef):
            self._seen.add(id(node))
            self._order.append(node)
            et = self.watermarks.event_time
            self._bounds[id(node)] = column_bounds(node, [], et, self._roots, self._bounds)
            return
        for child in P.children(node):
            self._walk(child, view, counter)
        self._seen.add(id(node))
        self._order.append(node)
        self._owner[id(node)] = view
        below = [self._bounds[id(c)] for c in P.children(node)]
        et = self.watermarks.event_time
        self._bounds[id(node)] = column_bounds(node, below, et, self._roots, self._bounds)
        op = self.layout.operator(node, view, counter, self._bounds)
        if op is not None:
            self._stateful[id(node)] = op

    def operator_columns(self, op_id: str) -> list[list[str]]:
        """Per input of operator `op_id`, its columns as the operator names them, in the
        order of the input's plan columns."""
        for st in self._stateful.values():
            if st.op.id == op_id:
                return [list(c) for c in st.columns]
        for final in self._final.values():
            if final.op.id == op_id:
                return [list(final.columns)]
        raise KeyError(f"no operator {op_id!r} in this dataflow")

    def final_operator(self, view: str) -> str | None:
        """The id of the view's `emit_final` operator (None: the view has none)."""
        final = self._final.get(view)
        return None if final is None else final.op.id

    def _finals(self) -> dict[str, _Final]:
        """The `emit_final` stage of each view that has one; SqlError if its column has no
        bound (nothing would ever be final)."""
        out: dict[str, _Final] = {}
        problems = []
        for name, view in self.views.items():
            if view.emit_final is None:
                continue
            col = view.root.schema.names[view.names.index(view.emit_final)]
            bound = self._bounds[id(view.root)].get(col)
            if bound is None:
                problems.append(
                    Problem(
                        f"view {name!r}: emit_final column {view.emit_final!r} is not bounded "
                        "by a watermark, so no row of it would ever be final: it must come "
                        "from a table's event time (a window's bounds, a GROUP BY or join "
                        "key on it; docs/sql.md, Event time and watermarks)",
                        *view.at,
                    )
                )
                continue
            schema, c = positional(view.root.schema, "c")
            op = EmitFinal(f"{name}.final", schema, c[col])
            out[name] = _Final(op, schema.names, bound)
        if problems:
            raise SqlError(problems)
        return out

    def _upstream(self) -> dict[str, str]:
        """Per operator id, what its fingerprint covers (`Circuit(upstream=...)`): its layout
        and its plan node down to the input tables."""
        out: dict[str, str] = {}
        fps: dict[int, str] = {}
        for node in self._order:  # inputs before their readers
            st = self._stateful.get(id(node))
            if st is None:
                continue
            text = json.dumps(st.op.describe(), sort_keys=True, default=str)
            out[st.op.id] = f"{text}|{self._describe(node, fps, _Canon(self._internal), top=True)}"
            fps[id(node)] = fingerprint([{"operator": out[st.op.id]}])
        for name, final in self._final.items():
            text = json.dumps(final.op.describe(), sort_keys=True, default=str)
            root = self.views[name].root
            out[final.op.id] = f"{text}|{self._describe(root, fps, _Canon(self._internal))}"
        for name, view in self.views.items():
            text = self._describe(view.root, fps, _Canon(self._internal))
            ending = self._final.get(name)
            text += f"|final={out[ending.op.id]}" if ending is not None else ""
            self._view_fps[name] = fingerprint([{"view": text}])
        return out

    def _describe(
        self, node: P.Node, fps: Mapping[int, str], canon: _Canon, top: bool = False
    ) -> str:
        if not top and id(node) in fps:
            return f"<{fps[id(node)]}>"  # a stateful node below: its fingerprint
        if isinstance(node, P.ViewRef):
            return self._describe(self._roots[node.view], fps, canon)
        parts = []
        for f in dataclasses.fields(node):
            v = getattr(node, f.name)
            if f.metadata == P.NEWER and v == f.default:
                continue  # a field added later, at its default: described as before it came
            if isinstance(v, tuple) and v and all(_is_node(x) for x in v):
                inputs = ",".join(self._describe(x, fps, canon) for x in v)
                parts.append(f"{f.name}=[{inputs}]")
            elif _is_node(v):
                parts.append(f"{f.name}={self._describe(v, fps, canon)}")
            else:
                parts.append(f"{f.name}={canon(v)!r}")
        return f"{type(node).__name__}({', '.join(parts)})"

    def changed_operators(self, fingerprint: str, metadata: Mapping[str, Any]) -> list[str]:
        return self.circuit.changed_operators(fingerprint, metadata)

    def changed_views(self, metadata: Mapping[str, Any]) -> list[str]:
        """The views whose query changed since the checkpoint with this `metadata` (a view
        sink's rows integrated from the old query no longer fit); none for a checkpoint
        that records no view fingerprints."""
        saved = metadata.get(VIEWS_KEY)
        if not isinstance(saved, dict):
            return []
        return [v for v, fp in self._view_fps.items() if saved.get(v) != fp]

    def resume(self, metadata: Mapping[str, Any] | None) -> None:
        """Continue from a checkpoint with this metadata, or (None) start a new pipeline.
        The runtime calls it once it has opened `circuit` on its storage location."""
        # A new pipeline's first step brings the rows of aggregates without GROUP BY.
        self._first = metadata is None
        if metadata is not None:
            self.watermarks.restore(metadata.get(METADATA_KEY, {}))

    @property
    def first(self) -> bool:
        """Whether the next step is the pipeline's first: aggregates without GROUP BY then
        bring their row over no input (`resume` sets it; a partitioned step sets it on
        the one shard that owns those aggregates)."""
        return self._first

    @first.setter
    def first(self, value: bool) -> None:
        self._first = value

    def bounded_operators(self) -> set[str]:
        """The ids of the operators whose state a watermark's advance changes: those that
        forget below a bound, and the `emit_final` stages."""
        return {s.op.id for s in self._stateful.values() if s.leads} | {
            f.op.id for f in self._final.values()
        }

    def _global(self, node: P.Aggregate, out: pa.Table) -> pa.Table:
        """An aggregate without GROUP BY has one row even over no input (count 0, other
        aggregates NULL), where the engine's has none: that row comes in when the group
        goes (and at the first step), and goes when the group comes."""
        w = out.column(WEIGHT).to_numpy()
        came, went = bool((w > 0).any()), bool((w < 0).any())
        change = int(self._first) - int(came and not went) + int(went and not came)
        if change == 0:
            return out
        empty = [pa.array([0 if a.func == "count" else None], a.type) for a in node.aggs]
        row = pa.table([*empty, pa.array([change], pa.int64())], names=out.column_names)
        return pa.concat_tables([out, row.cast(out.schema)])

    @property
    def output_schemas(self) -> dict[str, pa.Schema]:
        """Each view's columns (its user's names), by view name."""
        return {
            name: pa.schema([f.with_name(n) for f, n in zip(v.root.schema, v.names, strict=True)])
            for name, v in self.views.items()
        }

    def step(
        self, deltas: Mapping[str, pa.Table | pa.RecordBatch], proctime_us: int | None = None
    ) -> dict[str, pa.Table]:
        """Every view's delta for these input deltas (tables absent: no change), with the
        view's column names and `__weight`; rows that cancel out are left out (a delta
        holding only insertions is given as it is: equal rows may come one by one).
        `proctime_us`: the step's processing time (UTC microseconds), what PROCTIME(),
        NOW() and CURRENT_TIMESTAMP give; a run gives the time its offset log recorded for
        the step, so a step redone gives the same rows."""
        self.proctime_us = proctime_us
        tables = self.admit(deltas)
        values: dict[int, pa.Table] = {}
        for node in self._order:
            values[id(node)] = self._value(node, tables, values)
        self._first = False
        self.watermarks.advance()
        self.forget()
        out = {}
        for name, view in self.views.items():
            t = values[id(view.root)]
            if name in self._final:
                self.hold_final(name, t)
                t = self.release_final(name)
            out[name] = self.view_delta(name, t)
        return out

    def view_delta(self, name: str, t: pa.Table) -> pa.Table:
        """View `name`'s delta as `step` gives it, from its root's rows in this step (the
        rows `release_final` gave, for a view with `emit_final`)."""
        view = self.views[name]
        names = view.root.schema.names
        if name in self._final:
            return t.rename_columns([*view.names, WEIGHT])  # final rows: each once, as is
        if not self.layout.sql:
            # An operator spec's output as its operator gives it, as its sinks have
            # always had it (one schema every step: no consolidation's to vary with).
            t = t.select([*names, WEIGHT])
        elif t.num_rows == 0 or pc.min(t.column(WEIGHT)).as_py() <= 0:
            t = consolidate(t, view.root.schema)
        else:
            t = t.select([*names, WEIGHT])
        return t.rename_columns([*view.names, WEIGHT])

    def hold_final(self, name: str, delta: pa.Table) -> None:
        """Give view `name`'s `emit_final` stage its root's rows of this step."""
        final = self._final[name]
        if delta.num_rows:
            final.op.apply({"in": to_engine(delta.rename_columns([*final.columns, WEIGHT]))})

    def release_final(self, name: str) -> pa.Table:
        """View `name`'s rows that the (advanced) watermark made final, under its root's
        column names."""
        final, schema = self._final[name], self.views[name].root.schema
        at = self._bound_value(final.bound)
        if at is None:
            return empty_delta(schema)
        return from_engine(final.op.release(at).rename_columns([*schema.names, WEIGHT]), schema)

    def _bound_value(self, bound: Bound) -> Any:
        """The bound's value now, as a value of the bounded (timestamp) column; None before
        the watermark has one."""
        at = self.watermarks.value(bound)
        return None if at is None else pa.scalar(at, pa.int64()).cast(_TS).as_py()

    def admit(self, deltas: Mapping[str, pa.Table | pa.RecordBatch]) -> dict[str, pa.Table]:
        """The input deltas less their late rows (`Watermarks.admit`: noted for `advance`),
        by input name."""
        return {
            name: self.watermarks.admit(self._tables.get(name, name), weighted(t))
            for name, t in deltas.items()
        }

    def forget(self, only: Container[str] | None = None) -> None:
        """Let each operator whose leading key is bounded drop the state below the bound
        (`only`: those of these ids)."""
        for st in self._stateful.values():
            if only is not None and st.op.id not in only:
                continue
            for name, bound in st.leads.items():
                at = self._bound_value(bound)
                if at is not None:
                    st.op.forget_below(name, at)

    def _value(
        self,
        node: P.Node,
        deltas: Mapping[str, pa.Table | pa.RecordBatch],
        values: dict[int, pa.Table],
    ) -> pa.Table:
        if isinstance(node, P.Scan):
            return self.scan_value(node, deltas)
        if isinstance(node, P.ViewRef):
            return values[id(self._roots[node.view])]
        return self.node_value(node, [values[id(c)] for c in P.children(node)])

    def scan_value(self, node: P.Scan, deltas: Mapping[str, pa.Table | pa.RecordBatch]) -> pa.Table:
        """A scan's rows: its table's (admitted) delta in `deltas`, in the scan's columns."""
        given = deltas.get(self._aliases.get(node.table, node.table))
        if given is None:
            return empty_delta(node.schema)
        t = weighted(given)
        want = node.schema.append(pa.field(WEIGHT, pa.int64()))
        return t.select(want.names).cast(want)

    def node_value(self, node: P.Node, inputs: list[pa.Table]) -> pa.Table:
        """The rows of a node other than a scan or a view reference, from its inputs' rows
        (in `plan.children` order): a stateful node's operator steps on them."""
        stateful = self._stateful.get(id(node))
        if stateful is not None:
            if all(t.num_rows == 0 for t in inputs):
                out = empty_delta(stateful.op.output_schema)
            else:
                named = [
                    to_engine(t.rename_columns([*cols, WEIGHT]))
                    for t, cols in zip(inputs, stateful.columns, strict=True)
                ]
                out = stateful.op.apply(dict(zip(stateful.inputs, named, strict=True)))
            return self._stateful_value(node, stateful, out)
        (first, *_) = inputs
        if isinstance(node, P.Filter):
            if first.num_rows == 0:
                return first
            return first.filter(evaluate_predicate(node.predicate, first, self.proctime_us))
        if isinstance(node, P.Project):
            cols = [evaluate(e, first, self.proctime_us) for _, e in node.outputs]
            names = [n for n, _ in node.outputs]
            return pa.table([*cols, first.column(WEIGHT)], names=[*names, WEIGHT])
        if isinstance(node, P.Windows):
            rows, starts = assign(first, node.time, node.size_us, node.slide_us)
            ts = pa.timestamp("us", tz="UTC")
            ends = pc.add(starts, node.size_us)
            cols = [*rows.columns[:-1], starts.cast(ts), ends.cast(ts), rows.column(WEIGHT)]
            return pa.table(cols, names=[*node.schema.names, WEIGHT])
        if isinstance(node, P.Negate):
            return first.set_column(first.num_columns - 1, WEIGHT, pc.negate(first.column(WEIGHT)))
        if isinstance(node, P.UnionAll):
            want = node.schema.append(pa.field(WEIGHT, pa.int64()))
            return pa.concat_tables([t.rename_columns(want.names).cast(want) for t in inputs])
        raise TypeError(f"no evaluation for {type(node).__name__}")

    def _stateful_value(self, node: P.Node, stateful: Stateful, out: pa.Table) -> pa.Table:
        """A stateful node's rows from its operator's output."""
        if isinstance(node, P.Join):
            assert isinstance(stateful.op, Join)
            return self.layout.join_value(node, stateful.op, out)
        if stateful.output is not None:
            out = out.select([*stateful.output, WEIGHT])
        out = from_engine(out.rename_columns([*node.schema.names, WEIGHT]), node.schema)
        if isinstance(node, P.Aggregate) and not node.keys and self.layout.sql:
            return self._global(node, out)
        return out

    def _aggregate(self, node: P.Aggregate) -> tuple[Stateful, GroupAggregate]:
        stateful = self._stateful[id(node)]
        assert isinstance(stateful.op, GroupAggregate)
        return stateful, stateful.op

    def partial_value(self, node: P.Aggregate, rows: pa.Table) -> dict[str, pa.Table]:
        """An aggregate's input rows reduced where they are (`GroupAggregate.partial`): the
        partitioned path sends these, not the rows, to the shards owning the groups."""
        stateful, op = self._aggregate(node)
        return op.partial(to_engine(rows.rename_columns([*stateful.columns[0], WEIGHT])))

    def partials_value(self, node: P.Aggregate, parts: Mapping[str, pa.Table]) -> pa.Table:
        """An aggregate's rows from the partials of its input (`partial_value`), the
        shards' concatenated by part."""
        stateful, op = self._aggregate(node)
        return self._stateful_value(node, stateful, op.apply_partials(parts))

    def checkpoint_metadata(self) -> dict[str, Any]:
        """What a checkpoint keeps beside the operators' state (the watermarks), for
        `resume`."""
        views = {VIEWS_KEY: self._view_fps} if self._view_fps else {}
        return {METADATA_KEY: self.watermarks.state(), **views}

    def metrics(self) -> dict[str, dict[str, Any]]:
        return self.circuit.metrics()

    def late_rows(self) -> int:
        """Rows the tables' watermarks and the operators (an operator spec's window
        aggregate) dropped as late since the state began (restored with it)."""
        return sum(self.watermarks.late_rows.values()) + self.circuit.late_rows()

    def operator_metrics(self) -> dict[str, OperatorMetrics]:
        return self.circuit.operator_metrics()

    def take_unmatched(self) -> dict[str, pa.Table]:
        """Per upserted table, the last step's deletes of keys without a row (the table's
        key and value columns, under its names)."""
        out = {}
        for node in self._order:
            st = self._stateful.get(id(node))
            if isinstance(node, P.Upsert) and st is not None and isinstance(st.op, Upsert):
                names = dict(zip(st.columns[0], node.input.schema.names, strict=True))
                rows = st.op.take_unmatched()
                out[node.table] = rows.rename_columns([names[n] for n in rows.column_names])
        return out


__all__ = ["Dataflow"]


class _Canon:
    """Internal column names as `$0`, `$1`, ... in the order a description first uses them:
    plans that differ only in the planner's numbering of internal names (shifted by an edit
    earlier in the view) are described alike. Literals are kept as they are."""

    def __init__(self, internal: frozenset[str]) -> None:
        self.internal = internal
        self.names: dict[str, str] = {}

    def __call__(self, v: Any) -> Any:
        if isinstance(v, str):
            if v not in self.internal:
                return v
            if v not in self.names:
                self.names[v] = f"${len(self.names)}"
            return self.names[v]
        if isinstance(v, Literal):
            return v
        if isinstance(v, tuple | list):
            return type(v)(self(x) for x in v)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            fields = [
                f
                for f in dataclasses.fields(v)
                if not (f.metadata == P.NEWER and getattr(v, f.name) == f.default)
            ]
            return (type(v).__name__, *(self(getattr(v, f.name)) for f in fields))
        return v


def _is_node(v: object) -> bool:
    return dataclasses.is_dataclass(v) and hasattr(v, "schema") and not isinstance(v, type)
