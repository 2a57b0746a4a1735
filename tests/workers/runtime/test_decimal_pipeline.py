"""A SQL pipeline over `files` tables with DECIMAL columns, run on Spark: line items as JSON
lines (parsed in the driver), orders as CSV (parsed by Spark: the driver's CSV parser takes no
`float` column) and customers as Parquet (decimal(15, 2) stored as INT64, as tpchgen-cli writes
it, and a file of decimal(12, 2) widened as Spark widens it). Sums, averages, products and
joins of decimals, in two runs (the second restored from the first's checkpoint, with more
files), equal DuckDB's answers over the same files exactly; values that need rounding to
the scale are rounded HALF_UP by each reader. The sinks keep the types: Parquet
decimal(p, s), JSON lines strings of all the digits."""

from __future__ import annotations

import json
import random
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from pipeline_spec.model import parse_spec
from pipeline_spec.types import arrow_schema
from workers.runtime import csv_lines, json_lines
from workers.runtime.run_builder import open_runner

from ...spindle_sql.test_decimal_oracle import with_spark_avg
from .test_sql_pipeline import integrated

MONEY = "decimal(15,2)"
SQL = """
CREATE VIEW pricing AS
  SELECT flag, sum(qty) AS sum_qty, sum(price) AS sum_price,
    sum(price * (1 - disc)) AS sum_disc_price, avg(qty) AS avg_qty, avg(price) AS avg_price,
    avg(disc) AS avg_disc, count(*) AS n
  FROM lineitem GROUP BY flag;
CREATE VIEW by_nation AS
  SELECT c.nation, sum(o.total) AS spent, avg(c.balance) AS avg_balance, count(*) AS n
  FROM orders o JOIN customer c ON o.custkey = c.custkey GROUP BY c.nation;
CREATE VIEW order_lines AS
  SELECT o.orderkey, o.total, sum(l.price * l.qty) AS lines, max(l.disc) AS top_disc
  FROM orders o JOIN lineitem l ON o.orderkey = l.orderkey GROUP BY o.orderkey, o.total
"""
# DuckDB's queries: its avg of a decimal is a double, so avg is Spark's (`spark_avg`) over
# DuckDB's exact sum; it multiplies decimals of up to 18 digits in 18 digits, so they widen.
ORACLE = {
    "pricing": """SELECT flag, sum(qty), sum(price),
        sum(CAST(price AS DECIMAL(38, 2)) * (1 - disc)),
        spark_avg(sum(qty)::VARCHAR, count(qty), 6), spark_avg(sum(price)::VARCHAR,
        count(price), 6), spark_avg(sum(disc)::VARCHAR, count(disc), 6), count(*)
        FROM lineitem GROUP BY flag""",
    "by_nation": """SELECT c.nation, sum(o.total), spark_avg(sum(c.balance)::VARCHAR,
        count(c.balance), 6), count(*) FROM orders o JOIN customer c ON o.custkey = c.custkey
        GROUP BY c.nation""",
    "order_lines": """SELECT o.orderkey, o.total, sum(CAST(l.price AS DECIMAL(38, 2)) * l.qty),
        max(l.disc) FROM orders o JOIN lineitem l ON o.orderkey = l.orderkey
        GROUP BY o.orderkey, o.total""",
}
LINEITEM = {"orderkey": "bigint", "qty": MONEY, "price": MONEY, "disc": MONEY, "flag": "string"}
# A `float` column, which the driver's CSV parse does not convert, sends the orders' files
# to Spark's CSV reader: the pipeline has decimals parsed both ways.
ORDERS = {"orderkey": "bigint", "custkey": "bigint", "total": MONEY, "weight": "float"}
CUSTOMER = {"custkey": "bigint", "nation": "string", "balance": MONEY}


def spec(tmp: Path) -> dict[str, Any]:
    def files(table: str, fmt: str, schema: dict[str, str]) -> dict[str, Any]:
        return {
            "kind": "files",
            "table": table,
            "path": str(tmp / table),
            "format": fmt,
            "schema": schema,
            "max_files_per_step": 1,
        }

    return {
        "name": "decimals",
        "source": files("lineitem", "json", LINEITEM),
        "tables": [files("orders", "csv", ORDERS), files("customer", "parquet", CUSTOMER)],
        "sql": SQL,
        "sinks": [
            {"name": v, "kind": "files", "from": v, "path": str(tmp / v), "format": "jsonl"}
            for v in ORACLE
        ]
        + [
            {
                "name": "pricing_parquet",
                "kind": "files",
                "from": "pricing",
                "path": str(tmp / "pricing_parquet"),
                "format": "parquet",
            }
        ],
        "checkpoint": {"every_steps": 1},
        "trigger": {"interval": "200ms"},
    }


def money(rng: random.Random, top: int, digits: int = 2) -> str:
    """A decimal's text; with `digits` 3, one that needs rounding to the scale (ties too)."""
    return str(Decimal(rng.randint(-top, top)).scaleb(-digits))


def write_files(tmp: Path, batch: int) -> None:
    """Batch `batch` of each table: line items of orders 0-39, orders, customers 0-9."""
    rng = random.Random(batch)
    for table in ("lineitem", "orders", "customer"):
        (tmp / table).mkdir(exist_ok=True)
    lines = []
    for i in range(60):
        price: Any = money(rng, 10**8, rng.choice([2, 3]))
        qty: Any = float(rng.randint(1, 50)) if rng.random() < 0.5 else str(rng.randint(1, 50))
        row = {
            "orderkey": rng.randint(0, 39),
            "qty": qty,
            "price": price if rng.random() < 0.3 else json.loads(price),  # string or number
            "disc": None if i % 17 == 0 else json.loads(money(rng, 10)),
            "flag": rng.choice("ANR"),
        }
        lines.append(json.dumps(row))
    (tmp / "lineitem" / f"{batch:03d}.json").write_text("\n".join(lines) + "\n")
    orders = ["orderkey,custkey,total,weight"]
    for k in range(batch * 20, batch * 20 + 20):
        total = "" if k % 13 == 0 else money(rng, 10**9, rng.choice([2, 3]))
        orders.append(f"{k % 40},{rng.randint(0, 9)},{total},{rng.randint(0, 9)}.5")
    (tmp / "orders" / f"{batch:03d}.csv").write_text("\n".join(orders) + "\n")
    customers = pa.table(
        {
            "custkey": pa.array(range(batch * 5, batch * 5 + 5), pa.int64()),
            "nation": [rng.choice(["FRANCE", "PERU", None]) for _ in range(5)],
            "balance": [Decimal(money(rng, 10**9)) for _ in range(5)],
        }
    )
    # tpchgen-cli's decimal(15, 2) as INT64; the second batch narrower, widened on reading.
    balance = pa.decimal128(15, 2) if batch == 0 else pa.decimal128(12, 2)
    customers = customers.cast(customers.schema.set(2, pa.field("balance", balance)))
    pq.write_table(
        customers, tmp / "customer" / f"{batch:03d}.parquet", store_decimal_as_integer=True
    )


def oracle(tmp: Path, view: str) -> Counter[tuple[Any, ...]]:
    con = duckdb.connect()
    with_spark_avg(con, "DECIMAL(38, 6)")  # every average here has scale 6, as written

    def columns(schema: dict[str, str]) -> str:
        types = {"bigint": "BIGINT", "string": "VARCHAR", "float": "FLOAT", MONEY: "DECIMAL(15, 2)"}
        return "{" + ", ".join(f"'{c}': '{types[t]}'" for c, t in schema.items()) + "}"

    con.execute(
        f"CREATE TABLE lineitem AS SELECT * FROM read_json('{tmp}/lineitem/*.json', "
        f"columns={columns(LINEITEM)})"
    )
    con.execute(
        f"CREATE TABLE orders AS SELECT * FROM read_csv('{tmp}/orders/*.csv', header=true, "
        f"columns={columns(ORDERS)})"
    )
    con.execute(
        "CREATE TABLE customer AS SELECT custkey, nation, CAST(balance AS DECIMAL(15, 2)) "
        f"AS balance FROM read_parquet('{tmp}/customer/*.parquet')"
    )
    # As the JSON sink writes them: decimals as strings of all their digits.
    return Counter(
        tuple(f"{v:f}" if isinstance(v, Decimal) else v for v in r)
        for r in con.execute(ORACLE[view]).fetchall()
    )


def test_a_pipeline_of_decimal_tables_equals_duckdb(tmp_path: Path, spark: SparkSession) -> None:
    assert not csv_lines.parses_in_driver(arrow_schema(ORDERS))  # orders: Spark parses them
    assert json_lines.parses_in_driver(arrow_schema(LINEITEM))  # line items: the driver
    s = parse_spec(spec(tmp_path))
    state = str(tmp_path / "state")
    for batch in (0, 1):
        write_files(tmp_path, batch)
        r = open_runner(s, state, base_dir=str(tmp_path), spark=spark)
        try:
            r.run(stop_when_idle=2.0)
        finally:
            r.close()
        assert not (tmp_path / "state" / "dead-letters").exists()
        for view in ORACLE:
            got = integrated(tmp_path / view)
            assert got == oracle(tmp_path, view), (batch, view)
    parquet = pq.read_schema(next((tmp_path / "pricing_parquet").iterdir()))
    assert [parquet.field(c).type for c in ("sum_price", "avg_price", "sum_disc_price")] == [
        pa.decimal128(25, 2),
        pa.decimal128(19, 6),
        pa.decimal128(38, 4),
    ]
