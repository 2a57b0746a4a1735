"""A circuit: a pipeline's stateful operators, stepped together and checkpointed together.

    circuit = Circuit([GroupAggregate("per_user", schema, ["user"], [Aggregate("n", "count")])])
    loc = StorageLocation.open(path, fingerprint=circuit.fingerprint)
    circuit.open(loc)                       # binds spines, restores operator state
    out = circuit.step({"source": arrow_table})             # {operator id: output delta}
    circuit.commit_async(step_id, {"offsets": ...})        # state + caller's metadata

The fingerprint covers every operator's state layout (ids, kinds, columns and types, window
sizes): a change to the stateful part changes it, and the storage location then refuses to
resume from an older checkpoint unless dropping state is allowed. Each checkpoint also
records every operator's own fingerprint (`operator_fingerprints`: its layout and, given by
the circuit's builder, what feeds it), so a changed circuit can keep the state of the
operators that did not change and start the others empty (`open(location, drop=...)`).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from ..commit import CommitHandle
from ..location import StorageLocation
from ..manifest import OP_ID_RE
from .operator import CircuitError, Operator, fingerprint, weighted

STATE_KEY = "circuit"
FINGERPRINTS_KEY = "operator_fingerprints"


@dataclass(frozen=True)
class OperatorMetrics:
    """An operator's rows in and out and the ms its steps took (counters since its circuit
    was built), and its state's rows and bytes (memory and files) now. An operator whose
    state is split in shards (a partitioned run) has the sums of its shards' figures, and
    each shard's in `shards`, in shard order; a single-process one has none."""

    rows_in: int
    rows_out: int
    step_ms: float
    state_rows: int
    state_bytes: int
    shards: tuple[OperatorMetrics, ...] = ()


class Circuit:
    """`upstream`: per operator id, a description of its layout and what feeds it (a SQL
    view's plan below it), its own fingerprint's input; without one, its layout is."""

    def __init__(
        self, operators: Sequence[Operator], upstream: Mapping[str, str] | None = None
    ) -> None:
        ids = [op.id for op in operators]
        if len(set(ids)) != len(ids):
            raise CircuitError(f"operator ids must be unique, got {ids}")
        for i in ids:
            if not OP_ID_RE.match(i):
                raise CircuitError(f"operator id {i!r} must match {OP_ID_RE.pattern}")
        self.operators = list(operators)
        self.fingerprint = fingerprint([op.describe() for op in self.operators])
        feeds = upstream or {}
        self.operator_fingerprints = {
            op.id: fingerprint([{"operator": feeds[op.id]} if op.id in feeds else op.describe()])
            for op in self.operators
        }
        self._loc: StorageLocation | None = None
        self.last_step_ms = 0.0

    @property
    def inputs(self) -> set[str]:
        return {i for op in self.operators for i in op.inputs}

    def open(self, location: StorageLocation, drop: Collection[str] = ()) -> None:
        """Bind every operator to `location` and restore its state from the opened
        checkpoint; the operators in `drop` start empty instead."""
        saved = location.metadata.get(STATE_KEY, {}) if location.restored is not None else {}
        ids = [op.id for op in self.operators]
        owned = {i: [s for s in location.restored_spines if _owner(s, ids) == i] for i in drop}
        for op in self.operators:
            if op.id in drop:
                location.start_empty(owned[op.id])
                op.open(location, {})
            else:
                op.open(location, saved.get(op.id, {}))
        self._loc = location

    def changed_operators(self, fingerprint: str, metadata: Mapping[str, Any]) -> list[str]:
        """The operators whose state in a checkpoint with this circuit `fingerprint` and
        `metadata` does not fit: new ones and changed ones. A checkpoint of a release
        before per-operator fingerprints fits whole (same fingerprint) or not at all."""
        saved = metadata.get(FINGERPRINTS_KEY)
        if saved is None:
            return [] if fingerprint == self.fingerprint else [op.id for op in self.operators]
        return [i for i, fp in self.operator_fingerprints.items() if saved.get(i) != fp]

    def changed_views(self, metadata: Mapping[str, Any]) -> list[str]:
        return []  # a circuit of operators has no views

    def step(self, deltas: Mapping[str, pa.Table | pa.RecordBatch]) -> dict[str, pa.Table]:
        """Feed one step's input deltas; returns every operator's output delta, by operator
        id."""
        if self._loc is None:
            raise CircuitError("open() the circuit on a storage location first")
        unknown = set(deltas) - self.inputs
        if unknown:
            raise CircuitError(f"no operator reads the inputs {sorted(unknown)}")
        started = time.perf_counter()
        tables = {name: weighted(t) for name, t in deltas.items()}
        out = {}
        for op in self.operators:
            missing = [i for i in op.inputs if i not in tables]
            if missing:
                raise CircuitError(f"operator {op.id!r} needs the inputs {missing}")
            out[op.id] = op.apply({i: tables[i] for i in op.inputs})
        self.last_step_ms = (time.perf_counter() - started) * 1000
        return out

    def checkpoint_metadata(self) -> dict[str, Any]:
        return {
            STATE_KEY: {op.id: op.checkpoint_state() for op in self.operators},
            FINGERPRINTS_KEY: dict(self.operator_fingerprints),
        }

    def commit_async(
        self,
        step: int,
        metadata: Mapping[str, Any] | None = None,
        identifier: str | None = None,
        keep_last: int | None = None,
    ) -> CommitHandle:
        """Checkpoint the state after `step`, with the operators' state and `metadata`
        (`keep_last`: see `StorageLocation.commit_async`)."""
        if self._loc is None:
            raise CircuitError("open() the circuit on a storage location first")
        meta = {**(metadata or {}), **self.checkpoint_metadata()}
        return self._loc.commit_async(
            identifier=identifier, step=step, metadata=meta, keep_last=keep_last
        )

    def metrics(self) -> dict[str, dict[str, Any]]:
        return {op.id: op.metrics() for op in self.operators}

    def late_rows(self) -> int:
        """Input rows dropped as late since the state began (restored with it)."""
        return sum(op.late_rows for op in self.operators)

    def operator_metrics(self) -> dict[str, OperatorMetrics]:
        """Each operator's counters (since the circuit was built) and its state now."""
        if self._loc is None:
            raise CircuitError("open() the circuit on a storage location first")
        state = operator_state(self._loc, [op.id for op in self.operators])
        return {
            op.id: OperatorMetrics(
                op.counters.rows_in,
                op.counters.rows_out,
                op.counters.step_ms,
                *state[op.id],
            )
            for op in self.operators
        }

    @property
    def output_schemas(self) -> dict[str, pa.Schema]:
        """Each output's columns, by name (an operator's id)."""
        return {op.id: op.output_schema for op in self.operators}


def operator_state(
    location: StorageLocation, operator_ids: Sequence[str]
) -> dict[str, tuple[int, int]]:
    """Each operator's state in `location` now: (rows, bytes in memory and files), summed
    over its spines."""
    state = {i: (0, 0) for i in operator_ids}
    for spine in location.spines():
        owner = _owner(spine.op_id, operator_ids)
        if owner is not None:
            s = spine.stats()
            rows, size = state[owner]
            state[owner] = (rows + s.rows, size + s.mem_bytes + s.file_bytes)
    return state


def _owner(spine_id: str, operator_ids: Sequence[str]) -> str | None:
    """The operator a spine belongs to: a spine is `<operator id>.<role>`, and ids may hold
    dots, so the longest one wins."""
    return max((i for i in operator_ids if spine_id.startswith(f"{i}.")), key=len, default=None)


class Stepper(Protocol):
    """What a run steps and checkpoints: a pipeline's dataflow (the `sql` package, built on
    a `Circuit`), as the runtime wraps it (`workers/runtime/dataflow_run.py`)."""

    operators: list[Operator]

    @property
    def fingerprint(self) -> str: ...

    @property
    def output_schemas(self) -> dict[str, pa.Schema]: ...

    def open(self, location: StorageLocation, drop: Collection[str] = ()) -> None: ...

    def changed_operators(self, fingerprint: str, metadata: Mapping[str, Any]) -> list[str]: ...

    def changed_views(self, metadata: Mapping[str, Any]) -> list[str]:
        """Views whose query changed since the checkpoint (their view sinks start empty)."""
        ...

    def step(
        self, deltas: Mapping[str, pa.Table | pa.RecordBatch], proctime_us: int | None = None
    ) -> dict[str, pa.Table]:
        """The views' deltas; `proctime_us`: the step's processing time (PROCTIME())."""
        ...

    def commit_async(
        self,
        step: int,
        metadata: Mapping[str, Any] | None = None,
        identifier: str | None = None,
        keep_last: int | None = None,
    ) -> CommitHandle: ...

    def metrics(self) -> dict[str, dict[str, Any]]: ...

    def late_rows(self) -> int: ...

    def take_unmatched(self) -> dict[str, pa.Table]:
        """Per table fed by upserts, the last step's deletes of keys without a row (dead
        letters)."""
        ...

    def operator_metrics(self) -> dict[str, OperatorMetrics]: ...
