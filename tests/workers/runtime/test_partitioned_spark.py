"""A SQL pipeline partitioned on Spark (issue 50): at parallelism 2 its levels run as Spark
stages (`partitioned.SparkLevels`) and its sinks get, step by step, what the same pipeline
at parallelism 1 writes, also across a stop and a resume from the latest checkpoint at
parallelism 3 (a rescale: the driver's checkpoint carries the shards' manifest; the shards'
local copies removed, so they are pulled from the object store). Shard checkpoints no
driver checkpoint names are collected. And `SparkLevels` steps a dataflow as
the in-process coordinator does."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from backend.models import OperationKind
from pipeline_spec.model import parse_spec
from spindle_sql.dataflow import Dataflow
from spindle_sql.parse import parse
from spindle_sql.planner import plan
from storage_engine import StorageLocation
from storage_engine.objstore import DirectoryObjectStore, open_object_store
from storage_engine.remote import read_remote_manifest
from storage_engine.schema import WEIGHT
from workers.jobs import offline
from workers.runtime.dataflow_run import MANIFEST_KEY, ParallelismChangedError
from workers.runtime.partitioned import PartitionedDataflow
from workers.runtime.partitioned.collection import named
from workers.runtime.partitioned.figures import SHARD_STATE_KEY
from workers.runtime.partitioned.prefixed_store import PrefixedStore
from workers.runtime.partitioned.spark_levels import SparkLevels, salts
from workers.runtime.partitioned_run import PartitionedRunError
from workers.runtime.plan import sql_dataflow
from workers.runtime.run_builder import open_runner

from ... import customers
from .partitioned_check import outputs
from .test_sql_pipeline import oracle, run_and_resume, spec

TABLES = {"t": pa.schema([("k", pa.int64()), ("v", pa.int64())])}
VIEW = "CREATE VIEW s AS SELECT k, count(*) AS n, sum(v) AS total FROM t GROUP BY k"


def by_step(d: Path) -> dict[int, Counter[tuple[Any, ...]]]:
    """A files sink's rows per step, consolidated (weights of either sign, none zero)."""
    out: dict[int, Counter[tuple[Any, ...]]] = {}
    for f in sorted(d.iterdir()):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            w, step = r.pop(WEIGHT), r.pop("__step")
            out.setdefault(step, Counter())[tuple(r.values())] += w
    return {s: Counter({r: w for r, w in c.items() if w}) for s, c in out.items()}


def driver_manifests(state: Path) -> set[tuple[str, int, str]]:
    """Every (operator, shard, checkpoint) the driver's checkpoints' manifests name."""
    with StorageLocation.open(str(state), checkpoint="none", read_only=True) as loc:
        manifests = [loc.checkpoint_metadata(c.uuid)[MANIFEST_KEY] for c in loc.list_checkpoints()]
    return {(op, s, u) for (op, s), us in named(manifests).items() for u in us}


def latest_bases(state: Path) -> set[tuple[str, int, str]]:
    """The checkpoints each operator-shard's newest step started from (kept by its task)."""
    out = set()
    for d in (state / "shards").glob("*/*"):
        with StorageLocation.open(str(d), checkpoint="none", read_only=True) as loc:
            cps = loc.list_checkpoints()
            out |= {(d.parent.name, int(d.name), c.uuid) for c in cps[-2:]}
    return out


def shard_checkpoints(state: Path, store_url: str) -> set[tuple[str, int, str]]:
    """Every operator-shard checkpoint on disk and in the store."""
    store = open_object_store(store_url)
    out = set()
    for d in (state / "shards").glob("*/*"):
        op, s = d.parent.name, int(d.name)
        with StorageLocation.open(str(d), checkpoint="none", read_only=True) as loc:
            out |= {(op, s, c.uuid) for c in loc.list_checkpoints()}
        _, remote = read_remote_manifest(PrefixedStore(store, f"shards/{op}/{s}"))
        out |= {(op, s, c.uuid) for c in remote.checkpoints}
    return out


def test_salts_route_each_shard_to_its_partition(spark: SparkSession) -> None:
    for p in (2, 3, 7):
        got = salts(spark, p)
        df = spark.createDataFrame([(s, x) for s, x in enumerate(got)], "s int, x bigint")
        parts = df.repartition(p, "x").rdd.mapPartitionsWithIndex(
            lambda i, rows: [(i, r["s"]) for r in rows]
        )
        assert sorted(parts.collect()) == [(s, s) for s in range(p)]


def test_spark_levels_step_as_the_in_process_coordinator(
    tmp_path: Path, spark: SparkSession
) -> None:
    views = plan(parse(VIEW), TABLES)

    def make() -> Dataflow:
        return Dataflow(views)

    steps = [
        {"t": pa.table({"k": [i % 5 for i in range(n)], "v": list(range(n))}, schema=TABLES["t"])}
        for n in (7, 11, 3)
    ]
    local = PartitionedDataflow(make, 2, str(tmp_path / "local"))
    root = str(tmp_path / "spark")
    on_spark = PartitionedDataflow(make, 2, root, levels=SparkLevels(spark, make, root))
    for d in steps:
        assert outputs(on_spark.step(d)) == outputs(local.step(d))
    assert on_spark.checkpoint()["operators"].keys() == local.checkpoint()["operators"].keys()
    assert all(all(u) for u in on_spark.checkpoint()["operators"].values())


@pytest.mark.parametrize("shards", [2])
def test_a_partitioned_sql_pipeline_equals_parallelism_one_across_a_resume(
    tmp_path: Path, spark: SparkSession, shards: int
) -> None:
    customers.write_input(tmp_path / "in", 5, 60, customers=12, seed=7)
    got = {}
    for p in (1, shards):
        run = tmp_path / f"p{p}"
        run.mkdir()
        (run / "in").symlink_to(tmp_path / "in")
        s = parse_spec({**spec(run), "parallelism": p})
        if p == 1:
            run_and_resume(s, run, spark)
        else:
            # With an object store, which the resumed run's shards pull from: their local
            # copies are gone, as on executors that never held them.
            store = DirectoryObjectStore(tmp_path / "store")
            # The resume rescales the stopped pipeline: P=2 to P=3.
            for steps, p_run in ((3, shards), (None, shards + 1)):
                s = parse_spec({**spec(run), "parallelism": p_run})
                r = open_runner(s, str(run / "state"), base_dir=str(run), spark=spark, remote=store)
                try:
                    r.run(max_steps=steps, stop_when_idle=2.0)
                finally:
                    r.close()
                if steps is not None:
                    assert (run / "state" / "shards").is_dir()
                    shutil.rmtree(run / "state" / "shards")
        got[p] = {sink: by_step(run / sink) for sink in ("a", "b")}
    assert got[shards] == got[1]
    assert len(got[1]["a"]) == 5
    # Both views equal the batch query over the whole input.
    for sink, view in (("a", "per_customer"), ("b", "big_orders")):
        total: Counter[tuple[Any, ...]] = Counter()
        for c in got[shards][sink].values():
            total.update(c)
        assert +total == oracle(tmp_path, view)
    # The driver's checkpoint names every operator-shard's checkpoint.
    fingerprint = sql_dataflow(s.model_dump_json(by_alias=True)).fingerprint
    loc = StorageLocation.open(
        str(tmp_path / f"p{shards}" / "state"), fingerprint=fingerprint, read_only=True
    )
    try:
        manifest = loc.metadata[MANIFEST_KEY]
        shard_state = loc.metadata[SHARD_STATE_KEY]
    finally:
        loc.close()
    assert manifest["shards"] == shards + 1
    assert set(manifest["operators"]) == {"per_customer.agg0", "big_orders.join0"}
    assert all(len(u) == shards + 1 and all(u) for u in manifest["operators"].values())
    assert (tmp_path / f"p{shards}" / "state" / "shards" / "per_customer.agg0" / "1").is_dir()
    assert any((tmp_path / "store" / "shards" / "big_orders.join0" / "0").rglob("*.manifest"))
    # Each step's record sums the operators' rows over their shards, as at parallelism 1.
    records = {}
    for p in (1, shards):
        lines = (tmp_path / f"p{p}" / "state" / "metrics.jsonl").read_text().splitlines()
        steps = {r["step"]: r for r in map(json.loads, lines) if "event" not in r and "step" in r}
        records[p] = [steps[i] for i in sorted(steps)]
    rows_in = {
        p: [{op: m["rows_in"] for op, m in r["operators"].items()} for r in records[p]]
        for p in (1, shards)
    }
    # An aggregate's rows arrive consolidated by each sending task (equal rows of the
    # columns it reads summed), so at most as many as at parallelism 1; a join's all.
    for got, want in zip(rows_in[shards], rows_in[1], strict=True):
        assert got.keys() == want.keys()
        assert got["big_orders.join0"] == want["big_orders.join0"]
        assert (
            0 < got["per_customer.agg0"] <= want["per_customer.agg0"]
            or not want["per_customer.agg0"]
        )
    # ... and has each shard's part: rows, time and state (a shard's state as of the newest
    # step that stepped it; in the driver's checkpoints too, from where a resumed run starts).
    assert all("shards" not in m for r in records[1] for m in r["operators"].values())
    for r in records[shards]:
        for op, m in r["operators"].items():
            # P=2, then P=3 after the rescale
            n = len(m["shards"])
            assert n in (shards, shards + 1), (r["step"], op)
            assert [x["shard"] for x in m["shards"]] == list(range(n)), (r["step"], op)
            for k in ("rows_in", "rows_out", "state_rows", "state_bytes"):
                assert m[k] == sum(x[k] for x in m["shards"]), (r["step"], op, k)
        # The pipeline's state is its shards'.
        assert r["state_bytes"] >= sum(m["state_bytes"] for m in r["operators"].values()) > 0
    last = records[shards][-1]["operators"]
    assert all(len(m["shards"]) == shards + 1 for m in last.values())
    assert all(x["state_bytes"] > 0 for m in last.values() for x in m["shards"])
    assert sorted(shard_state) == sorted(manifest["operators"])
    assert all(len(v) == shards + 1 and all(x > 0 for x, _ in v) for v in shard_state.values())
    # Shard checkpoints that no driver checkpoint names are collected, as steps go and by
    # an offline gc (in the store too); the newest checkpoint still resumes.
    run_state = tmp_path / f"p{shards}" / "state"
    store_url = f"file://{tmp_path / 'store'}"
    named_now = driver_manifests(run_state) | latest_bases(run_state)
    assert shard_checkpoints(run_state, store_url) <= named_now
    done = offline._do(
        run_state, store_url, s.model_dump(by_alias=True), OperationKind.gc, {"keep": 1}, set()
    )
    assert done["deleted"]
    assert shard_checkpoints(run_state, store_url) == driver_manifests(run_state)
    shutil.rmtree(run_state / "shards")
    r = open_runner(
        s, str(run_state), base_dir=str(tmp_path / f"p{shards}"), spark=spark, remote=store
    )
    try:
        r.run(max_steps=None, stop_when_idle=1.0)
    finally:
        r.close()
    # Its checkpoints are refused at parallelism 1 (their state is in the shards), and at
    # parallelism 1's at 2 (rescaling is not built yet).
    for p, other in ((1, shards), (shards, 1)):
        s = parse_spec({**spec(tmp_path / f"p{other}"), "parallelism": p})
        state = str(tmp_path / f"p{other}" / "state")
        with pytest.raises((ParallelismChangedError, PartitionedRunError), match="parallelism"):
            open_runner(s, state, base_dir=str(tmp_path / f"p{other}"), spark=spark).close()


def test_a_malformed_record_is_read_by_spark_and_the_step_goes_on(
    tmp_path: Path, spark: SparkSession
) -> None:
    """Level 0's tasks read the files (the driver only plans them); a step whose file has
    a malformed record goes to Spark's reader in the driver, as at parallelism 1: the same
    output step by step, and the same dead letters."""
    customers.write_input(tmp_path / "in", 3, 40, customers=6, seed=3)
    bad = tmp_path / "in" / "part-0001.json"
    bad.write_text(bad.read_text() + '{"customer": "c1", "amount": \n')
    got, letters = {}, {}
    for p in (1, 2):
        run = tmp_path / f"p{p}"
        run.mkdir()
        (run / "in").symlink_to(tmp_path / "in")
        r = open_runner(
            parse_spec({**spec(run), "parallelism": p}),
            str(run / "state"),
            base_dir=str(run),
            spark=spark,
        )
        try:
            r.run(max_steps=None, stop_when_idle=1.0)
        finally:
            r.close()
        got[p] = {sink: by_step(run / sink) for sink in ("a", "b")}
        letters[p] = sorted(
            (f.name, f.read_text().replace(str(run), "<run>"))
            for f in (run / "state" / "dead-letters").iterdir()
        )
    assert got[2] == got[1] and len(got[1]["b"]) == 3
    assert letters[2] == letters[1] and len(letters[1]) == 1
