"""Random views and event-time views partitioned (issue 50): the differential test's views
(tests/spindle_sql/sqlgen.py; inserts and retractions, NULLs, -0.0, duplicates) and the
watermark and `emit_final` tests' views (late rows, retractions, sessions) give, at P = 1,
2 and 3, every step the single-process dataflow's deltas and watermarks."""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spindle_sql.dataflow import Dataflow
from spindle_sql.errors import SqlError
from spindle_sql.parse import parse
from spindle_sql.planner import plan

from ...spindle_sql.incremental import delta_table, step_deltas
from ...spindle_sql.sqlgen import TABLES, generate, rows
from ...spindle_sql.test_dataflow_oracle import TABLES as EVENT_TABLES
from ...spindle_sql.test_emit_final import CASES as FINAL_CASES
from ...spindle_sql.test_watermarks import CASES as WATERMARK_CASES
from ...spindle_sql.test_watermarks import EVENT_TIME, _step_rows
from .partitioned_check import check_partitioned, plain_run

SEED = 1


def _random_steps(index: int, steps: int) -> list[dict[str, pa.Table]]:
    """Inserts and retractions for the tables of view `index`, as the differential test
    draws them."""
    rng = random.Random(f"{SEED}:{index}:rows")
    seen: dict[str, list[tuple[Any, ...]]] = {t: [] for t in TABLES}
    live: dict[str, Counter[tuple[Any, ...]]] = {t: Counter() for t in TABLES}
    return [
        step_deltas(TABLES, rng, lambda t: rows(rng, t, rng.randint(1, 7), seen[t]), live)
        for _ in range(steps)
    ]


def test_random_views_partitioned_equal_the_single_process_run(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    full = bool(request.config.getoption("--full"))
    count = int(os.environ.get("SPINDLE_PARTITIONED_VIEWS", 0)) or (400 if full else 100)
    failures = []
    for i in range(count):
        case = generate(SEED, i)
        try:
            views = plan(parse(case.spark), TABLES)
        except SqlError:
            continue  # the differential test reports refusals

        def make(views: Any = views) -> Dataflow:
            return Dataflow(views)

        steps = _random_steps(i, 4 if full else 3)
        expected = plain_run(make, steps, tmp_path / f"{i}-plain")
        # Each view at one P in turn (every P with --full), every tenth across a reopen.
        for shards in (1, 2, 3) if full else (1 + i % 3,):
            try:
                check_partitioned(
                    make,
                    steps,
                    expected,
                    tmp_path / f"{i}-p{shards}",
                    shards,
                    reopen_at=2 if i % 5 == 0 else None,
                    rescale_to=1 + (shards % 3) if i % 10 == 5 else None,
                    what=f"view {i}",
                ).close()
            except Exception as e:  # every view's report, not the first's alone
                failures.append(f"seed {SEED}, view {i}:\n{case.spark}\n{type(e).__name__}: {e}")
                break
    assert not failures, f"{len(failures)} of {count} differ:\n\n" + "\n\n".join(failures[:5])


def _event_steps(name: str, steps: int) -> list[dict[str, pa.Table]]:
    rng = random.Random(name)
    live: Counter[tuple[Any, ...]] = Counter()
    clock, out = 0.0, []
    for _ in range(steps):
        clock += rng.uniform(0.3, 1.5)
        rows_, weights = _step_rows(rng, clock, live)
        for r, w in zip(rows_, weights, strict=True):
            live[r] += w
        out.append({"b": delta_table(EVENT_TABLES["b"], rows_, weights)})
    return out


EVENT_CASES = {
    **{f"watermark-{n}": sql for n, (sql, _) in WATERMARK_CASES.items()},
    **{f"final-{n}": sql for n, (sql, _) in FINAL_CASES.items()},
}


@pytest.mark.parametrize("name", sorted(EVENT_CASES))
def test_event_time_views_partitioned_share_the_watermarks(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    views = plan(parse(EVENT_CASES[name]), EVENT_TABLES)

    def make() -> Dataflow:
        return Dataflow(views, event_time=EVENT_TIME)

    full = bool(request.config.getoption("--full"))
    steps = _event_steps(name, 30 if full else 16)
    expected = plain_run(make, steps, tmp_path / "plain")
    assert expected[-1][1]["late_rows"]["b"] > 0  # late rows were dropped
    for shards in (1, 2, 3) if full else (2, 3):
        check_partitioned(
            make,
            steps,
            expected,
            tmp_path / f"p{shards}",
            shards,
            reopen_at=8 if shards == 3 else None,
            rescale_to=2 if shards == 3 else None,
            what=name,
        ).close()


def test_an_operator_spec_partitioned(tmp_path: Path) -> None:
    """An operator spec's operators (its own layout), among them a window aggregate whose
    watermark is its own: it goes whole to one shard, so rows it finds late are the same."""
    from ...spindle_sql.test_operators import TS, _flow

    rng = random.Random(3)
    t0 = 1_700_000_000_000_000
    steps = []
    for i in range(8):
        n = rng.randint(3, 9)
        users = [rng.choice(["a", "b", "c", None]) for _ in range(n)]
        amounts = [rng.choice([1, 2, 3, None]) for _ in range(n)]
        ts = [t0 + i * 20_000_000 - rng.randint(0, 50_000_000) for _ in range(n)]
        stream = pa.table({"user": users, "amount": amounts, "ts": pa.array(ts, TS)})
        right = pa.table({"user": users[:2], "amount": amounts[:2], "note": ["x", "y"]})
        steps.append(
            {
                "source": stream,
                "pairs.left": stream.select(["user", "amount"]),
                "pairs.right": right,
            }
        )
    expected = plain_run(_flow, steps, tmp_path / "plain")
    assert sum(sum(out["per_min"].values()) for out, _ in expected) > 0
    for shards in (2, 3):
        check_partitioned(
            _flow,
            steps,
            expected,
            tmp_path / f"p{shards}",
            shards,
            reopen_at=len(steps) // 2,
            rescale_to=5 - shards,  # 2 to 3 and 3 to 2
            what="ops",
        ).close()
