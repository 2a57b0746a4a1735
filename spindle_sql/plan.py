"""The logical plan of a view: a tree of relational operators over Z-sets, every column named
by an internal name unique in the whole pipeline's plan (`<view>.c<n>`, numbered per view)
and typed in Arrow.

Linear operators (`Filter`, `Project`, `UnionAll`) apply to a step's delta as they would to a
table; the others keep state in the engine (`dataflow.py` maps each onto a
`storage_engine.circuit` operator).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from .expr import Expr

# A plan node field's metadata: described (in operator fingerprints) only when it is not its
# default, since the field came after plans were checkpointed without it.
NEWER = {"described": "unless default"}

AggFunc = Literal["count", "sum", "avg", "min", "max", "udf"]
# Window functions: in a `RowsOver` only.
WindowFunc = Literal["row_number", "rank", "dense_rank", "lag", "lead"]
JoinKind = Literal["inner", "left", "right", "full"]


@dataclass(frozen=True)
class Scan:
    """The rows of an input table (its columns under their internal names)."""

    table: str
    schema: pa.Schema


@dataclass(frozen=True)
class Upsert:
    """A table fed by upserts and deletes by key (`input`: its scan, with the `op` column):
    the table's live rows, without `op` (the engine's `Upsert`)."""

    input: Node
    table: str
    keys: tuple[str, ...]
    op: str

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([f for f in self.input.schema if f.name != self.op])


@dataclass(frozen=True)
class ViewRef:
    """The output of another view (planned once, shared)."""

    view: str
    schema: pa.Schema


@dataclass(frozen=True)
class Filter:
    input: Node
    predicate: Expr

    @property
    def schema(self) -> pa.Schema:
        return self.input.schema


@dataclass(frozen=True)
class Project:
    input: Node
    outputs: tuple[tuple[str, Expr], ...]

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([pa.field(n, e.type) for n, e in self.outputs])


@dataclass(frozen=True)
class Windows:
    """TUMBLE or HOP: each row with a non-null `time` once per window it falls in (windows
    of `size_us` starting every `slide_us`, aligned to the epoch), with the window's bounds
    as two more columns (`start`, `end`). Linear: a row's windows depend on the row only."""

    input: Node
    time: str
    size_us: int
    slide_us: int
    start: str
    end: str

    @property
    def schema(self) -> pa.Schema:
        ts = pa.timestamp("us", tz="UTC")
        return self.input.schema.append(pa.field(self.start, ts)).append(pa.field(self.end, ts))


@dataclass(frozen=True)
class Sessions:
    """SESSION: each row with a non-null `time` with the bounds of its session (`start`,
    `end`): the rows of a `partition` whose times follow each other by less than `gap_us`,
    from the first time to the last plus the gap. Stateful: a row can merge or split
    sessions."""

    input: Node
    partition: tuple[str, ...]
    time: str
    gap_us: int
    start: str
    end: str

    @property
    def schema(self) -> pa.Schema:
        ts = pa.timestamp("us", tz="UTC")
        return self.input.schema.append(pa.field(self.start, ts)).append(pa.field(self.end, ts))


@dataclass(frozen=True)
class AggCall:
    """`func` over input column `column` (None: count(*)), output column `name`; with
    `distinct`, over the distinct non-null values of the group. A Python aggregate (`func`
    "udf") is `udf` (`udafs.Udaf`) over the input columns `columns`. In a `RowsOver`, a
    window function: LAG and LEAD of `column` by `offset` rows, with column `default`'s
    value where there is no such row (None: NULL)."""

    name: str
    func: AggFunc | WindowFunc
    column: str | None
    type: pa.DataType
    distinct: bool = False
    # Fields added later are left out of fingerprints at their defaults (`NEWER`), so that
    # a plan of an earlier release is described as it was.
    udf: Any = field(default=None, metadata=NEWER)
    columns: tuple[str, ...] = field(default=(), metadata=NEWER)
    offset: int = field(default=1, metadata=NEWER)
    default: str | None = field(default=None, metadata=NEWER)

    @property
    def reads(self) -> tuple[str, ...]:
        """The input columns it reads."""
        if self.func == "udf":
            return self.columns
        return tuple(c for c in (self.column, self.default) if c)


@dataclass(frozen=True)
class Aggregate:
    """GROUP BY `keys` (input columns, output under the same names), then `aggs`."""

    input: Node
    keys: tuple[str, ...]
    aggs: tuple[AggCall, ...]

    @property
    def schema(self) -> pa.Schema:
        keys = [self.input.schema.field(k) for k in self.keys]
        return pa.schema([*keys, *(pa.field(a.name, a.type) for a in self.aggs)])


@dataclass(frozen=True)
class WindowAggregate:
    """An operator spec's `window_aggregate`: windows of `size_us` every `slide_us` on
    `time`, grouped by the window's bounds (`start`, `end`) and `keys`, then `aggs`, with
    the operator's own watermark (largest time seen minus `lateness_us`) closing windows
    and dropping their late rows. (SQL's TUMBLE and HOP are `Windows` then `Aggregate`,
    under the table's watermark.)"""

    input: Node
    time: str
    size_us: int
    slide_us: int
    lateness_us: int
    keys: tuple[str, ...]
    aggs: tuple[AggCall, ...]
    start: str
    end: str

    @property
    def schema(self) -> pa.Schema:
        ts = pa.timestamp("us", tz=self.input.schema.field(self.time).type.tz)
        keys = [self.input.schema.field(k) for k in self.keys]
        bounds = [pa.field(self.start, ts), pa.field(self.end, ts)]
        return pa.schema([*bounds, *keys, *(pa.field(a.name, a.type) for a in self.aggs)])


@dataclass(frozen=True)
class Join:
    """Equi-join on `left_keys` = `right_keys` (nulls never match), then `residual` (a
    predicate over both sides' columns) for the rows that matched."""

    left: Node
    right: Node
    kind: JoinKind
    left_keys: tuple[str, ...]
    right_keys: tuple[str, ...]
    residual: Expr | None = None

    @property
    def schema(self) -> pa.Schema:
        nullable_left = self.kind in ("right", "full")
        nullable_right = self.kind in ("left", "full")
        left = [f.with_nullable(True) if nullable_left else f for f in self.left.schema]
        right = [f.with_nullable(True) if nullable_right else f for f in self.right.schema]
        return pa.schema([*left, *right])


@dataclass(frozen=True)
class Distinct:
    input: Node

    @property
    def schema(self) -> pa.Schema:
        return self.input.schema


@dataclass(frozen=True)
class TopN:
    """ROW_NUMBER() OVER (PARTITION BY `partition` ORDER BY `order`) <= `limit`: each
    partition's first rows, ranked in column `rank`."""

    input: Node
    partition: tuple[str, ...]
    order: tuple[tuple[str, bool], ...]  # (column, descending)
    limit: int
    rank: str

    @property
    def schema(self) -> pa.Schema:
        return self.input.schema.append(pa.field(self.rank, pa.int32()))


@dataclass(frozen=True)
class RowsOver:
    """`AGG(x) OVER (PARTITION BY ... ORDER BY ... ROWS BETWEEN n PRECEDING AND CURRENT
    ROW)`: each input row with `aggs` over its partition's rows from `preceding` rows
    before it (None: all) to itself, in `order`: one `preceding` for all aggregates (so the
    node, and its fingerprint, is what it was before frames per aggregate), or a tuple of
    one per aggregate where they differ. The window aggregates of a SELECT that share
    PARTITION BY and ORDER BY are one node: one ordering of each partition, so rows equal in
    every column pair their values as Spark's do. `ranges`: per aggregate, whether its
    frame is RANGE (`preceding` in the single order column's units, the frame ending at the
    row's last peer); empty: all ROWS. Window functions (ROW_NUMBER, RANK, DENSE_RANK, LAG,
    LEAD) are `aggs` too, their frame ignored."""

    input: Node
    partition: tuple[str, ...]
    order: tuple[tuple[str, bool], ...]  # (column, descending)
    preceding: int | tuple[int | None, ...] | None
    aggs: tuple[AggCall, ...]
    ranges: tuple[bool, ...] = field(default=(), metadata=NEWER)

    @property
    def frames(self) -> tuple[int | None, ...]:
        """Each aggregate's `preceding`."""
        p = self.preceding
        return p if isinstance(p, tuple) else (p,) * len(self.aggs)

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([*self.input.schema, *(pa.field(a.name, a.type) for a in self.aggs)])


@dataclass(frozen=True)
class Negate:
    """The input with every weight negated: subtraction, as `UnionAll(a, Negate(b))`."""

    input: Node

    @property
    def schema(self) -> pa.Schema:
        return self.input.schema


@dataclass(frozen=True)
class UnionAll:
    """The inputs' rows, positionally, under the first input's column names."""

    inputs: tuple[Node, ...]
    out: pa.Schema = field(compare=False)

    @property
    def schema(self) -> pa.Schema:
        return self.out


Node = (
    Scan
    | ViewRef
    | Filter
    | Project
    | Windows
    | Sessions
    | Aggregate
    | WindowAggregate
    | Join
    | Distinct
    | TopN
    | RowsOver
    | Negate
    | UnionAll
    | Upsert
)


def children(n: Node) -> list[Node]:
    if isinstance(n, Scan | ViewRef):
        return []
    if isinstance(n, Join):
        return [n.left, n.right]
    if isinstance(n, UnionAll):
        return list(n.inputs)
    return [n.input]


__all__ = [
    "AggCall",
    "AggFunc",
    "Aggregate",
    "Distinct",
    "Filter",
    "Join",
    "JoinKind",
    "Negate",
    "Node",
    "Project",
    "RowsOver",
    "Scan",
    "Sessions",
    "TopN",
    "UnionAll",
    "Upsert",
    "ViewRef",
    "WindowAggregate",
    "WindowFunc",
    "Windows",
    "children",
]
