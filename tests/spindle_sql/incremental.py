"""The check every oracle test of SQL views makes: random inserts and retractions per step,
and after each step the integral of the view's deltas equals a batch query's answer over
the live rows (DuckDB's, usually); a checkpoint at step 5 is restored after step 8 and
steps 6 on are redone with other input, so the restored state must be step 5's again."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from spindle_sql.dataflow import Dataflow
from spindle_sql.parse import parse
from spindle_sql.planner import plan
from storage_engine import EngineSettings, StorageLocation
from storage_engine.schema import WEIGHT
from workers.runtime.dataflow_run import DataflowRun

SETTINGS = EngineSettings(memory_budget_bytes=64 << 10)
Rows = Counter[tuple[Any, ...]]


def delta_table(schema: pa.Schema, rows: list[tuple[Any, ...]], weights: list[int]) -> pa.Table:
    cols = [pa.array([r[i] for r in rows], f.type) for i, f in enumerate(schema)]
    return pa.table([*cols, pa.array(weights, pa.int64())], names=[*schema.names, WEIGHT])


def step_deltas(
    tables: dict[str, pa.Schema],
    rng: random.Random,
    new_rows: Callable[[str], list[tuple[Any, ...]]],
    live: dict[str, Rows],
) -> dict[str, pa.Table]:
    """A step's delta per table: `new_rows(table)` inserted, up to four of the `live` rows
    retracted (`live` follows)."""
    deltas = {}
    for t, schema in tables.items():
        rows = new_rows(t)
        weights = [1] * len(rows)
        present = list((+live[t]).elements())
        for r in rng.sample(present, min(len(present), rng.randint(0, 4))):
            rows.append(r)
            weights.append(-1)
        for r, w in zip(rows, weights, strict=True):
            live[t][r] += w
        deltas[t] = delta_table(schema, rows, weights)
    return deltas


def check_view(
    tmp_path: Path,
    sql: str,
    tables: dict[str, pa.Schema],
    rng: random.Random,
    new_rows: Callable[[str], list[tuple[Any, ...]]],
    oracle: Callable[[dict[str, Rows]], Rows],
    norm: Callable[[tuple[Any, ...]], tuple[Any, ...]],
    steps: int = 12,
) -> None:
    """View `out` of `sql` over `tables`, stepped with `new_rows(table)` inserted and up to
    four live rows retracted per table and step, equals `oracle(live rows per table)` after
    every step (rows compared after `norm`)."""

    def open_flow(checkpoint: str) -> tuple[Dataflow, StorageLocation]:
        flow = Dataflow(plan(parse(sql), tables))
        loc = StorageLocation.open(
            str(tmp_path), fingerprint=flow.fingerprint, settings=SETTINGS, checkpoint=checkpoint
        )
        DataflowRun(flow).open(loc)
        return flow, loc

    live: dict[str, Rows] = {t: Counter() for t in tables}
    integral: Rows = Counter()
    flow, loc = open_flow("none")
    saved: tuple[int, Rows, dict[str, Rows]] | None = None
    step = 0
    while step < steps:
        step += 1
        deltas = step_deltas(tables, rng, new_rows, live)
        for r in flow.step(deltas)["out"].to_pylist():
            w = r.pop(WEIGHT)
            integral[norm(tuple(r.values()))] += w
        assert +integral == integral, f"negative weights after step {step}"
        want = oracle(live)
        assert integral == want, f"step {step}: {+integral - want} not {want - integral}"
        if step == 5:
            loc.commit(step=5)
            saved = (step, Counter(integral), {t: Counter(c) for t, c in live.items()})
        if step == 8 and saved is not None:
            loc.close()
            flow, loc = open_flow("latest")
            step, integral, live = saved[0], Counter(saved[1]), saved[2]
            saved = None
    loc.close()


__all__ = ["SETTINGS", "Rows", "check_view", "delta_table", "step_deltas"]
