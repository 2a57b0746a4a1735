"""A process's side of partitioned steps (issue 50): `ShardHost.step` is one shard's step
of one level, as a Spark task (mapInArrow over the messages for that shard) will call it.

The step is a pure function of its request (plain JSON: the plan's identity, the level,
the shard, P, K, the step's number, how many tasks level 0 has, the base checkpoint of
each of the level's operator-shards, the watermarks after the step before, whether the
pipeline starts) and of its messages (`messages.py`). It returns messages for later levels
and the driver, and per operator-shard the checkpoint its state is at afterwards: a new
one for each it stepped (committed, durable before it returns), its base for the others.

A host builds a plan's dataflow once per shard (each shard's operators are their own
objects, bound to their own state) from the factory registered under the plan's identity
(`Partitioning.identity`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import pyarrow as pa

from spindle_sql.dataflow import Dataflow
from spindle_sql.partitioning import DRIVER, WATERMARKS, Partitioning, table_port
from spindle_sql.shard_level import LevelStep, concat
from storage_engine import EngineSettings
from storage_engine.circuit import Operator, operator_state
from storage_engine.circuit.operator import OperatorCounters, weighted
from storage_engine.fileio import FileLayer
from storage_engine.objstore import ObjectStoreLike

from .collection import sweep
from .messages import decode, encode
from .reads import TableReads, bad_port, read_task, unmatched_port
from .shard_state import ShardStates


class ShardStepError(ValueError):
    """A request that does not fit the plan (another plan, unknown operators or bases)."""


class ShardHost:
    """Shard steps over the operator-shards under `root` (and `store`)."""

    def __init__(
        self,
        root: str,
        store: ObjectStoreLike | None = None,
        settings: EngineSettings | None = None,
        fs: FileLayer | None = None,
    ) -> None:
        self.states = ShardStates(root, store, settings, fs)
        self._plans: dict[str, Callable[[], Dataflow]] = {}
        self._flows: dict[tuple[str, int], tuple[Dataflow, Partitioning]] = {}

    def register(self, plan: str, factory: Callable[[], Dataflow]) -> None:
        """How to build the dataflow of the plan `plan` (its `Partitioning.identity`)."""
        self._plans[plan] = factory

    def _flow(self, plan: str, shard: int) -> tuple[Dataflow, Partitioning]:
        got = self._flows.get((plan, shard))
        if got is None:
            factory = self._plans.get(plan)
            if factory is None:
                raise ShardStepError(f"no plan {plan!r} is registered")
            flow = factory()
            part = Partitioning(flow)
            if part.identity != plan:
                raise ShardStepError(f"the plan registered as {plan!r} is {part.identity!r}")
            got = self._flows[(plan, shard)] = (flow, part)
        return got

    def step(
        self,
        request: Mapping[str, Any],
        messages: pa.Table,
        reads: Mapping[str, TableReads] | None = None,
    ) -> tuple[pa.Table, dict[str, Any]]:
        """One level of one step on one shard: (messages out, {"checkpoints": {operator id:
        uuid or None}, "metrics": {"ms", "rows_in", "collected", "memory_bytes" (the shard's
        state batches in memory after the commit), "operators": {operator id:
        {"rows_in", "rows_out", "ms", "state_rows", "state_bytes"}}}, "read": {table:
        figures}}), per operator it stepped (`_operator_figures`). Level 0's task also reads
        its share of `reads` (`reads.py`)."""
        started = time.perf_counter()
        plan, shard = str(request["plan"]), int(request["shard"])
        level, step = int(request["level"]), int(request["step"])
        flow, part = self._flow(plan, shard)
        bases: dict[str, str | None] = dict(request["bases"])
        expected = part.operators_at(level)
        if sorted(bases) != sorted(expected):
            raise ShardStepError(
                f"level {level} has the operators {expected}, the request names {sorted(bases)}"
            )
        inputs = decode(messages)
        read: dict[str, dict[str, Any]] = {}
        bad: dict[str, pa.Table] = {}
        if level == 0 and reads:
            rows, read, bad = read_task(reads, shard)
            for name, table in rows.items():
                port = table_port(name)
                given = weighted(table)
                inputs[port] = concat([inputs[port], given]) if port in inputs else given
        task = LevelStep(
            part,
            level,
            shard,
            int(request["shards"]),
            int(request["key_groups"]),
            inputs,
            request["watermarks"],
            bool(request["first"]),
            request.get("sources"),
            request.get("outputs"),
            request.get("proctime_us"),
        )
        ops = {op.id: op for op in flow.operators}
        fps = flow.circuit.operator_fingerprints
        before = {i: replace(ops[i].counters) for i in task.touched}
        checkpoints = dict(bases)
        try:
            for i in task.touched:
                self.states.acquire(ops[i], fps[i], shard, bases[i])
            routed = task.run()
            done = self.states.commit([(ops[i], fps[i]) for i in task.touched], shard, step)
            checkpoints.update(zip(task.touched, done, strict=True))
        except BaseException:
            for i in task.touched:
                self.states.discard(i, shard)
            raise
        state = {i: operator_state(self.states.location(i, shard), [i])[i] for i in task.touched}
        memory = self.states.memory(shard)
        collected = 0
        keep = request.get("keep")
        if keep is not None:
            kept = {(i, shard): {*keep.get(i, ()), checkpoints[i]} for i in task.touched}
            collected = sweep(self.states, kept, list(kept), below_step=step)
        for table, rows in bad.items():
            routed.setdefault((DRIVER, shard), {})[bad_port(table)] = rows
        for table, rows in flow.take_unmatched().items():
            if rows.num_rows:
                routed.setdefault((DRIVER, shard), {})[unmatched_port(table)] = rows
        out = encode(routed, shard)
        rows_in = sum(t.num_rows for p, t in inputs.items() if p != WATERMARKS)
        ms = (time.perf_counter() - started) * 1000
        metrics = {
            "ms": ms,
            "rows_in": rows_in,
            "collected": collected,
            "memory_bytes": memory,
            "operators": _operator_figures(ops, before, state, ms),
        }
        return out, {"checkpoints": checkpoints, "metrics": metrics, "read": read}

    def evict(self) -> None:
        """Close every open operator-shard (the next steps open their bases again)."""
        self.states.close()

    def close(self) -> None:
        self.evict()
        self._flows.clear()


def _operator_figures(
    ops: Mapping[str, Operator],
    before: Mapping[str, OperatorCounters],
    state: Mapping[str, tuple[int, int]],
    ms: float,
) -> dict[str, dict[str, Any]]:
    """Each stepped operator's part of a shard step: its rows in and out, the task's time
    split among the operators by their own step times (evenly if none took any), and its
    state after the commit (rows, bytes in memory and files)."""
    own = {i: ops[i].counters.step_ms - c.step_ms for i, c in before.items()}
    total = sum(own.values())
    return {
        i: {
            "rows_in": ops[i].counters.rows_in - c.rows_in,
            "rows_out": ops[i].counters.rows_out - c.rows_out,
            "ms": ms * own[i] / total if total > 0 else ms / len(before),
            "state_rows": state[i][0],
            "state_bytes": state[i][1],
        }
        for i, c in before.items()
    }


__all__ = ["ShardHost", "ShardStepError"]
