"""A partitioned run's figures per operator-shard (issue 50), from its shard steps' metrics
(`ShardHost.step`, gathered in `PartitionedDataflow.last_metrics`): each (stateful operator,
shard)'s rows in and out and time, summed over the steps since the run opened, and its
state (rows, bytes in memory and files) as of the newest step that stepped it.

A shard step reports the state of the operator-shards it stepped only, so the state of the
others is carried: in the driver's checkpoints' metadata (`SHARD_STATE_KEY`, `state()`),
from which a restored run starts (`restore`) until its own steps report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from storage_engine.circuit import OperatorMetrics

# The operator-shards' state figures in a partitioned run's driver checkpoints' metadata:
# per operator id, per shard, [rows, bytes].
SHARD_STATE_KEY = "shard_state"


class ShardFigures:
    """The figures of `operators`' `shards` shards, for the run's `operator_metrics`."""

    def __init__(self, operators: Iterable[str], shards: int) -> None:
        self.shards = shards
        # Per operator, per shard: [rows in, rows out, ms] summed, and [rows, bytes] now.
        self._counts: dict[str, list[list[float]]] = {}
        self._state: dict[str, list[list[int]]] = {}
        # Per shard: its state batches in memory at the end of the last step (the largest
        # of its level tasks': each task closes its operator-shards when it ends).
        self.memory = [0] * shards
        for op in operators:
            self._operator(op)

    def _operator(self, op: str) -> None:
        if op not in self._counts:
            self._counts[op] = [[0, 0, 0.0] for _ in range(self.shards)]
            self._state[op] = [[0, 0] for _ in range(self.shards)]

    def add(self, tasks: Iterable[Mapping[str, Any]]) -> None:
        """One step's shard tasks' metrics (`PartitionedDataflow.last_metrics`)."""
        memory = [0] * self.shards
        for task in tasks:
            s = int(task["shard"])
            memory[s] = max(memory[s], int(task.get("memory_bytes", 0)))
            for op, m in task.get("operators", {}).items():
                self._operator(op)
                c = self._counts[op][s]
                c[0] += int(m["rows_in"])
                c[1] += int(m["rows_out"])
                c[2] += float(m["ms"])
                self._state[op][s] = [int(m["state_rows"]), int(m["state_bytes"])]
        self.memory = memory

    def state(self) -> dict[str, list[list[int]]]:
        """Every operator-shard's state figures now (JSON, for a checkpoint's metadata)."""
        return {op: [list(x) for x in shards] for op, shards in self._state.items()}

    def restore(self, saved: Mapping[str, Any] | None) -> None:
        """Start from the state figures a checkpoint's metadata holds (`state()`): those of
        the operators this run has, at its number of shards (none of a checkpoint written
        before they were kept)."""
        for op, shards in (saved or {}).items():
            if op in self._state and len(shards) == self.shards:
                self._state[op] = [[int(rows), int(size)] for rows, size in shards]

    def operator_metrics(self) -> dict[str, OperatorMetrics]:
        """Per operator: its shards' figures summed, and each shard's in `shards`."""
        out = {}
        for op in sorted(self._counts):
            shards = tuple(
                OperatorMetrics(int(c[0]), int(c[1]), c[2], st[0], st[1])
                for c, st in zip(self._counts[op], self._state[op], strict=True)
            )
            out[op] = OperatorMetrics(
                sum(m.rows_in for m in shards),
                sum(m.rows_out for m in shards),
                sum(m.step_ms for m in shards),
                sum(m.state_rows for m in shards),
                sum(m.state_bytes for m in shards),
                shards,
            )
        return out


__all__ = ["SHARD_STATE_KEY", "ShardFigures"]
