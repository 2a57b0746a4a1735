"""The driver's side of partitioned steps (issue 50): a step makes every level's shard
requests and has its `Levels` run them, level by level, and gathers the views' deltas.
`HostLevels` runs each level's shards one after the other in this process, routing their
messages by destination as a shuffle would; `spark_levels.SparkLevels` runs the levels as
Spark stages.

The coordinator tracks the checkpoint every operator-shard's state is at and the
watermarks; `checkpoint()` names them all in a manifest (a plain dict), from which `open`
resumes, exactly (the driver's storage location will keep these manifests as checkpoint
metadata). The watermarks are advanced from level 0's records as every shard advances
them, so the manifest's are the shards'.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Protocol

import pyarrow as pa

from spindle_sql.dataflow import Dataflow
from spindle_sql.partitioning import DRIVER, WATERMARKS, Partitioning, output_port
from spindle_sql.shard_level import level_zero_inputs
from storage_engine import EngineSettings
from storage_engine.circuit.operator import empty_delta, weighted
from storage_engine.fileio import FileLayer
from storage_engine.key_groups import DEFAULT_KEY_GROUPS, group_starts
from storage_engine.objstore import ObjectStoreLike

from ..micro_batch import MicroBatch
from .collection import Named, local_pairs, named, sweep
from .messages import FROM_DRIVER, by_destination, decode, encode
from .reads import TableReads, gathered, unmatched
from .rescale import rescale
from .shard_host import ShardHost

MANIFEST_FORMAT = 1


class Levels(Protocol):
    """What runs a step's levels: every shard's step of level 0, then of level 1, ..."""

    def run(
        self,
        requests: list[list[dict[str, Any]]],
        first: Mapping[int, pa.Table],
        reads: Mapping[str, TableReads] | None = None,
    ) -> tuple[list[pa.Table], list[dict[str, Any]]]:
        """Run `requests[level][shard]` (`ShardHost.step`'s requests) level by level, level
        0's shard s on the messages `first[s]` (none: no rows) and its share of `reads`,
        and every later task on the messages the levels before sent it. Returns the
        messages sent to the driver and every task's result (`ShardHost.step`'s, with its
        "level" and "shard"), in any order."""
        ...


class HostLevels:
    """The levels in this process, on one host, each level's shards one after the other,
    their messages routed by destination as a shuffle would."""

    def __init__(self, host: ShardHost) -> None:
        self.host = host

    def run(
        self,
        requests: list[list[dict[str, Any]]],
        first: Mapping[int, pa.Table],
        reads: Mapping[str, TableReads] | None = None,
    ) -> tuple[list[pa.Table], list[dict[str, Any]]]:
        pending = {(0, s): m for s, m in first.items()}
        to_driver: list[pa.Table] = []
        results = []
        for level, tasks in enumerate(requests):
            outputs = []
            for s, request in enumerate(tasks):
                messages = pending.pop((level, s), None)
                if messages is None:
                    messages = encode({}, FROM_DRIVER)
                out, result = self.host.step(request, messages, reads if level == 0 else None)
                outputs.append(out)
                results.append({"level": level, "shard": s, **result})
            for (lv, s), messages in by_destination(outputs).items():
                if lv == DRIVER:
                    to_driver.append(messages)
                else:
                    pending[(lv, s)] = _joined(pending.get((lv, s)), messages)
        return to_driver, results


class ManifestError(ValueError):
    """A manifest that this coordinator cannot resume (another plan, K or P)."""


class PartitionedDataflow:
    """`factory`'s dataflow stepped in `shards` shards over `key_groups` key groups, its
    state under `root` (and `store`). `host`: this process's host of shard steps (default:
    one of its own); `levels`: what runs the levels' shard steps (default: `host`, one
    after the other; `spark_levels.SparkLevels`: Spark tasks)."""

    def __init__(
        self,
        factory: Callable[[], Dataflow],
        shards: int,
        root: str,
        *,
        key_groups: int = DEFAULT_KEY_GROUPS,
        store: ObjectStoreLike | None = None,
        settings: EngineSettings | None = None,
        fs: FileLayer | None = None,
        host: ShardHost | None = None,
        levels: Levels | None = None,
        retain: Callable[[], Iterable[Mapping[str, Any]]] | None = None,
        outputs: Collection[str] | None = None,
    ) -> None:
        group_starts(shards, key_groups)  # validates both
        self.factory = factory
        self.flow = factory()  # the driver's copy: views, schemas and watermarks
        self.part = Partitioning(self.flow)
        self.shards, self.key_groups = shards, key_groups
        self.host = host or ShardHost(root, store, settings, fs)
        self.plan = self.part.identity
        self.host.register(self.plan, factory)
        self.levels: Levels = levels or HostLevels(self.host)
        self.checkpoints: dict[str, list[str | None]] = {
            op: [None] * shards for op in self.part.operators()
        }
        self.step_id = 0
        self.first = True
        self.last_metrics: list[dict[str, Any]] = []
        self.last_unmatched: dict[str, pa.Table] = {}  # the last step's, per upserted table
        self.last_reads: dict[str, MicroBatch] = {}  # per table level 0 read: the last step's
        self.retain = retain
        self.outputs = None if outputs is None else sorted(outputs)
        self._kept: Named | None = None  # what the last step or sweep kept

    @property
    def fingerprint(self) -> str:
        return self.flow.fingerprint

    def step(
        self,
        deltas: Mapping[str, pa.Table | pa.RecordBatch],
        reads: Mapping[str, TableReads] | None = None,
        proctime_us: int | None = None,
    ) -> dict[str, pa.Table]:
        """Every view's delta for these input deltas and the tables level 0's tasks read
        (`reads`, whose figures are in `last_reads` then), as `Dataflow.step` gives it
        (`proctime_us`: the step's processing time, which every level's tasks evaluate
        PROCTIME() as)."""
        step = self.step_id + 1
        watermarks = self.flow.watermarks.state()
        given = {name: weighted(t) for name, t in deltas.items()}
        pending = {
            s: encode({(0, s): dict(ports)}, FROM_DRIVER)
            for s, ports in level_zero_inputs(given, self.shards).items()
        }
        checkpoints = {op: list(uids) for op, uids in self.checkpoints.items()}
        kept = self._keep()
        # Every level's requests are known before the first runs: a level's bases are its
        # own operators' checkpoints, which no other level changes.
        requests = [
            [
                {
                    "plan": self.plan,
                    "level": level,
                    "shard": s,
                    "shards": self.shards,
                    "key_groups": self.key_groups,
                    "step": step,
                    "first": self.first,
                    "sources": self.shards,  # level 0's tasks: one per shard here
                    "watermarks": watermarks,
                    **({} if self.outputs is None else {"outputs": self.outputs}),
                    **({} if proctime_us is None else {"proctime_us": proctime_us}),
                    "bases": {op: checkpoints[op][s] for op in self.part.operators_at(level)},
                    **(
                        {}
                        if kept is None
                        else {
                            "keep": {
                                op: sorted(kept.get((op, s), ()))
                                for op in self.part.operators_at(level)
                            }
                        }
                    ),
                }
                for s in range(self.shards)
            ]
            for level in range(self.part.levels)
        ]
        to_driver, results = self.levels.run(requests, pending, reads)
        metrics = []
        touched: set[tuple[str, int]] = set()
        for r in sorted(results, key=lambda r: (int(r["level"]), int(r["shard"]))):
            for op, uid in r["checkpoints"].items():
                if uid != checkpoints[op][int(r["shard"])]:
                    touched.add((op, int(r["shard"])))
                checkpoints[op][int(r["shard"])] = uid
            metrics.append({"level": r["level"], "shard": r["shard"], **r["metrics"]})
        got = decode(pa.concat_tables(to_driver)) if to_driver else {}
        self.last_reads = gathered(reads or {}, [r.get("read", {}) for r in results], got)
        self.last_unmatched = unmatched(got)
        self._advance(watermarks, got.get(WATERMARKS, []))
        out = {}
        for name, view in self.flow.views.items():
            rows = got.get(output_port(name))
            if rows is None:
                rows = empty_delta(view.root.schema)
            out[name] = self.flow.view_delta(name, rows)
        self.checkpoints, self.step_id, self.first = checkpoints, step, False
        self.last_metrics = metrics
        if kept is not None:
            self._collect_untouched(kept, touched, step)
        return out

    def _keep(self) -> Named | None:
        """What the shard steps keep: the checkpoints the current state and the retained
        manifests name."""
        if self.retain is None:
            return None
        return named([self.checkpoint(), *self.retain()])

    def _collect_untouched(self, kept: Named, touched: set[tuple[str, int]], step: int) -> None:
        """The checkpoints of operator-shards no task of the step touched that the kept
        manifests named before and no longer do (their tasks collect the touched ones)."""
        before, self._kept = self._kept, kept
        if before is None:
            return
        dropped = [
            pair
            for pair, uids in before.items()
            if pair not in touched and uids - kept.get(pair, set())
        ]
        if dropped:
            sweep(self.host.states, kept, dropped, below_step=step)

    def sweep(self) -> int:
        """Collect every operator-shard's checkpoints that neither the current state nor
        a retained manifest names, also those of shards no manifest names that have a
        directory here (a crashed run's); returns how many. Only while no step runs."""
        kept = named([self.checkpoint(), *(self.retain() if self.retain else ())])
        pairs = {(op, s) for op in self.checkpoints for s in range(self.shards)}
        n = sweep(self.host.states, kept, pairs | set(kept) | set(local_pairs(self.host.states)))
        self._kept = kept
        return n

    def _advance(self, before: Mapping[str, Any], records: Iterable[Mapping[str, Any]]) -> None:
        """The watermarks after the step, from level 0's records, as every shard has them."""
        wm = self.flow.watermarks
        wm.restore(before)
        for r in records:
            wm.note(r.get("newest", {}))
            for table, n in r.get("late", {}).items():
                wm.late_rows[table] += int(n)
        wm.advance()

    def checkpoint(self) -> dict[str, Any]:
        """The manifest of the state after the last step: every operator-shard's
        checkpoint, the watermarks, P and K (JSON)."""
        return {
            "format": MANIFEST_FORMAT,
            "step": self.step_id,
            "first": self.first,
            "fingerprint": self.fingerprint,
            "key_groups": self.key_groups,
            "shards": self.shards,
            "watermarks": self.flow.watermarks.state(),
            "operators": {op: list(uids) for op, uids in self.checkpoints.items()},
        }

    def open(self, manifest: Mapping[str, Any]) -> None:
        """Continue from the state a manifest names (its operator-shards are opened at its
        checkpoints by the next step); one of another P is rescaled first (`rescale.py`),
        which only a stopped pipeline may do: no step of it may run meanwhile."""
        if manifest.get("format") != MANIFEST_FORMAT:
            raise ManifestError(
                f"manifest format {manifest.get('format')!r} is not {MANIFEST_FORMAT}"
            )
        for field, mine in (
            ("fingerprint", self.fingerprint),
            ("key_groups", self.key_groups),
        ):
            if manifest.get(field) != mine:
                raise ManifestError(
                    f"the manifest's {field} is {manifest.get(field)!r}, this dataflow's {mine!r}"
                )
        ops = manifest["operators"]
        if sorted(ops) != sorted(self.checkpoints):
            raise ManifestError(f"the manifest names the operators {sorted(ops)}")
        if manifest.get("shards") != self.shards:
            manifest = rescale(manifest, self.factory, self.shards, self.host.states)
        self.checkpoints = {op: list(uids) for op, uids in manifest["operators"].items()}
        self.step_id = int(manifest["step"])
        self.first = bool(manifest["first"])
        self.flow.watermarks.restore(manifest["watermarks"])

    def close(self) -> None:
        self.host.close()


def _joined(a: pa.Table | None, b: pa.Table) -> pa.Table:
    return b if a is None else pa.concat_tables([a, b])


__all__ = ["MANIFEST_FORMAT", "HostLevels", "Levels", "ManifestError", "PartitionedDataflow"]
