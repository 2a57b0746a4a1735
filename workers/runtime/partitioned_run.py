"""A SQL pipeline's dataflow partitioned in `parallelism` shards (issue 50), as a run
steps and checkpoints it: a `Stepper`, beside `DataflowRun`.

The driver's storage location holds no operator state: each operator-shard is a location
of its own under `<storage>/shards/` (and, with an object store, under the run's prefix
there: `shards/<operator>/<shard>/`), stepped by Spark tasks (`partitioned.SparkLevels`).
A checkpoint of the driver's location is the commit point: its metadata carries the
coordinator's manifest (`MANIFEST_KEY`), naming every operator-shard's checkpoint, which
the shards made durable before the step returned. Restoring a checkpoint opens the
coordinator at its manifest.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from spindle_sql.dataflow import Dataflow
from storage_engine.circuit import Operator, OperatorMetrics
from storage_engine.commit import CommitHandle
from storage_engine.location import StorageLocation

from .connectors.source import Split, spread
from .dataflow_run import MANIFEST_KEY
from .micro_batch import MicroBatch
from .partitioned import PartitionedDataflow
from .partitioned.figures import SHARD_STATE_KEY, ShardFigures
from .partitioned.reads import TableInput, TableReads
from .partitioned.spark_levels import SparkLevels


class PartitionedRunError(ValueError):
    """What a partitioned run cannot do (yet): drop an operator's state, or restore a
    checkpoint without a manifest."""


class PartitionedRun:
    """`factory`'s dataflow in `shards` shards on `spark`'s executors: a `Stepper`."""

    def __init__(
        self,
        factory: Callable[[], Dataflow],
        shards: int,
        spark: SparkSession,
        outputs: Collection[str] | None = None,
    ) -> None:
        self.factory = factory
        self.outputs = outputs  # the views the run's sinks read (the others never travel)
        self.shards = shards
        self.spark = spark
        self.flow = factory()  # the plan's: fingerprint, schemas, what changed
        self.operators: list[Operator] = []  # the driver's location holds none
        self.coordinator: PartitionedDataflow | None = None
        self._loc: StorageLocation | None = None
        self._manifests: dict[str, Mapping[str, Any] | None] = {}  # driver checkpoint's
        self._pending: list[tuple[CommitHandle, Mapping[str, Any]]] = []  # commits asked
        # Per operator-shard: rows in and out and ms summed over its steps, its state now.
        self._figures = ShardFigures((), shards)

    @property
    def fingerprint(self) -> str:
        return self.flow.fingerprint

    @property
    def output_schemas(self) -> dict[str, pa.Schema]:
        return self.flow.output_schemas

    def open(self, location: StorageLocation, drop: Collection[str] = ()) -> None:
        """Shards under the location's directory (and its object store); resumed from the
        restored checkpoint's manifest, if any."""
        if drop:
            raise PartitionedRunError(
                "parallelism > 1: dropping an operator's state is not supported yet"
            )
        store = location.remote.store if location.remote is not None else None
        # The shards' engine settings are the driver location's: the spec's `engine`.
        settings = location.settings
        levels = SparkLevels(self.spark, self.factory, location.path, store, settings)
        part = PartitionedDataflow(
            self.factory,
            self.shards,
            location.path,
            store=store,
            settings=settings,
            levels=levels,
            retain=self._retained,
            outputs=self.outputs,
        )
        if location.restored is not None:
            manifest = location.metadata.get(MANIFEST_KEY)
            if manifest is None:
                raise PartitionedRunError(
                    f"checkpoint {location.restored.uuid} has no partitioned state "
                    "(written at parallelism 1: restoring it at a higher one is not supported yet)"
                )
            part.open(manifest)
        self._figures = ShardFigures(part.part.operators(), self.shards)
        if location.restored is not None:
            self._figures.restore(location.metadata.get(SHARD_STATE_KEY))
        self.coordinator, self._loc = part, location
        part.sweep()  # what a crashed run or an offline gc left

    def _part(self) -> PartitionedDataflow:
        if self.coordinator is None:
            raise PartitionedRunError("open() the run on a storage location first")
        return self.coordinator

    def changed_operators(self, fingerprint: str, metadata: Mapping[str, Any]) -> list[str]:
        return self.flow.changed_operators(fingerprint, metadata)

    def changed_views(self, metadata: Mapping[str, Any]) -> list[str]:
        return self.flow.changed_views(metadata)

    def step(
        self, deltas: Mapping[str, pa.Table | pa.RecordBatch], proctime_us: int | None = None
    ) -> dict[str, pa.Table]:
        part = self._part()
        out = part.step(deltas, proctime_us=proctime_us)
        self._figures.add(part.last_metrics)
        return out

    def step_reading(
        self,
        deltas: Mapping[str, pa.Table | pa.RecordBatch],
        reads: Mapping[str, tuple[TableInput, list[Split]]],
        proctime_us: int | None = None,
    ) -> tuple[dict[str, pa.Table], dict[str, MicroBatch]]:
        """`step`, with tables that level 0's tasks read on the executors: each table's
        input and its splits of this step. Also returns, per table read so, its rows, oldest
        event time and records that did not parse (`SparkMustRead` if one of its splits
        must go to Spark's reader: the step is then to be read in the driver)."""
        part = self._part()
        plans = {t: TableReads(i, spread(splits, self.shards)) for t, (i, splits) in reads.items()}
        out = part.step(deltas, plans, proctime_us)
        self._figures.add(part.last_metrics)
        return out, part.last_reads

    def commit_async(
        self,
        step: int,
        metadata: Mapping[str, Any] | None = None,
        identifier: str | None = None,
        keep_last: int | None = None,
    ) -> CommitHandle:
        """The driver's checkpoint, naming the shards' in its manifest: the commit point."""
        part = self._part()
        assert self._loc is not None
        meta = {
            **(metadata or {}),
            **part.flow.checkpoint_metadata(),
            MANIFEST_KEY: part.checkpoint(),
            SHARD_STATE_KEY: self._figures.state(),
        }
        handle = self._loc.commit_async(
            identifier=identifier, step=step, metadata=meta, keep_last=keep_last
        )
        self._pending.append((handle, meta[MANIFEST_KEY]))
        return handle

    def _retained(self) -> list[Mapping[str, Any]]:
        """The manifests of the driver's checkpoints and of those being committed: the
        shards' checkpoints they name are kept, the others collected."""
        # Pending first: a commit that lands meanwhile is then listed below.
        self._pending = [(h, m) for h, m in self._pending if not h.done]
        pending = [m for _, m in self._pending]
        assert self._loc is not None
        listed = {c.uuid for c in self._loc.list_checkpoints()}
        for uid in listed - self._manifests.keys():
            self._manifests[uid] = self._loc.checkpoint_metadata(uid).get(MANIFEST_KEY)
        self._manifests = {u: m for u, m in self._manifests.items() if u in listed}
        return [m for m in self._manifests.values() if m is not None] + pending

    def metrics(self) -> dict[str, dict[str, Any]]:
        return {}

    def late_rows(self) -> int:
        part = self.coordinator
        return 0 if part is None else sum(part.flow.watermarks.late_rows.values())

    def take_unmatched(self) -> dict[str, pa.Table]:
        """Per upserted table, the last step's deletes of keys without a row, as the shards
        sent them."""
        part = self._part()
        out, part.last_unmatched = part.last_unmatched, {}
        return out

    def operator_metrics(self) -> dict[str, OperatorMetrics]:
        """Each operator's figures summed over its shards, and each shard's
        (`partitioned.figures`)."""
        return self._figures.operator_metrics()

    def memory(self) -> tuple[int, int]:
        """Bytes of state batches in memory on the executors at the end of the last step,
        summed over the shards, and the shards' budgets summed."""
        budget = self._loc.settings.memory_budget_bytes if self._loc is not None else 0
        return sum(self._figures.memory), budget * self.shards

    def close(self) -> None:
        if self.coordinator is not None:
            self.coordinator.close()


__all__ = ["MANIFEST_KEY", "PartitionedRun", "PartitionedRunError"]
