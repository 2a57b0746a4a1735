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

from ..batch import Batch
from ..location import StorageLocation
from ..schema import WEIGHT, ZSetSchema


class CircuitError(ValueError):
    """An operator was defined or fed inconsistently (names the operator and the field)."""


COUNT = "__count"


@dataclass
class OperatorCounters:
    """What an operator has done since it was built: rows in and out (changes), and the
    time its steps took."""

    rows_in: int = 0
    rows_out: int = 0
    step_ms: float = 0.0


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

    def spine_input(self, spine: str) -> int:
        """Which input's rows the spine `spine` (a full name) holds, by that input's
        columns: how a rescale finds each state row's key (0 but for a join's right)."""
        return 0


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
