"""A compiled dataflow (`sql.Dataflow`) as a run steps and checkpoints it (`Stepper`).

The SQL compiler stops at the dataflow over the engine's operators: where their state is
kept and how a checkpoint is written is the runtime's, so `sql` stays importable (and
testable) without the storage location or the commit machinery. This wrapper opens the
dataflow's operators on the run's location, resumes the dataflow from the restored
checkpoint's metadata (its watermarks), and commits that metadata with the operators'
state.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import pyarrow as pa

from spindle_sql.dataflow import Dataflow
from storage_engine.circuit import Operator, OperatorMetrics
from storage_engine.commit import CommitHandle
from storage_engine.location import StorageLocation

# The key of a partitioned run's manifest in its driver checkpoints' metadata
# (`partitioned_run.PartitionedRun`): such a checkpoint holds no operator state of its own.
MANIFEST_KEY = "partitioned"


class ParallelismChangedError(ValueError):
    """A checkpoint of a partitioned run (parallelism > 1) restored in one process: its
    state is in its shards, which this run would not see."""


class DataflowRun:
    """`flow` bound to a storage location: a `Stepper` for the runner."""

    def __init__(self, flow: Dataflow) -> None:
        self.flow = flow
        self.operators: list[Operator] = flow.operators
        self._loc: StorageLocation | None = None

    @property
    def fingerprint(self) -> str:
        return self.flow.fingerprint

    @property
    def output_schemas(self) -> dict[str, pa.Schema]:
        return self.flow.output_schemas

    def open(self, location: StorageLocation, drop: Collection[str] = ()) -> None:
        """Bind the stateful operators to `location` (opened with `fingerprint`) and restore
        their state and the dataflow's from its opened checkpoint (operators in `drop`
        start empty). A partitioned run's checkpoint is refused: its operators' state is
        in its shards, and they would silently start empty."""
        if location.restored is not None and MANIFEST_KEY in location.metadata:
            raise ParallelismChangedError(
                f"checkpoint {location.restored.uuid} was taken at parallelism "
                f"{location.metadata[MANIFEST_KEY].get('shards')}: it restores at any "
                "parallelism above 1 (a rescale), not at 1 yet"
            )
        self.flow.circuit.open(location, drop)
        self._loc = location
        self.flow.resume(location.metadata if location.restored is not None else None)

    def changed_operators(self, fingerprint: str, metadata: Mapping[str, Any]) -> list[str]:
        return self.flow.changed_operators(fingerprint, metadata)

    def changed_views(self, metadata: Mapping[str, Any]) -> list[str]:
        return self.flow.changed_views(metadata)

    def step(
        self, deltas: Mapping[str, pa.Table | pa.RecordBatch], proctime_us: int | None = None
    ) -> dict[str, pa.Table]:
        return self.flow.step(deltas, proctime_us)

    def commit_async(
        self,
        step: int,
        metadata: Mapping[str, Any] | None = None,
        identifier: str | None = None,
        keep_last: int | None = None,
    ) -> CommitHandle:
        """`Circuit.commit_async` of the stateful operators, with the dataflow's state."""
        meta = {**(metadata or {}), **self.flow.checkpoint_metadata()}
        return self.flow.circuit.commit_async(step, meta, identifier, keep_last)

    def metrics(self) -> dict[str, dict[str, Any]]:
        return self.flow.metrics()

    def late_rows(self) -> int:
        return self.flow.late_rows()

    def take_unmatched(self) -> dict[str, pa.Table]:
        return self.flow.take_unmatched()

    def operator_metrics(self) -> dict[str, OperatorMetrics]:
        return self.flow.operator_metrics()

    def memory(self) -> tuple[int, int]:
        """Bytes of state batches in memory now, and the budget they are kept under."""
        if self._loc is None:
            return 0, 0
        return self._loc.budget.used, self._loc.budget.limit


__all__ = ["MANIFEST_KEY", "DataflowRun", "ParallelismChangedError"]
