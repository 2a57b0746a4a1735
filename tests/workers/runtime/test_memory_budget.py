"""The spec's `engine.memory_budget` on real Spark: a SQL pipeline whose state is many times
its budget runs, keeps its state batches in memory within the budget (the rest spilled to
files), reports both in its step records, and writes, step by step, what the same pipeline
writes with a budget its state fits in: at parallelism 1 and, each shard with its own
budget, at parallelism 2."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from pipeline_spec.model import parse_spec
from storage_engine.schema import WEIGHT
from workers.runtime.run_builder import open_runner

Outputs = dict[int, Counter[tuple[Any, ...]]]  # a files sink's rows per step, consolidated

SMALL = 4 << 20  # the smallest budget a spec may give
FILES, ROWS = 5, 100_000  # each file's keys are new: the state grows every step


def _write_input(d: Path) -> None:
    d.mkdir()
    for f in range(FILES):
        keys = [f"customer-{f:02d}-{i:08d}-{'x' * 40}" for i in range(ROWS)]
        pq.write_table(pa.table({"k": keys, "v": list(range(ROWS))}), d / f"part-{f:04d}.parquet")


def _doc(tmp: Path, budget: int | str, parallelism: int) -> dict[str, Any]:
    return {
        "name": "budget",
        "tables": [
            {
                "kind": "files",
                "table": "t",
                "path": str(tmp / "in"),
                "format": "parquet",
                "schema": {"k": "string", "v": "bigint"},
                "max_files_per_step": 1,
            }
        ],
        "sql": "CREATE VIEW s AS SELECT k, count(*) AS n, sum(v) AS total FROM t GROUP BY k",
        "sinks": [
            {"name": "out", "kind": "files", "from": "s", "format": "parquet", "path": "out"}
        ],
        "checkpoint": {"every_steps": 1},
        "trigger": {"interval": "50ms"},
        "parallelism": parallelism,
        "engine": {"memory_budget": budget},
    }


def _run(
    tmp: Path, spark: SparkSession, budget: int | str, parallelism: int
) -> tuple[Outputs, list[dict[str, Any]]]:
    run = tmp / f"{budget}-{parallelism}"
    run.mkdir()
    (run / "in").symlink_to(tmp / "in")
    spec = parse_spec(_doc(run, budget, parallelism))
    r = open_runner(spec, str(run / "state"), base_dir=str(run), spark=spark)
    try:
        r.run(max_steps=FILES)
    finally:
        r.close()
    out: Outputs = {}
    for f in sorted((run / "out").rglob("*.parquet")):
        for row in pq.read_table(f).to_pylist():
            w, step = row.pop(WEIGHT), row.pop("__step")
            out.setdefault(step, Counter())[tuple(row.values())] += w
    lines = (run / "state" / "metrics.jsonl").read_text().splitlines()
    steps = [r for r in map(json.loads, lines) if "step" in r and "event" not in r]
    return out, steps


@pytest.fixture(scope="module")
def roomy(
    tmp_path_factory: pytest.TempPathFactory, spark: SparkSession
) -> tuple[Path, Outputs, list[dict[str, Any]]]:
    """The input, and the run with a budget its state fits in: its outputs and steps."""
    tmp = tmp_path_factory.mktemp("budget")
    _write_input(tmp / "in")
    return (tmp, *_run(tmp, spark, "1GiB", 1))


@pytest.mark.parametrize("parallelism", [1, 2])
def test_state_many_times_the_budget_spills_and_equals_a_roomy_run(
    roomy: tuple[Path, Outputs, list[dict[str, Any]]], spark: SparkSession, parallelism: int
) -> None:
    tmp, want, roomy_steps = roomy
    small, small_steps = _run(tmp, spark, SMALL, parallelism)
    assert small == want
    assert len(small) == FILES and all(len(c) == ROWS for c in small.values())
    budget = SMALL * parallelism  # each shard's own
    assert [s["memory_budget_bytes"] for s in small_steps] == [budget] * FILES
    assert [s["memory_budget_bytes"] for s in roomy_steps] == [1 << 30] * FILES
    last = small_steps[-1]
    # The state outgrew the budget ten times over, and each shard its own several times;
    # what is not in memory is in files.
    assert last["state_bytes"] >= 10 * SMALL, last
    for op in last["operators"].values():
        for shard in op.get("shards") or []:
            assert shard["state_bytes"] >= 3 * SMALL, shard
    assert all(s["memory_bytes"] <= budget for s in small_steps), [
        (s["memory_bytes"], s["state_bytes"]) for s in small_steps
    ]
    # With room, batches stay in memory (but for what merges write out as they go).
    assert max(s["memory_bytes"] for s in roomy_steps) > 4 * budget
