"""A partitioned step's levels as Spark stages (issue 50): `SparkLevels` runs what
`coordinator.HostLevels` runs in one process, as one Spark job.

The driver makes one DataFrame of level 0's messages (input the driver read, split by
shard; level 0's tasks read the rest from their splits, `reads.py`) and of every level's
requests, one message per (level, shard) on the port `REQUEST`. Then, for
each level, the rows are repartitioned so that shard s's rows land in partition s, and
`mapInArrow` runs `ShardHost.step` on the level's rows of its partition: its request and
the messages sent to it. The task's messages go on to the next stage; its result (the
operator-shards' new checkpoints, its metrics) travels as a message on the port `RESULT`,
and rows for later levels or for the driver pass through. One `toArrow` at the end brings
the driver its messages and every task's result.

Routing: `repartition(P, salt)` puts a row in partition `pmod(hash(salt), P)`; each row's
`salt` is one of `salts(P)`, chosen so that this is the row's shard (`groupBy(shard)`
could put two shards in one partition). A task that finds two requests of its level fails
the step rather than step the wrong shard.

Each task opens its operator-shards from their bases (local disk, or lazily the object
store), steps, commits and closes them (`ShardHost.evict`): two Python workers never hold
one location (the engine's lock is per process), and no step depends on where the shard
ran before. A Python worker keeps its host and the plan's dataflows between tasks (by
root and plan identity), rebuilt from the factory the task carries (for a pipeline: its
spec's JSON, `plan.sql_dataflow`), and opens the object store from its recipe
(`store_recipe`: its settings, never a client or a lock).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spindle_sql.dataflow import Dataflow
from spindle_sql.partitioning import DRIVER, Partitioning
from storage_engine import EngineSettings
from storage_engine.forks import SharedStore
from storage_engine.objstore import DirectoryObjectStore, ObjectStore, ObjectStoreLike

from .messages import FROM_DRIVER, SCHEMA
from .prefixed_store import PrefixedStore
from .reads import TableReads
from .shard_host import ShardHost

StoreRecipe = Callable[[], ObjectStoreLike]

REQUEST = "\x00request"
RESULT = "\x00result"
SALT = "salt"
ROWS = pa.schema([*SCHEMA, pa.field(SALT, pa.int64(), False)])
_DDL = "level int, shard int, source int, port string, data binary, salt bigint"

_salts: dict[int, list[int]] = {}
_hosts: dict[str, ShardHost] = {}
_lock = threading.Lock()


class PartitioningError(RuntimeError):
    """A Spark partition that holds another shard's rows, or two shards'."""


def salts(spark: SparkSession, partitions: int) -> list[int]:
    """For each partition s, a bigint that `repartition(partitions, col)` sends to s."""
    got = _salts.get(partitions)
    if got is None:
        found: dict[int, int] = {}
        n = 64 * partitions
        while len(found) < partitions:
            rows = (
                spark.range(0, n)
                .select("id", F.expr(f"pmod(hash(id), {partitions})").alias("p"))
                .collect()
            )
            for r in rows:
                found.setdefault(int(r["p"]), int(r["id"]))
            n *= 4
        got = _salts[partitions] = [found[s] for s in range(partitions)]
    return got


def store_recipe(store: ObjectStoreLike) -> StoreRecipe:
    """How an executor opens `store` again (a store holds locks and clients, which do
    not travel): an S3 store from its settings, a directory store from its root."""
    if isinstance(store, SharedStore):  # a tier's view with what it borrows: re-made there
        return store_recipe(store.own)
    if isinstance(store, PrefixedStore):
        return partial(_prefixed, store_recipe(store.inner), store.prefix)
    if isinstance(store, DirectoryObjectStore):
        return partial(DirectoryObjectStore, store.root, store.settings)
    if isinstance(store, ObjectStore):
        return partial(ObjectStore, store.settings)
    raise TypeError(f"executors cannot open an object store of type {type(store).__name__}")


def _prefixed(inner: StoreRecipe, prefix: str) -> ObjectStoreLike:
    return PrefixedStore(inner(), prefix)


class SparkLevels:
    """The levels of `factory`'s dataflow as Spark stages of `spark`, its operator-shards
    under `root` (and `store`) on every executor."""

    def __init__(
        self,
        spark: SparkSession,
        factory: Callable[[], Dataflow],
        root: str,
        store: ObjectStoreLike | None = None,
        settings: EngineSettings | None = None,
    ) -> None:
        self.spark = spark
        self.factory = factory
        self.root = root
        self.settings = settings or EngineSettings()
        self.store = store_recipe(store) if store is not None else None
        self.plan = Partitioning(factory()).identity

    def run(
        self,
        requests: list[list[dict[str, Any]]],
        first: Mapping[int, pa.Table],
        reads: Mapping[str, TableReads] | None = None,
    ) -> tuple[list[pa.Table], list[dict[str, Any]]]:
        shards = len(requests[0])
        salt = salts(self.spark, shards)
        # No empty part: Spark 4.0's createDataFrame of an Arrow table whose first chunk is
        # empty gave no rows at all.
        parts = [_salted(m, salt) for m in first.values() if m.num_rows]
        asks = [
            (lv, s, json.dumps(r)) for lv, tasks in enumerate(requests) for s, r in enumerate(tasks)
        ]
        parts.append(
            pa.Table.from_arrays(
                [
                    pa.array([a[0] for a in asks], pa.int32()),
                    pa.array([a[1] for a in asks], pa.int32()),
                    pa.array([FROM_DRIVER] * len(asks), pa.int32()),
                    pa.array([REQUEST] * len(asks), pa.string()),
                    pa.array([a[2].encode() for a in asks], pa.binary()),
                    pa.array([salt[a[1]] for a in asks], pa.int64()),
                ],
                schema=ROWS,
            )
        )
        df: DataFrame = self.spark.createDataFrame(pa.concat_tables(parts))
        for level in range(len(requests)):
            task = partial(
                _task,
                level,
                self.plan,
                self.factory,
                self.root,
                self.store,
                self.settings,
                salt,
                dict(reads or {}) if level == 0 else None,
            )
            df = df.repartition(shards, SALT).mapInArrow(task, _DDL)
        got = df.toArrow()
        port = np.asarray(got.column("port").to_pylist(), dtype=object)
        is_result = port == RESULT
        results = [
            json.loads(d) for d in got.filter(pa.array(is_result)).column("data").to_pylist()
        ]
        rest = got.filter(pa.array(~is_result))
        if any(lv != DRIVER for lv in rest.column("level").to_pylist()):
            raise PartitioningError("messages for a level that did not run")
        return [rest.select(SCHEMA.names).cast(SCHEMA)], results


def _salted(messages: pa.Table, salt: list[int]) -> pa.Table:
    shard = messages.column("shard").to_numpy()
    s = np.asarray(salt, np.int64)[np.maximum(shard, 0)]
    return messages.cast(SCHEMA).append_column(pa.field(SALT, pa.int64(), False), pa.array(s))


def _host(root: str, store: StoreRecipe | None, settings: EngineSettings) -> ShardHost:
    """This process's host of the shards under `root`: a new one when the run's engine
    settings changed (a restart with another `engine` in its spec)."""
    with _lock:
        host = _hosts.get(root)
        if host is not None and host.states.settings != settings:
            host.close()
            host = None
        if host is None:
            host = _hosts[root] = ShardHost(root, store() if store is not None else None, settings)
        return host


def _task(
    level: int,
    plan: str,
    factory: Callable[[], Dataflow],
    root: str,
    store: StoreRecipe | None,
    settings: EngineSettings,
    salt: list[int],
    reads: Mapping[str, TableReads] | None,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """One Spark task of `level`: its shard's step, the other rows passed on."""
    got = list(batches)
    if not got:
        return
    rows = pa.Table.from_batches(got).cast(ROWS)
    mine = pa.compute.equal(rows.column("level"), level)
    yield from rows.filter(pa.compute.invert(mine)).to_batches()
    here = rows.filter(mine)
    if not here.num_rows:
        return
    is_request = pa.compute.equal(here.column("port"), REQUEST)
    asks = here.filter(is_request)
    shards = set(here.column("shard").to_pylist())
    context = TaskContext.get()
    partition = context.partitionId() if context is not None else None
    if asks.num_rows != 1 or len(shards) != 1:
        raise PartitioningError(
            f"partition {partition} of level {level} holds the shards {sorted(shards)}"
        )
    request = json.loads(asks.column("data")[0].as_py())
    messages = here.filter(pa.compute.invert(is_request)).select(SCHEMA.names).cast(SCHEMA)
    host = _host(root, store, settings)
    host.register(plan, factory)
    try:
        out, result = host.step(request, messages, reads)
    finally:
        host.evict()
    yield from _salted(out, salt).to_batches()
    shard = int(request["shard"])
    record = json.dumps({"level": level, "shard": shard, **result}).encode()
    yield pa.RecordBatch.from_arrays(
        [
            pa.array([DRIVER], pa.int32()),
            pa.array([shard], pa.int32()),
            pa.array([shard], pa.int32()),
            pa.array([RESULT], pa.string()),
            pa.array([record], pa.binary()),
            pa.array([salt[shard]], pa.int64()),
        ],
        schema=ROWS,
    )


__all__ = ["REQUEST", "RESULT", "PartitioningError", "SparkLevels", "salts", "store_recipe"]
