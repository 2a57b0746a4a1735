"""SQL views maintained incrementally equal the same queries run as batch queries by another
engine: after every step, the integral of each view's deltas equals DuckDB's answer over
the integral of the input deltas (inserts and deletes), including across a checkpoint and
restore in the middle."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
import sqlglot

from oracles.nexmark import norm as _norm
from storage_engine.schema import WEIGHT

from .incremental import check_view
from .incremental import delta_table as _table

TABLES = {
    "t": pa.schema([("k", pa.int32()), ("g", pa.string()), ("v", pa.int64()), ("d", pa.float64())]),
    "u": pa.schema([("k", pa.int32()), ("name", pa.string())]),
    "b": pa.schema(
        [("auction", pa.int64()), ("price", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))]
    ),
}
T0 = datetime(2026, 1, 1, tzinfo=UTC)

# Window table functions: DuckDB has none, so their oracle is written out (windows from
# epoch microseconds; HOP by a cross join with the window's index).
_HOP = """(SELECT *, (epoch_us(ts) // 2000000) * 2000000 - j * 2000000 AS ws
    FROM b, range(5) AS r(j) WHERE ts IS NOT NULL)"""
WINDOWED: dict[str, tuple[str, str]] = {
    "tumble": (
        """CREATE VIEW out AS SELECT auction, window_start, window_end, count(*) AS n,
        max(price) AS top FROM TABLE(TUMBLE(TABLE b, DESCRIPTOR(ts), INTERVAL '10' SECOND))
        GROUP BY auction, window_start, window_end""",
        """SELECT auction, (epoch_us(ts) // 10000000) * 10000000 AS ws,
        (epoch_us(ts) // 10000000) * 10000000 + 10000000, count(*), max(price)
        FROM b WHERE ts IS NOT NULL GROUP BY auction, ws""",
    ),
    "hop_hot_items": (
        """CREATE VIEW counts AS SELECT auction, window_start, window_end, count(*) AS num
        FROM TABLE(HOP(TABLE b, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
        GROUP BY auction, window_start, window_end;
        CREATE VIEW out AS SELECT c.auction, c.num, c.window_start FROM counts c
        JOIN (SELECT window_start, max(num) AS maxn FROM counts GROUP BY window_start) m
        ON c.window_start = m.window_start AND c.num >= m.maxn""",
        f"""WITH counts AS (SELECT auction, ws, count(*) AS num FROM {_HOP}
        GROUP BY auction, ws), m AS (SELECT ws, max(num) AS maxn FROM counts GROUP BY ws)
        SELECT c.auction, c.num, c.ws FROM counts c JOIN m ON c.ws = m.ws
        AND c.num >= m.maxn""",
    ),
}

QUERIES: dict[str, str] = {
    "group": """CREATE VIEW out AS SELECT g, count(*) AS n, sum(v) AS s, min(v) AS lo,
                max(v) AS hi, avg(d) AS a, count(d) AS nd FROM t GROUP BY g""",
    "having": """CREATE VIEW out AS SELECT g, count(*) AS n FROM t WHERE v > 10
                 GROUP BY g HAVING count(*) > 1""",
    "join": """CREATE VIEW out AS SELECT t.g, u.name, t.v FROM t JOIN u ON t.k = u.k
               WHERE t.v % 2 = 0""",
    "join_of_aggregates": """CREATE VIEW out AS SELECT a.g, a.n, b.m FROM
        (SELECT g, count(*) AS n FROM t GROUP BY g) a
        JOIN (SELECT g, max(v) AS m FROM t GROUP BY g) b ON a.g = b.g""",
    "aggregate_of_join": """CREATE VIEW out AS SELECT u.name, sum(t.v) AS s, count(*) AS n
        FROM t JOIN u ON t.k = u.k GROUP BY u.name""",
    "distinct": "CREATE VIEW out AS SELECT DISTINCT g, k FROM t",
    "union_all": "CREATE VIEW out AS SELECT k, g FROM t UNION ALL SELECT k, name FROM u",
    "views_of_views": """CREATE VIEW per_k AS SELECT k, sum(v) AS s FROM t GROUP BY k;
        CREATE VIEW out AS SELECT per_k.k, per_k.s, u.name FROM per_k JOIN u ON per_k.k = u.k
        WHERE per_k.s > 20""",
    "expressions": """CREATE VIEW out AS SELECT k,
        CASE WHEN v > 5 THEN 'big' ELSE 'small' END AS size, upper(g) AS gu, v * 2 + 1 AS w,
        coalesce(g, 'none') AS g2 FROM t WHERE g IS NOT NULL OR k > 3""",
    "filtered_aggregates": """CREATE VIEW out AS SELECT g, count(*) FILTER (WHERE v > 5) AS big,
        sum(v) FILTER (WHERE d > 0.5) AS s FROM t GROUP BY g""",
    "group_by_expression": """CREATE VIEW out AS SELECT v % 3 AS m, count(*) AS n FROM t
        GROUP BY v % 3""",
    "self_join": """CREATE VIEW out AS SELECT a.k, a.v AS av, b.v AS bv FROM t a JOIN t b
        ON a.k = b.k AND a.v < b.v""",
    "global_aggregate": """CREATE VIEW out AS SELECT count(*) AS n, sum(v) AS s, max(d) AS m
        FROM t WHERE v > 35""",
    "count_distinct": """CREATE VIEW out AS SELECT g, count(DISTINCT k) AS ks, count(*) AS n,
        sum(DISTINCT v) AS sv, count(DISTINCT v) FILTER (WHERE d > 0.5) AS hv
        FROM t GROUP BY g""",
    "count_distinct_only": """CREATE VIEW out AS SELECT count(DISTINCT g) AS gs,
        count(DISTINCT v) AS vs FROM t""",
    "left_join": """CREATE VIEW out AS SELECT t.k, t.v, u.name FROM t LEFT JOIN u
        ON t.k = u.k""",
    "right_join_with_condition": """CREATE VIEW out AS SELECT t.k, t.v, u.name FROM t
        RIGHT JOIN u ON t.k = u.k AND t.v > 20""",
    "full_join_of_aggregates": """CREATE VIEW out AS SELECT a.g, a.n, b.m FROM
        (SELECT g, count(*) AS n FROM t WHERE v > 30 GROUP BY g) a
        FULL OUTER JOIN (SELECT g, max(v) AS m FROM t WHERE v < 0 GROUP BY g) b
        ON a.g = b.g""",
    "left_join_aggregate": """CREATE VIEW out AS SELECT u.name, count(t.v) AS n, count(*) AS c
        FROM u LEFT JOIN t ON u.k = t.k AND t.d > 0.7 GROUP BY u.name""",
    "top_n": """CREATE VIEW out AS SELECT g, k, v, rn FROM (
        SELECT g, k, v, ROW_NUMBER() OVER (PARTITION BY g ORDER BY v DESC, k) AS rn FROM t
        WHERE v IS NOT NULL) WHERE rn <= 2""",
    "top_1_of_aggregate": """CREATE VIEW per_k AS SELECT g, k, sum(v) AS s FROM t GROUP BY g, k;
        CREATE VIEW out AS SELECT g, k FROM (SELECT g, k, ROW_NUMBER() OVER
        (PARTITION BY g ORDER BY s DESC, k) AS r FROM per_k WHERE s IS NOT NULL) WHERE r = 1""",
    "over_rows": """CREATE VIEW out AS SELECT g, k, v,
        sum(v) OVER (PARTITION BY g ORDER BY d ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS s,
        count(*) OVER (PARTITION BY g ORDER BY d ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS n,
        avg(v * d) OVER (PARTITION BY g ORDER BY d ROWS 3 PRECEDING) AS a,
        min(v) OVER (PARTITION BY g ORDER BY d ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS lo,
        max(d) OVER (PARTITION BY g ORDER BY d ROWS BETWEEN 4 PRECEDING AND CURRENT ROW) AS hi
        FROM t""",
    "over_unbounded": """CREATE VIEW out AS SELECT k, v, d,
        count(v) OVER (PARTITION BY k ORDER BY v DESC, d
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS c,
        max(v) OVER (PARTITION BY k ORDER BY v, d ROWS UNBOUNDED PRECEDING) AS m,
        sum(d) OVER (ORDER BY d ROWS BETWEEN CURRENT ROW AND CURRENT ROW) AS me FROM t""",
    "over_an_aggregate": """CREATE VIEW per_k AS SELECT g, k, sum(v) AS s FROM t GROUP BY g, k;
        CREATE VIEW out AS SELECT g, k, s, avg(s) OVER (PARTITION BY g ORDER BY k
            ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS moving FROM per_k""",
    "over_b_times": """CREATE VIEW out AS SELECT auction, price, ts, max(ts) OVER (
        PARTITION BY auction ORDER BY price, ts ROWS 2 PRECEDING) AS latest FROM b""",
    "union": "CREATE VIEW out AS SELECT k FROM t WHERE v > 10 UNION SELECT k FROM u",
    "view_read_twice": """CREATE VIEW per_g AS SELECT g, k, count(*) AS n FROM t GROUP BY g, k;
        CREATE VIEW out AS SELECT a.g, a.k AS k1, b.k AS k2, a.n + b.n AS n FROM per_g a
        JOIN per_g b ON a.g = b.g AND a.k < b.k""",
    "nested": """CREATE VIEW out AS SELECT m, count(*) AS groups FROM
        (SELECT k, max(v) AS m FROM t GROUP BY k) GROUP BY m""",
    "not_like": """CREATE VIEW out AS SELECT t.k, t.g, u.name, count(*) FILTER (WHERE
        u.name NOT LIKE 'b%') AS n FROM t LEFT JOIN u ON t.k = u.k AND u.name NOT LIKE '%o%'
        WHERE t.g NOT LIKE 'a%' OR NOT (t.g NOT LIKE 'b') GROUP BY t.k, t.g, u.name""",
    "comma_joins": """CREATE VIEW out AS SELECT t.g, u.name, b.price FROM t, u, b
        WHERE t.k = u.k AND b.auction = t.k AND t.v > 3 AND u.name IS NOT NULL
        AND b.price > t.v""",
    "comma_joins_reordered": """CREATE VIEW out AS SELECT t.k, u.name, b.price
        FROM t, b, u WHERE t.k = u.k AND u.k = b.auction AND (t.g = 'a' OR b.price < 50)""",
    "comma_join_of_aggregates": """CREATE VIEW out AS SELECT x.g, x.n, y.m
        FROM (SELECT g, count(*) AS n FROM t GROUP BY g) x,
             (SELECT g, max(v) AS m FROM t WHERE v > 10 GROUP BY g) y
        WHERE x.g = y.g AND x.n > 1""",
    "comma_join_key_in_every_or_branch": """CREATE VIEW out AS SELECT t.k, u.name
        FROM t, u WHERE (t.k = u.k AND t.v > 30) OR (u.k = t.k AND u.name = 'bob')
        OR (t.k = u.k AND t.g IS NULL)""",
    "cross_join": """CREATE VIEW out AS SELECT count(*) AS n, sum(t.v) AS s, u.name
        FROM t, u WHERE t.v > 30 AND u.k < 3 GROUP BY u.name""",
    "cross_join_keyword": """CREATE VIEW out AS SELECT t.k, u.name FROM t CROSS JOIN u
        WHERE t.k = u.k AND t.v < 10""",
    "comma_and_left_join": """CREATE VIEW out AS SELECT t.g, u.name, b.price
        FROM t, u LEFT JOIN b ON u.k = b.auction AND b.price > 60 WHERE t.k = u.k""",
    "non_equi_join": """CREATE VIEW out AS SELECT t.k, u.k AS uk, u.name FROM t
        JOIN u ON t.k < u.k AND u.name = 'bob' WHERE t.v > 20""",
    "using": """CREATE VIEW out AS SELECT k, t.g, u.name, u.k AS uk FROM t JOIN u USING (k)""",
    "left_using_star": "CREATE VIEW out AS SELECT * FROM t LEFT JOIN u USING (k)",
    "full_using": """CREATE VIEW out AS SELECT k, count(*) AS n FROM
        (SELECT k, count(*) AS c FROM t WHERE v > 30 GROUP BY k) x
        FULL JOIN (SELECT k, max(name) AS m FROM u GROUP BY k) y USING (k) GROUP BY k""",
    "group_by_position": """CREATE VIEW out AS SELECT g, v % 3 AS m, count(*) AS n
        FROM t GROUP BY 1, 2""",
    # Only an integer is a position: 10.0E0 is a constant key, as in Spark
    "group_by_a_double_constant": """CREATE VIEW out AS SELECT 10.0E0 AS c, g,
        count(*) AS n FROM t GROUP BY 10.0E0, g""",
    "column_lists": """CREATE VIEW per (a, b) AS SELECT g, sum(v) FROM t GROUP BY g;
        CREATE VIEW out AS SELECT c, count(*) AS n FROM
        (SELECT a, b FROM per WHERE b > 10) AS x (gg, c) GROUP BY c""",
    "exists": """CREATE VIEW out AS SELECT k, g FROM t
        WHERE EXISTS (SELECT 1 FROM u WHERE u.k = t.k)""",
    "not_exists": """CREATE VIEW out AS SELECT k, g FROM t
        WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.k = t.k AND u.name = 'bob')""",
    "exists_not_equal": """CREATE VIEW out AS SELECT t1.k, t1.v FROM t t1
        WHERE EXISTS (SELECT 1 FROM t t2 WHERE t2.k = t1.k AND t2.v <> t1.v)
        AND NOT EXISTS (SELECT 1 FROM t t3 WHERE t3.k = t1.k AND t3.v > t1.v)""",
    "exists_no_equality": """CREATE VIEW out AS SELECT k, name FROM u
        WHERE EXISTS (SELECT 1 FROM t WHERE t.v > u.k * 5)""",
    "exists_over_a_join": """CREATE VIEW out AS SELECT k, name FROM u WHERE EXISTS
        (SELECT 1 FROM t, b WHERE t.k = u.k AND b.auction = t.k AND b.price > 50)""",
    "in_subquery": """CREATE VIEW out AS SELECT k, g FROM t
        WHERE k IN (SELECT k FROM u WHERE name IS NOT NULL)""",
    "not_in_with_nulls": """CREATE VIEW out AS SELECT k, name FROM u
        WHERE k NOT IN (SELECT v FROM t WHERE g = 'a')""",
    "not_in_correlated": """CREATE VIEW out AS SELECT k, name FROM u
        WHERE k NOT IN (SELECT t.k FROM t WHERE t.v = u.k)""",
    "in_under_or": """CREATE VIEW out AS SELECT k, name FROM u
        WHERE k IN (SELECT v FROM t WHERE g = 'a') OR name = 'bob'""",
    "subqueries_as_columns": """CREATE VIEW out AS SELECT k, name,
        k IN (SELECT v FROM t WHERE g = 'b') AS i,
        EXISTS (SELECT 1 FROM t WHERE t.k = u.k AND t.v > 20) AS e,
        (SELECT count(*) FILTER (WHERE v > 3) + 1 FROM t WHERE t.k = u.k AND t.g = 'a') AS n
        FROM u""",
    "scalar": "CREATE VIEW out AS SELECT k, v FROM t WHERE v > (SELECT avg(v) FROM t)",
    "scalar_correlated": """CREATE VIEW out AS SELECT k, v FROM t
        WHERE v > (SELECT avg(t2.v) FROM t t2 WHERE t2.k = t.k AND t2.g IS NOT NULL)""",
    "scalar_not_equal": """CREATE VIEW out AS SELECT t.k, t.g FROM t
        WHERE t.v > (SELECT min(b.price) FROM b WHERE b.auction = t.k AND b.price > t.d * 10)""",
    "scalar_count_no_equality": """CREATE VIEW out AS SELECT t.k,
        (SELECT count(*) FROM b WHERE b.price < t.v) AS n FROM t""",
    "scalar_in_having": """CREATE VIEW out AS SELECT g, sum(v) AS s FROM t GROUP BY g
        HAVING sum(v) > (SELECT sum(v) * 0.3 FROM t)""",
    "nested_subqueries": """CREATE VIEW out AS SELECT k, name FROM u WHERE k IN
        (SELECT k FROM t WHERE v IN (SELECT price FROM b WHERE auction = 2)
         AND d > (SELECT avg(d) FROM t t2 WHERE t2.k = t.k))""",
    "repeated_columns": """CREATE VIEW per AS SELECT a.k, a.v, a.d, count(*) AS n
        FROM t a JOIN u b ON a.k = b.k AND a.k = b.k GROUP BY a.k, a.v, a.d;
        CREATE VIEW out AS SELECT k, n, sum(n) OVER (PARTITION BY k, k
        ORDER BY v, v DESC, d ROWS 1 PRECEDING) AS o FROM per""",
    "intervals": """CREATE VIEW out AS SELECT auction, second(ts) AS sec,
        count(*) AS n FROM b WHERE ts + INTERVAL '30' SECOND > TIMESTAMP '2026-01-01 00:01:00'
        AND CAST(ts AS DATE) - INTERVAL '1' DAY < DATE '2026-01-01'
        AND ts - INTERVAL '1' MONTH < TIMESTAMP '2025-12-01 00:00:50'
        AND extract(year FROM CAST(ts AS DATE) + INTERVAL 2 YEARS) = 2028
        GROUP BY auction, second(ts)""",
    # NULL's own type as a key, a distinct column and a retracted output column
    "group_by_null": """CREATE VIEW out AS SELECT g, NULL AS z, count(*) AS n FROM t
        GROUP BY g, NULL""",
    "distinct_null": "CREATE VIEW out AS SELECT DISTINCT NULL AS z, k FROM t",
    "null_column": "CREATE VIEW out AS SELECT k, NULL AS z FROM t WHERE v > 10",
    "with": """CREATE VIEW out AS WITH big AS (SELECT k, v FROM t WHERE v > 20)
        SELECT k, count(*) AS n FROM big GROUP BY k""",
}


def _rows(rng: random.Random, table: str, n: int) -> list[tuple[Any, ...]]:
    out = []
    for _ in range(n):
        k = rng.randint(0, 6)
        if table == "b":
            ts = None if rng.random() < 0.05 else T0 + timedelta(seconds=rng.uniform(0, 60))
            out.append((rng.randint(1, 4), rng.randint(1, 100), ts))
        elif table == "t":
            g = rng.choice(["a", "b", "c", None])
            v = (
                rng.choice([rng.randint(-5, 40), None])
                if rng.random() < 0.1
                else rng.randint(-5, 40)
            )
            d = rng.random()
            out.append((k, g, v, d))
        else:
            out.append((k, rng.choice(["ann", "bob", None])))
    return out


def _oracle(sql: str, live: dict[str, Counter[tuple[Any, ...]]]) -> Counter[tuple[Any, ...]]:
    con = duckdb.connect()
    for name, schema in TABLES.items():
        rows = [r for r, w in live[name].items() for _ in range(w)]
        con.register(name, _table(schema, rows, [1] * len(rows)).drop_columns([WEIGHT]))
    if sql in ORACLES:
        return Counter(tuple(_norm(v) for v in r) for r in con.execute(ORACLES[sql]).fetchall())
    statements = sqlglot.transpile(sql, read="spark", write="duckdb")
    for s in statements[:-1]:
        con.execute(s)
    last = statements[-1]
    body = sqlglot.parse_one(last, read="duckdb").expression.sql(dialect="duckdb")
    result = con.execute(body).fetchall()
    return Counter(tuple(_norm(v) for v in r) for r in result)


QUERIES.update({name: spindle for name, (spindle, _) in WINDOWED.items()})
ORACLES = {spindle: oracle for spindle, oracle in WINDOWED.values()}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_view_equals_batch_query(name: str, tmp_path: Path) -> None:
    sql = QUERIES[name]
    rng = random.Random(name)
    check_view(
        tmp_path,
        sql,
        TABLES,
        rng,
        lambda t: _rows(rng, t, rng.randint(0, 12)),
        lambda live: _oracle(sql, live),
        lambda r: tuple(_norm(v) for v in r),
    )


ZEROS = {"z": pa.schema([("k", pa.int32()), ("x", pa.float64())])}
ZERO_QUERIES = {
    "group": "SELECT x, count(*) AS n FROM z GROUP BY x",
    "join": "SELECT a.k, b.k AS k2 FROM z a JOIN z b ON a.x = b.x",
    "distinct_aggregate": """SELECT k, count(DISTINCT x) AS n, avg(DISTINCT x) AS a FROM z
        GROUP BY k""",
    "partition": """SELECT k, x, rn FROM (SELECT k, x, ROW_NUMBER() OVER (PARTITION BY x
        ORDER BY k) AS rn FROM z) WHERE rn = 1""",
}


@pytest.mark.parametrize("name", sorted(ZERO_QUERIES))
def test_negative_zero_is_zero(name: str, tmp_path: Path) -> None:
    """-0.0 and 0.0 are one group, one join key, one distinct value, one partition (as in
    Spark and DuckDB), also when one of them is retracted while the other stays."""
    sql = ZERO_QUERIES[name]
    rng = random.Random(name)

    def oracle(live: dict[str, Counter[tuple[Any, ...]]]) -> Counter[tuple[Any, ...]]:
        con = duckdb.connect()
        rows = list(live["z"].elements())
        con.register("z", _table(ZEROS["z"], rows, [1] * len(rows)).drop_columns([WEIGHT]))
        query = sql.replace("ORDER BY k)", "ORDER BY k NULLS FIRST, x)")  # ties as Spindle's
        return Counter(tuple(_norm(v) for v in r) for r in con.execute(query).fetchall())

    check_view(
        tmp_path,
        f"CREATE VIEW out AS {sql}",
        ZEROS,
        rng,
        lambda t: [(rng.randint(0, 2), rng.choice([-0.0, 0.0, 1.5, None])) for _ in range(4)],
        oracle,
        lambda r: tuple(_norm(v) for v in r),
    )


DUPLICATES = {"w": pa.schema([("p", pa.int32()), ("x", pa.int64()), ("y", pa.int64())])}


def test_window_aggregates_of_one_window_pair_duplicates_as_one_ordering(tmp_path: Path) -> None:
    """Several aggregates over frames of rows sharing PARTITION BY and ORDER BY, over rows
    that are often equal in every column (ordered by all columns: only copies tie): each
    output row's values are one copy's, as over one ordering of the partition (DuckDB's, and
    Spark's one Window operator), not one copy's sum with another's count. The running sum
    of negative numbers falls from copy to copy while the counts rise, so aggregates
    ordered apart (by the first's values) would pair them crosswise."""
    sql = """CREATE VIEW out AS SELECT p, x, y,
        sum(y) OVER (PARTITION BY p ORDER BY x, y ROWS UNBOUNDED PRECEDING) AS s,
        count(*) OVER (PARTITION BY p ORDER BY x, y ROWS 1 PRECEDING) AS n,
        max(x - y) OVER (PARTITION BY p ORDER BY x, y ROWS 2 PRECEDING) AS m,
        avg(y) OVER (PARTITION BY p ORDER BY x, y ROWS BETWEEN 3 PRECEDING AND CURRENT ROW)
            AS a
        FROM w"""
    rng = random.Random("duplicates")

    def oracle(live: dict[str, Counter[tuple[Any, ...]]]) -> Counter[tuple[Any, ...]]:
        con = duckdb.connect()
        rows = list(live["w"].elements())
        con.register("w", _table(DUPLICATES["w"], rows, [1] * len(rows)).drop_columns([WEIGHT]))
        body = sqlglot.parse_one(sql, read="spark").expression.sql(dialect="duckdb")
        return Counter(tuple(_norm(v) for v in r) for r in con.execute(body).fetchall())

    check_view(
        tmp_path,
        sql,
        DUPLICATES,
        rng,
        lambda t: [(rng.randint(0, 1), rng.randint(0, 2), rng.randint(-3, -1)) for _ in range(8)],
        oracle,
        lambda r: tuple(_norm(v) for v in r),
    )
