"""Partitioned levels on Spark (issue 50): `SparkLevels` steps a dataflow as the
in-process coordinator does, each shard in its own Spark partition."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession

from spindle_sql.dataflow import Dataflow
from spindle_sql.parse import parse
from spindle_sql.planner import plan
from workers.runtime.partitioned import PartitionedDataflow
from workers.runtime.partitioned.spark_levels import SparkLevels, salts

from .partitioned_check import outputs

TABLES = {"t": pa.schema([("k", pa.int64()), ("v", pa.int64())])}
VIEW = "CREATE VIEW s AS SELECT k, count(*) AS n, sum(v) AS total FROM t GROUP BY k"


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
