"""What every stateful operator of a circuit provides, and the Z-set helpers they share.

An operator consumes Z-set deltas of one or two named input streams and returns the Z-set
delta of its output: a step's output is exactly the change of the operator's result caused
by the step's input (DBSP's incremental semantics), so retractions flow through.
"""

from __future__ import annotations

import hashlib
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..batch import Batch
from ..location import StorageLocation
from ..schema import WEIGHT, ZSetSchema


class CircuitError(ValueError):
    """An operator was defined or fed inconsistently (names the operator and the field)."""


COUNT = "__count"
BUCKET = "__bucket"
TMAX = "__tmax"


@dataclass
class OperatorCounters:
    """What an operator has done since it was built: rows in (a pre-aggregated input
    counts the rows it summarises) and out (changes), and the time its steps took."""

    rows_in: int = 0
    rows_out: int = 0
    step_ms: float = 0.0


@dataclass(frozen=True)
class PartialForm:
    """What an operator needs of an insert-only input delta when the producer (Spark) has
    already grouped it: one row per group of the batch, with these columns (`schema`):

    - `keys`: the input columns grouped by (null keys form a group); with `bucket =
      (time column, slide_us)` also `__bucket`, the event time's slide bucket
      (floor(t / slide) * slide, microseconds since the epoch; null without an event time);
    - `__count`: the number of rows;
    - `__n_<c>` for `counted`: the number of non-null values of column c;
    - `__s_<c>` for `summed`: the sum of c's non-null values (0 without any);
    - `__min_<c>`, `__max_<c>` for `ordered`: the smallest and largest non-null, non-NaN
      value (null without any), and for floating-point columns `__nan_<c>`: whether a NaN
      occurred;
    - `__tmax` with a bucket: the largest event time (microseconds).

    Several rows with the same keys are allowed (e.g. one per Spark partition); rows with
    a zero count should be left out. Only insert-only inputs (every weight +1) may be
    pre-aggregated: a multiset's minimum needs every value once retractions can remove it.
    """

    keys: tuple[str, ...]
    schema: pa.Schema
    counted: tuple[str, ...] = ()
    summed: tuple[str, ...] = ()
    ordered: tuple[str, ...] = ()
    bucket: tuple[str, int] | None = None


class Operator(ABC):
    """A stateful operator with a persistent id; its spines are named `<id>.<role>`."""

    def __init__(self, op_id: str, inputs: Sequence[str]) -> None:
        self.id = op_id
        self.inputs = tuple(inputs)
        self.counters = OperatorCounters()
        # Input rows dropped as late since the state began (a window aggregate's; kept in
        # its checkpoint state).
        self.late_rows = 0

    def apply(self, deltas: Mapping[str, pa.Table]) -> pa.Table:
        """`step`, counted in `counters`: what a circuit calls."""
        started = time.perf_counter()
        out = self.step(deltas)
        self._count(sum(t.num_rows for t in deltas.values()), out.num_rows, started)
        return out

    def apply_partial(self, partial: pa.Table) -> pa.Table:
        """`step_partial`, counted in `counters`."""
        started = time.perf_counter()
        out = self.step_partial(partial)
        rows = pc.sum(partial.column(COUNT)).as_py() if partial.num_rows else 0
        self._count(int(rows or 0), out.num_rows, started)
        return out

    def _count(self, rows_in: int, rows_out: int, started: float) -> None:
        c = self.counters
        c.rows_in += rows_in
        c.rows_out += rows_out
        c.step_ms += (time.perf_counter() - started) * 1000

    @property
    @abstractmethod
    def output_schema(self) -> pa.Schema:
        """Columns of the output rows (the weight travels in `__weight`)."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Everything that determines the operator's state layout (for the fingerprint)."""

    @abstractmethod
    def open(self, location: StorageLocation, state: Mapping[str, Any]) -> None:
        """Bind spines in `location`; `state` is what `checkpoint_state` returned at the
        restored checkpoint (empty without one)."""

    @abstractmethod
    def step(self, deltas: Mapping[str, pa.Table]) -> pa.Table:
        """The output delta for these input deltas (each with a `__weight` column)."""

    def partial_form(self) -> PartialForm | None:
        """The pre-aggregated input `step_partial` accepts; None: the operator needs rows."""
        return None

    def step_partial(self, partial: pa.Table) -> pa.Table:
        """The output delta for an insert-only input delta given in `partial_form()`: the
        same as `step` on the rows it summarises, leaving state that gives the same outputs
        as `step`'s would for any later insert-only input."""
        raise CircuitError(f"operator {self.id!r} cannot take a pre-aggregated input")

    def forget_below(self, input: str, bound: Any) -> None:
        """Every later delta of `input` has its leading key at or above `bound` (a value of
        that column's type; a watermark's consequence): drop the state that only rows below
        it could reach, without output (what was emitted stays). The leading key is the
        first group, join or partition column, a distinct's first column, a session's time.
        Default: keep everything."""
        return

    def checkpoint_state(self) -> dict[str, Any]:
        """Small JSON-able operator state to store in each checkpoint (e.g. a watermark)."""
        return {}

    def metrics(self) -> dict[str, Any]:
        return {}

    def spine_name(self, role: str) -> str:
        return f"{self.id}.{role}"


def fingerprint(described: Sequence[dict[str, Any]]) -> str:
    blob = json.dumps(list(described), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


def weighted(table: pa.Table | pa.RecordBatch) -> pa.Table:
    """A table with an int64 `__weight` column (+1 where the input had none)."""
    t = pa.Table.from_batches([table]) if isinstance(table, pa.RecordBatch) else table
    if WEIGHT in t.column_names:
        i = t.column_names.index(WEIGHT)
        return t.set_column(i, WEIGHT, t.column(WEIGHT).cast(pa.int64()))
    return t.append_column(WEIGHT, pa.array(np.ones(t.num_rows, np.int64)))


def require_columns(op: str, schema: pa.Schema, names: Sequence[str], what: str) -> None:
    missing = [n for n in names if n not in schema.names]
    if missing:
        raise CircuitError(
            f"operator {op!r}: {what} {missing} not among the input columns {schema.names}"
        )


def to_table(batch: Batch) -> pa.Table:
    return pa.Table.from_batches([batch.data])


def empty_delta(schema: pa.Schema) -> pa.Table:
    return schema.append(pa.field(WEIGHT, pa.int64(), False)).empty_table()


def consolidate(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Sum the weights of equal rows and drop zero weights (rows in Z-set order)."""
    if table.num_rows == 0:
        return empty_delta(schema)
    zs = ZSetSchema(tuple(schema), ())
    return to_table(Batch.from_arrow(zs, table.select([*schema.names, WEIGHT])))
