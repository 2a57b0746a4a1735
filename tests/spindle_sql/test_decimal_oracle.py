"""SQL views over DECIMAL columns, maintained incrementally, equal DuckDB's answers exactly:
after every step (random inserts and retractions, NULLs included) the integral of each
view's deltas equals the batch query over the live rows, also across a restore.

Values are compared exactly (Python Decimals: 1.50 equals 1.5). DuckDB's sums, minima,
maxima and products of decimals are exact as Spark's are (it computes a product of decimals
of up to 18 digits in 18 digits, so its queries widen such factors first), but its avg of a
decimal is a double: the oracle queries compute avg as `spark_avg(sum, count, scale)`, a
Python function registered in DuckDB that divides DuckDB's exact sum (as text: DuckDB hands
a Python function no exact decimal) by the count and rounds HALF_UP to Spark's scale
(s + 4): Spark's definition, measured on PySpark 4.0.5 (docs/sql.md, "Types")."""

from __future__ import annotations

import decimal
import random
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from storage_engine.schema import WEIGHT

from .incremental import Rows, check_view, delta_table

MONEY = pa.decimal128(15, 2)
TABLES = {
    "t": pa.schema(
        [
            ("id", pa.int64()),
            ("k", pa.int32()),
            ("g", pa.string()),
            ("price", MONEY),
            ("qty", MONEY),
            ("disc", MONEY),
        ]
    ),
    "u": pa.schema([("k", pa.int32()), ("disc", MONEY), ("rate", pa.decimal128(8, 4))]),
}

# name -> (the view, in Spark SQL; DuckDB's query for it)
QUERIES: dict[str, tuple[str, str]] = {
    "group": (
        """SELECT g, count(price) AS n, sum(price) AS s, avg(price) AS a, min(price) AS lo,
        max(price) AS hi FROM t GROUP BY g""",
        """SELECT g, count(price), sum(price), spark_avg(sum(price)::VARCHAR, count(price), 6),
        min(price), max(price) FROM t GROUP BY g""",
    ),
    "pricing_summary": (  # TPC-H q1's arithmetic
        """SELECT g, sum(qty) AS sq, sum(price * (1 - disc)) AS rev,
        sum(price * (1 - disc) * (1 + disc)) AS charge, avg(qty) AS aq, avg(disc) AS ad,
        count(*) AS n FROM t GROUP BY g""",
        """SELECT g, sum(qty), sum(CAST(price AS DECIMAL(38, 2)) * (1 - disc)),
        sum(CAST(price AS DECIMAL(38, 2)) * (1 - disc) * (1 + disc)),
        spark_avg(sum(qty)::VARCHAR, count(qty), 6),
        spark_avg(sum(disc)::VARCHAR, count(disc), 6), count(*) FROM t GROUP BY g""",
    ),
    "filtered_and_distinct": (
        """SELECT g, sum(price) FILTER (WHERE disc > 0.05) AS big, sum(DISTINCT price) AS sd,
        count(DISTINCT price) AS cd, avg(DISTINCT qty) AS ad,
        max(disc) FILTER (WHERE qty > 5) AS md FROM t GROUP BY g""",
        """SELECT g, sum(price) FILTER (WHERE disc > 0.05), sum(DISTINCT price),
        count(DISTINCT price), spark_avg(sum(DISTINCT qty)::VARCHAR, count(DISTINCT qty), 6),
        max(disc) FILTER (WHERE qty > 5) FROM t GROUP BY g""",
    ),
    "global": (
        """SELECT sum(price) AS s, avg(price) AS a, max(disc) AS m, count(*) AS n FROM t
        WHERE price > 100""",
        """SELECT sum(price), spark_avg(sum(price)::VARCHAR, count(price), 6), max(disc), count(*)
        FROM t WHERE price > 100""",
    ),
    "join_on_a_decimal": (
        """SELECT t.g, u.rate, sum(t.price * u.rate) AS s, count(*) AS n FROM t
        JOIN u ON t.disc = u.disc GROUP BY t.g, u.rate""",
        """SELECT t.g, u.rate, sum(CAST(t.price AS DECIMAL(38, 2)) * u.rate), count(*) FROM t
        JOIN u ON t.disc = u.disc GROUP BY t.g, u.rate""",
    ),
    "group_by_a_decimal": (
        "SELECT disc, count(*) AS n, sum(qty) AS s, avg(price) AS a FROM t GROUP BY disc",
        """SELECT disc, count(*), sum(qty), spark_avg(sum(price)::VARCHAR, count(price), 6) FROM t
        GROUP BY disc""",
    ),
    "over_rows": (
        """SELECT id, g, price,
        sum(price) OVER (PARTITION BY g ORDER BY id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW)
            AS s,
        avg(price) OVER (PARTITION BY g ORDER BY id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW)
            AS a,
        min(disc) OVER (PARTITION BY g ORDER BY id ROWS UNBOUNDED PRECEDING) AS lo,
        max(price) OVER (ORDER BY id ROWS 1 PRECEDING) AS hi FROM t""",
        """SELECT id, g, price, sum(price) OVER w,
        spark_avg((sum(price) OVER w)::VARCHAR, count(price) OVER w, 6),
        min(disc) OVER (PARTITION BY g ORDER BY id ROWS UNBOUNDED PRECEDING),
        max(price) OVER (ORDER BY id ROWS 1 PRECEDING) FROM t
        WINDOW w AS (PARTITION BY g ORDER BY id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW)""",
    ),
    "cast_from_integers": (  # how a datagen table's integers become decimals
        """SELECT g, sum(CAST(k AS DECIMAL(10, 2))) AS s, avg(CAST(id AS DECIMAL(12, 0))) AS a
        FROM t GROUP BY g""",
        """SELECT g, sum(CAST(k AS DECIMAL(10, 2))), spark_avg(sum(id)::VARCHAR, count(id), 4)
        FROM t GROUP BY g""",
    ),
    "having_and_nested": (
        """SELECT max(s) AS top, min(s) AS bottom, count(*) AS n FROM (SELECT g, sum(price) AS s
        FROM t GROUP BY g HAVING sum(price) > 1000.5)""",
        """SELECT max(s), min(s), count(*) FROM (SELECT g, sum(price) AS s FROM t GROUP BY g
        HAVING sum(price) > 1000.5)""",
    ),
}


def spark_avg(total: Decimal | None, n: int, scale: int) -> Decimal | None:
    """Spark's avg of decimals: the exact sum over the count, HALF_UP at `scale`."""
    if total is None or n == 0:
        return None
    with decimal.localcontext(decimal.Context(prec=100, rounding=decimal.ROUND_HALF_UP)):
        return (Decimal(total) / n).quantize(Decimal(1).scaleb(-scale))


def with_spark_avg(con: duckdb.DuckDBPyConnection, result: str) -> None:
    """`spark_avg(sum as text, count, scale)` in DuckDB, giving a DECIMAL of type `result`."""
    con.create_function(
        "spark_avg",
        lambda s, n, scale: None if s is None else spark_avg(Decimal(s), n, scale),
        ["VARCHAR", "BIGINT", "INTEGER"],
        result,
        null_handling="special",
    )


def _money(rng: random.Random, hi: int) -> Decimal | None:
    return None if rng.random() < 0.1 else Decimal(rng.randint(0, hi)).scaleb(-2)


def _rows(rng: random.Random, table: str, n: int, ids: list[int]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for _ in range(n):
        k = rng.randint(0, 5)
        if table == "t":
            ids[0] += 1
            g = rng.choice(["a", "b", "c", None])
            price = _money(rng, 1_000_00) if rng.random() < 0.9 else Decimal("9999999999999.99")
            qty = None if rng.random() < 0.1 else Decimal(rng.randint(1, 50))
            out.append((ids[0], k, g, price, qty, _money(rng, 10)))
        else:
            rate = Decimal(rng.randint(0, 99999)).scaleb(-4)
            out.append((k, _money(rng, 10), rate))
    return out


def _norm(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(round(v, 6) if isinstance(v, float) else v for v in row)


def _oracle(query: str, live: dict[str, Rows]) -> Rows:
    con = duckdb.connect()
    with_spark_avg(con, "DECIMAL(38, 10)")  # wider than any average here: exact
    for name, schema in TABLES.items():
        rows = [r for r, w in live[name].items() for _ in range(w)]
        con.register(name, delta_table(schema, rows, [1] * len(rows)).drop_columns([WEIGHT]))
    result = con.execute(query).fetchall()
    return Counter(_norm(r) for r in result)


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_decimal_view_equals_batch_query(name: str, tmp_path: Path) -> None:
    view, duck = QUERIES[name]
    rng = random.Random(name)
    ids = [0]
    check_view(
        tmp_path,
        f"CREATE VIEW out AS {view}",
        TABLES,
        rng,
        lambda t: _rows(rng, t, rng.randint(0, 10), ids),
        lambda live: _oracle(duck, live),
        _norm,
        steps=10,
    )
