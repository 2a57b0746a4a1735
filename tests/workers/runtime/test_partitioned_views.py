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
from spindle_sql.partitioning import WATERMARKS, Partitioning
from spindle_sql.planner import plan
from spindle_sql.shard_level import LevelStep, empty_key_shard
from spindle_sql.spec import plan_spec
from storage_engine.key_groups import DEFAULT_KEY_GROUPS
from workers.runtime import udfs as runtime_udfs

from ...spindle_sql.incremental import delta_table, step_deltas
from ...spindle_sql.sqlgen import TABLES, generate, rows
from ...spindle_sql.test_dataflow_oracle import TABLES as EVENT_TABLES
from ...spindle_sql.test_emit_final import CASES as FINAL_CASES
from ...spindle_sql.test_udafs import _records as udaf_records
from ...spindle_sql.test_udafs import _spec as udaf_spec
from ...spindle_sql.test_upsert_tables import _customers as customers
from ...spindle_sql.test_upsert_tables import _orders as orders
from ...spindle_sql.test_upsert_tables import _spec as upsert_spec
from ...spindle_sql.test_upsert_tables import _table as upsert_table
from ...spindle_sql.test_watermarks import CASES as WATERMARK_CASES
from ...spindle_sql.test_watermarks import EVENT_TIME, _step_rows
from ...spindle_sql.test_window_functions import EVERY as WINDOW_EVERY
from ...spindle_sql.test_window_functions import QUERIES as WINDOW_QUERIES
from ...spindle_sql.test_window_functions import TABLES as WINDOW_TABLES
from ...spindle_sql.test_window_functions import _row as window_row
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


@pytest.mark.full
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


GLOBAL_SQL = """
CREATE VIEW total AS
SELECT count(*) AS n, count(v) AS nv, sum(v) AS s, avg(v) AS a, min(v) AS lo, max(v) AS hi
FROM t WHERE k <> 3
"""
GLOBAL_TABLES = {"t": pa.schema([("k", pa.int64()), ("v", pa.int64())])}


def _global_steps(seed: int, steps: int) -> list[dict[str, pa.Table]]:
    rng = random.Random(seed)
    live: dict[str, Counter[tuple[Any, ...]]] = {"t": Counter()}

    def new(_: str) -> list[tuple[Any, ...]]:
        return [
            (rng.randrange(50), rng.choice([None, *range(-20, 400)]))
            for _ in range(rng.randint(0, 300))
        ]

    return [step_deltas(GLOBAL_TABLES, rng, new, live) for _ in range(steps)]


def test_an_aggregate_without_group_by_gets_one_partial_row_per_shard() -> None:
    flow = Dataflow(plan(parse(GLOBAL_SQL), GLOBAL_TABLES))
    part = Partitioning(flow)
    (i,) = part.operator
    owner = empty_key_shard(3, DEFAULT_KEY_GROUPS)
    rows = delta_table(GLOBAL_TABLES["t"], [(j % 7, j % 90) for j in range(1_000)], [1] * 1_000)
    for shard in range(3):
        step = LevelStep(part, 0, shard, 3, DEFAULT_KEY_GROUPS, {"t:t": rows}, {}, True)
        routed = step.run()
        sent = [(s, p, t) for (lv, s), ports in routed.items() if lv == 1 for p, t in ports.items()]
        got = {p: t for s, p, t in sent if p != WATERMARKS}
        assert {s for s, p, _ in sent if p != WATERMARKS} == {owner}
        # The accumulators as one row; the min/max values consolidated, one row each.
        assert got[f"s{i}.0"].num_rows == 1
        (values,) = (t for p, t in got.items() if p.startswith(f"s{i}.0:"))
        assert values.num_rows == 90


@pytest.mark.parametrize("shards", [2, 3])
def test_an_aggregate_without_group_by_partitioned(tmp_path: Path, shards: int) -> None:
    """Inserts, retractions of the minimum and maximum, NULLs, a step with no rows: each
    shard's partials merged on the owner give the single-process run's deltas."""

    def make() -> Dataflow:
        return Dataflow(plan(parse(GLOBAL_SQL), GLOBAL_TABLES))

    steps = _global_steps(shards, 8)
    expected = plain_run(make, steps, tmp_path / "plain")
    check_partitioned(
        make, steps, expected, tmp_path / "p", shards, reopen_at=4, rescale_to=5 - shards
    ).close()


@pytest.mark.parametrize("shards", [2, 3])
def test_upserted_tables_partitioned(tmp_path: Path, shards: int) -> None:
    """Tables fed by upserts and deletes (a join, an aggregate and a filter over two): each
    key's events reach its shard in order, and the shards' live rows give the single-process
    run's deltas, across a reopen and a rescale."""
    planned = plan_spec(upsert_spec())
    rng = random.Random(shards)
    steps = [
        {
            "customers": upsert_table(
                customers(rng, rng.randint(0, 12)), planned.tables["customers"]
            ),
            "orders": upsert_table(orders(rng, rng.randint(0, 12)), planned.tables["orders"]),
        }
        for _ in range(10)
    ]

    def make() -> Dataflow:
        return Dataflow(planned.views)

    expected = plain_run(make, steps, tmp_path / "plain")
    check_partitioned(
        make, steps, expected, tmp_path / "p", shards, reopen_at=5, rescale_to=5 - shards
    ).close()


@pytest.mark.parametrize("shards", [2, 3])
def test_python_aggregates_partitioned(tmp_path: Path, shards: int) -> None:
    """Python aggregates (incremental and recomputed, with and without GROUP BY) on the
    shards give the single-process run's deltas, across a reopen and a rescale."""
    spec = udaf_spec()
    planned = plan_spec(spec, udf_impls=runtime_udfs.load(spec))
    schema = planned.tables["orders"]
    rng = random.Random(shards)
    steps = [
        {
            "orders": pa.Table.from_pylist(
                [{f.name: r.get(f.name) for f in schema} for r in udaf_records(rng, 8)], schema
            )
        }
        for _ in range(10)
    ]

    def make() -> Dataflow:
        return Dataflow(planned.views)

    expected = plain_run(make, steps, tmp_path / "plain")
    check_partitioned(
        make, steps, expected, tmp_path / "p", shards, reopen_at=5, rescale_to=5 - shards
    ).close()


@pytest.mark.parametrize("name", sorted(WINDOW_QUERIES))
def test_window_functions_partitioned(tmp_path: Path, name: str) -> None:
    """RANK, DENSE_RANK, ROW_NUMBER, LAG, LEAD and RANGE frames at P = 2 give the
    single-process run's deltas (each partition's rows on its shard; a window without
    PARTITION BY on one), across a reopen and a rescale."""
    sql = f"CREATE VIEW out AS {WINDOW_QUERIES[name].replace('EVERY', WINDOW_EVERY)}"
    rng = random.Random(name)
    live: dict[str, Counter[tuple[Any, ...]]] = {t: Counter() for t in WINDOW_TABLES}
    steps = [
        step_deltas(WINDOW_TABLES, rng, lambda t: [window_row(rng) for _ in range(6)], live)
        for _ in range(8)
    ]

    def make() -> Dataflow:
        return Dataflow(plan(parse(sql), WINDOW_TABLES))

    expected = plain_run(make, steps, tmp_path / "plain")
    check_partitioned(make, steps, expected, tmp_path / "p", 2, reopen_at=4, rescale_to=3).close()


def test_proctime_partitioned(tmp_path: Path) -> None:
    """PROCTIME() evaluated on the shards (in level 0's projection) is the step's time the
    driver gives, as in one process: rows per processing-time window and partition."""
    sql = """CREATE VIEW out AS WITH s AS (SELECT p, o, PROCTIME() AS pt FROM w)
        SELECT p, window_start, count(*) AS n, max(o) AS top
        FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(pt), INTERVAL '3' SECOND))
        GROUP BY p, window_start, window_end"""
    rng = random.Random("proctime")
    # Insertions only: a retraction in a later step would carry that step's time.
    schema = WINDOW_TABLES["w"]
    steps = [
        {"w": delta_table(schema, [window_row(rng) for _ in range(6)], [1] * 6)} for _ in range(8)
    ]

    def make() -> Dataflow:
        return Dataflow(plan(parse(sql), WINDOW_TABLES))

    expected = plain_run(make, steps, tmp_path / "plain")
    assert any(out["out"] for out, _ in expected)
    check_partitioned(make, steps, expected, tmp_path / "p", 2, reopen_at=4).close()
