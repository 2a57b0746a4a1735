"""ROW_NUMBER, RANK, DENSE_RANK, LAG, LEAD and RANGE frames in SQL views equal DuckDB's
answer after every step of random inserts and retractions, across a checkpoint and restore
(`check_view`). The DuckDB query is the view's SQL transpiled by sqlglot (which writes
Spark's NULL ordering out: first ascending, last descending). Where SQL leaves the order of
ties open (ROW_NUMBER, LAG, LEAD), the queries order by every column, as Spindle breaks
ties."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
import sqlglot

from oracles.nexmark import norm
from storage_engine.schema import WEIGHT

from .incremental import check_view, delta_table

TABLES = {
    "w": pa.schema(
        [
            ("p", pa.int32()),
            ("o", pa.int64()),
            ("x", pa.float64()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("d", pa.date32()),
        ]
    )
}
T0 = datetime(2026, 1, 1, tzinfo=UTC)
EVERY = "o, x, ts, d"  # every column but the partition's: no ties left

QUERIES = {
    "ranks": """SELECT p, o, x,
        RANK() OVER (PARTITION BY p ORDER BY o) AS r,
        DENSE_RANK() OVER (PARTITION BY p ORDER BY o DESC) AS dr,
        RANK() OVER (ORDER BY x DESC, o) AS gr,
        ROW_NUMBER() OVER (PARTITION BY p ORDER BY EVERY) AS rn FROM w""",
    "offsets": """SELECT p, o, x,
        LAG(x) OVER (PARTITION BY p ORDER BY EVERY) AS l1,
        LEAD(x, 2, -1.0) OVER (PARTITION BY p ORDER BY EVERY) AS f2,
        o - LAG(o, 1, 0) OVER (PARTITION BY p ORDER BY EVERY) AS step,
        LAG(ts, 3) OVER (PARTITION BY p ORDER BY EVERY) AS t3,
        LEAD(d) OVER (PARTITION BY p ORDER BY o DESC, x, ts, d) AS dn FROM w""",
    "ranges": """SELECT p, o, x, ts, d,
        sum(x) OVER (PARTITION BY p ORDER BY o RANGE BETWEEN 2 PRECEDING AND CURRENT ROW)
            AS s2,
        count(*) OVER (PARTITION BY p ORDER BY o) AS n,
        max(x) OVER (PARTITION BY p ORDER BY ts
            RANGE BETWEEN INTERVAL '2' SECOND PRECEDING AND CURRENT ROW) AS m,
        avg(o) OVER (PARTITION BY p ORDER BY d DESC
            RANGE BETWEEN INTERVAL '1' DAY PRECEDING AND CURRENT ROW) AS a,
        min(x) OVER (ORDER BY o DESC RANGE UNBOUNDED PRECEDING) AS lo,
        sum(o) OVER (PARTITION BY p) AS total,
        count(x) OVER (PARTITION BY p ORDER BY x RANGE BETWEEN CURRENT ROW AND CURRENT ROW)
            AS peers,
        sum(o) OVER (PARTITION BY p ORDER BY x DESC RANGE BETWEEN 2 PRECEDING AND CURRENT ROW)
            AS near FROM w""",
    "unbounded_row_number": """SELECT p, o, rn, lo FROM (SELECT p, o,
        ROW_NUMBER() OVER (PARTITION BY p ORDER BY EVERY) AS rn,
        LAG(o) OVER (PARTITION BY p ORDER BY EVERY) AS lo FROM w) WHERE rn <= 2""",
}


def _row(rng: random.Random) -> tuple[Any, ...]:
    """Few values per column, so ties, duplicates and NULLs are common."""
    return (
        rng.choice([0, 1, None]),
        rng.choice([None, *range(0, 6)]),
        rng.choice([None, -1.5, 0.25, 2.0, 3.5]),
        rng.choice([None, *(T0 + timedelta(seconds=s) for s in range(5))]),
        rng.choice([None, *(date(2026, 1, 1) + timedelta(days=d) for d in range(4))]),
    )


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_window_functions_equal_duckdb(name: str, tmp_path: Path) -> None:
    sql = QUERIES[name].replace("EVERY", EVERY)
    rng = random.Random(name)

    def oracle(live: dict[str, Counter[tuple[Any, ...]]]) -> Counter[tuple[Any, ...]]:
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        rows = list(live["w"].elements())
        con.register("w", delta_table(TABLES["w"], rows, [1] * len(rows)).drop_columns([WEIGHT]))
        query = sqlglot.transpile(sql, read="spark", write="duckdb")[0]
        return Counter(tuple(norm(v) for v in r) for r in con.execute(query).fetchall())

    check_view(
        tmp_path,
        f"CREATE VIEW out AS {sql}",
        TABLES,
        rng,
        lambda t: [_row(rng) for _ in range(rng.randint(0, 7))],
        oracle,
        lambda r: tuple(norm(v) for v in r),
    )
