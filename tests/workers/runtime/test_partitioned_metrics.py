"""A partitioned dataflow's figures per operator-shard (issue 50): each shard step reports,
per operator it stepped, its rows in and out, its part of the task's time and its state
after the commit; a run sums them per (operator, shard) over its steps and carries each
shard's state across steps that do not touch it and across a checkpoint; each step's
metrics record has every shard's part. In process (`HostLevels`), no Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spindle_sql.dataflow import Dataflow
from spindle_sql.parse import parse
from spindle_sql.partitioning import table_port
from spindle_sql.planner import plan
from spindle_sql.shard_level import level_zero_inputs
from storage_engine import EngineSettings, StorageLocation
from storage_engine.circuit import OperatorMetrics
from storage_engine.key_groups import DEFAULT_KEY_GROUPS, shards_of
from workers.runtime.dataflow_run import DataflowRun
from workers.runtime.partitioned import PartitionedDataflow, ShardHost
from workers.runtime.partitioned.figures import ShardFigures
from workers.runtime.run_metrics import RunMetrics, StepTimes

from .partitioned_check import FS

TABLES = {"t": pa.schema([("k", pa.int64()), ("v", pa.int64())])}
VIEWS = """
CREATE VIEW per_k AS SELECT k, count(*) AS n, sum(v) AS total FROM t GROUP BY k;
CREATE VIEW per_m AS SELECT v % 3 AS m, count(*) AS n FROM t GROUP BY v % 3
"""
P = 3
# No merges: a spine's rows are then the sum of its batches', the same whichever process
# holds them (merges run in the background, whenever).
SETTINGS = EngineSettings(memory_budget_bytes=1 << 20, merge_fanout=64)


def make() -> Dataflow:
    return Dataflow(plan(parse(VIEWS), TABLES))


def steps() -> list[dict[str, pa.Table]]:
    """Keys 0..9, again and again (updates: retractions in the state), a skew towards 0."""
    out = []
    for n in (17, 5, 23, 9):
        ks = [0 if i % 3 == 0 else i % 10 for i in range(n)]
        out.append({"t": pa.table({"k": ks, "v": list(range(n))}, schema=TABLES["t"])})
    return out


def coordinator(root: Path) -> PartitionedDataflow:
    host = ShardHost(str(root), settings=SETTINGS, fs=FS)
    return PartitionedDataflow(make, P, str(root), host=host)


def per_shard_oracle(tmp_path: Path, op: str) -> list[list[OperatorMetrics]]:
    """For each shard s, the single-process dataflow's `operator_metrics()` of `op` after
    each step and its commit, fed only the rows whose key `k` shard s owns: what shard s
    must report."""
    got = []
    for s in range(P):
        flow = make()
        loc = StorageLocation.open(
            str(tmp_path / f"plain{s}"), fingerprint=flow.fingerprint, settings=SETTINGS, fs=FS
        )
        run = DataflowRun(flow)
        run.open(loc)
        try:
            seen = []
            for i, d in enumerate(steps(), start=1):
                t = d["t"]
                mine = shards_of(t, ["k"], P, DEFAULT_KEY_GROUPS) == s
                run.step({"t": t.filter(pa.array(mine))})
                run.commit_async(i).wait_local()  # as a shard step commits
                seen.append(run.operator_metrics()[op])
            got.append(seen)
        finally:
            loc.close()
    return got


def test_shard_steps_report_each_operator_shards_rows_time_and_state(tmp_path: Path) -> None:
    part = coordinator(tmp_path / "p")
    ops = sorted(part.checkpoints)
    per_k = next(op for op in ops if op.startswith("per_k."))
    oracle = per_shard_oracle(tmp_path, per_k)
    consolidated = 0
    try:
        for i, d in enumerate(steps()):
            part.step(d)
            tasks = part.last_metrics
            assert sorted((t["level"], t["shard"]) for t in tasks) == [
                (lv, s) for lv in range(part.part.levels) for s in range(P)
            ]
            by_shard: dict[str, dict[int, dict[str, Any]]] = {}
            for t in tasks:
                figures = t["operators"]
                for op, m in figures.items():
                    by_shard.setdefault(op, {})[t["shard"]] = m
                    assert m["ms"] >= 0
                # The task's time is its operators' (none: nothing to split).
                if figures:
                    assert sum(m["ms"] for m in figures.values()) == pytest.approx(t["ms"])
            # The shards that own some of the step's keys stepped, the others did not.
            fed = set(shards_of(d["t"], ["k"], P, DEFAULT_KEY_GROUPS).tolist())
            assert sorted(by_shard) == ops and sorted(by_shard[per_k]) == sorted(fed)
            for s in sorted(fed):
                want, got = oracle[s][i], by_shard[per_k][s]
                before = oracle[s][i - 1] if i else OperatorMetrics(0, 0, 0.0, 0, 0)
                assert (got["rows_in"], got["rows_out"]) == (
                    want.rows_in - before.rows_in,
                    want.rows_out - before.rows_out,
                ), f"step {i + 1}, shard {s}"
                assert (got["state_rows"], got["state_bytes"]) == (
                    want.state_rows,
                    want.state_bytes,
                ), f"step {i + 1}, shard {s}"
            # The skew shows: the shard owning key 0 has the most rows.
            rows = [by_shard[per_k][s]["rows_in"] if s in fed else 0 for s in range(P)]
            owner = int(shards_of(pa.table({"k": [0]}), ["k"], P, DEFAULT_KEY_GROUPS)[0])
            assert rows[owner] == max(rows) and rows[owner] > min(rows)
            per_m = next(op for op in ops if op.startswith("per_m."))
            # An aggregate's rows arrive consolidated by each sending task (the columns it
            # reads, equal rows' weights summed): per_m reads m alone, so each level-0 task
            # sends one row per m it saw.
            sent = sum(
                len({v % 3 for v in piece[table_port("t")].column("v").to_pylist()})
                for piece in level_zero_inputs(d, P).values()
                if piece
            )
            assert sum(m["rows_in"] for m in by_shard[per_m].values()) == sent
            consolidated += d["t"].num_rows - sent
        assert consolidated > 0, "no rows were consolidated: proves nothing"
    finally:
        part.close()


def test_a_runs_figures_sum_its_shards_and_carry_untouched_state(tmp_path: Path) -> None:
    """`ShardFigures` over a coordinator's steps, through the run's metrics record: each
    step's per-shard rows, time and state; a shard that a step does not touch keeps its
    state; the operator's figures are its shards' sums; a checkpoint's state figures
    restore."""
    part = coordinator(tmp_path / "p")
    ops = sorted(part.checkpoints)
    figures = ShardFigures(ops, P)
    got: list[dict[str, Any]] = []
    metrics = RunMetrics(str(tmp_path / "metrics.jsonl"), [got.append])
    only_key_0 = {"t": pa.table({"k": [0, 0], "v": [7, 8]}, schema=TABLES["t"])}
    owner = int(shards_of(pa.table({"k": [0]}), ["k"], P, DEFAULT_KEY_GROUPS)[0])
    times = StepTimes(0.0, 0.0, 0.0, 0.0, None)
    try:
        for step, d in enumerate([*steps()[:2], only_key_0], start=1):
            part.step(d)
            figures.add(part.last_metrics)
            metrics.step(step, (0, 0, 0, 0), times, [], figures.operator_metrics())
            tasks = {
                (op, t["shard"]): m for t in part.last_metrics for op, m in t["operators"].items()
            }
            for op in ops:
                rec = got[-1]["operators"][op]
                shards = rec["shards"]
                assert [x["shard"] for x in shards] == list(range(P))
                for s, x in enumerate(shards):
                    m = tasks.get((op, s))
                    if m is None:  # not stepped: nothing in, its state as it was
                        assert (x["rows_in"], x["rows_out"], x["step_ms"]) == (0, 0, 0.0)
                        none = {"state_rows": 0, "state_bytes": 0}
                        before = got[-2]["operators"][op]["shards"][s] if step > 1 else none
                        assert (x["state_rows"], x["state_bytes"]) == (
                            before["state_rows"],
                            before["state_bytes"],
                        )
                    else:
                        assert (x["rows_in"], x["rows_out"]) == (m["rows_in"], m["rows_out"])
                        assert x["step_ms"] == pytest.approx(m["ms"], abs=0.001)
                        assert (x["state_rows"], x["state_bytes"]) == (
                            m["state_rows"],
                            m["state_bytes"],
                        )
                for k in ("rows_in", "rows_out", "state_rows", "state_bytes"):
                    assert rec[k] == sum(x[k] for x in shards), (op, k)
                assert rec["step_ms"] == pytest.approx(sum(x["step_ms"] for x in shards), abs=0.01)
        # The last step fed key 0 only: its aggregate's other shards were not stepped.
        per_k = next(op for op in ops if op.startswith("per_k."))
        last = got[-1]["operators"][per_k]["shards"]
        assert [x["rows_in"] > 0 for x in last] == [s == owner for s in range(P)]
        assert all(x["state_rows"] > 0 for x in last)
        # The totals over the run are the sums of the steps'.
        total = figures.operator_metrics()[per_k]
        for s in range(P):
            assert total.shards[s].rows_in == sum(
                r["operators"][per_k]["shards"][s]["rows_in"] for r in got
            )
        # A restored run starts from the checkpoint's state figures.
        again = ShardFigures(ops, P)
        again.restore(figures.state())
        assert [m.shards for m in again.operator_metrics().values()] == [
            tuple(OperatorMetrics(0, 0, 0.0, x.state_rows, x.state_bytes) for x in m.shards)
            for m in figures.operator_metrics().values()
        ]
        # ... unless they were written at another parallelism.
        other = ShardFigures(ops, P + 1)
        other.restore(figures.state())
        assert all(x.state_rows == 0 for m in other.operator_metrics().values() for x in m.shards)
    finally:
        part.close()


def test_a_single_process_operator_has_no_shards(tmp_path: Path) -> None:
    got: list[dict[str, Any]] = []
    metrics = RunMetrics(str(tmp_path / "metrics.jsonl"), [got.append])
    times = StepTimes(0.0, 0.0, 0.0, 0.0, None)
    metrics.step(1, (0, 0, 0, 0), times, [], {"a": OperatorMetrics(3, 1, 2.0, 1, 64)})
    assert got[0]["operators"] == {
        "a": {"rows_in": 3, "rows_out": 1, "step_ms": 2.0, "state_rows": 1, "state_bytes": 64}
    }
