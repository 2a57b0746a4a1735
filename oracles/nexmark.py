"""The Nexmark queries of docs/examples/nexmark/ run by DuckDB as batch queries: the oracle
that tests/spindle_sql/test_nexmark.py and `bench.nexmark` compare every system's output with.

DuckDB runs each query's own SQL (transpiled by sqlglot), except where it lacks a construct:
the window table functions (q5, q7, q8, q11, q12) and the tie-break of q19's ranking are
written out for it. A query over processing time (`PROCESSING_TIME`: q12) reads each event's
step's time, which the caller takes from the run's offset log, from the `events` column
`PROCTIME_COLUMN`: PROCTIME() is that column here. Rows are compared as multisets of
normalised values (`norm`): timestamps as epoch microseconds (a zone-less one is UTC),
numbers rounded to 6 decimals.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import duckdb
import duckdb.func as duckdb_func
import pyarrow as pa
from sqlglot import exp

from spindle_sql.parse import parse

Rows = Counter[tuple[Any, ...]]

# Queries over processing time: their rows depend on when a run took its steps, so the
# oracle needs that run's times (an `events` column `PROCTIME_COLUMN`, from its offset log).
PROCESSING_TIME = frozenset({"q12"})
PROCTIME_COLUMN = "__proctime"

_WS = "(epoch_us(date_time) // {size}) * {size}"
_PT = "(epoch_us(p_time) // 10000000) * 10000000"  # q12's window: 10 s of processing time
HAND_WRITTEN = {
    "q5": f"""WITH w AS (SELECT auction, {_WS.format(size=2_000_000)} - j * 2000000 AS ws
            FROM bid, range(5) AS r(j)),
        c AS (SELECT auction, count(*) AS num, ws FROM w GROUP BY auction, ws),
        m AS (SELECT max(num) AS maxn, ws FROM c GROUP BY ws)
        SELECT c.auction, c.num FROM c JOIN m ON c.ws = m.ws AND c.num >= m.maxn""",
    "q7": f"""WITH b1 AS (SELECT max(price) AS maxprice, {_WS.format(size=10_000_000)} AS ws
            FROM bid GROUP BY ws)
        SELECT b.auction, b.price, b.bidder, b.date_time, b.extra FROM bid b JOIN b1
        ON b.price = b1.maxprice AND epoch_us(b.date_time) BETWEEN b1.ws AND b1.ws + 10000000""",
    "q8": f"""WITH p AS (SELECT DISTINCT id, name, {_WS.format(size=10_000_000)} AS ws FROM person),
        a AS (SELECT DISTINCT seller, {_WS.format(size=10_000_000)} AS ws FROM auction)
        SELECT p.id, p.name, p.ws FROM p JOIN a ON p.id = a.seller AND p.ws = a.ws""",
    # A new session where a bidder's bid follows the one before by 10 seconds or more.
    "q11": """WITH s AS (SELECT bidder, date_time, CASE WHEN date_time - lag(date_time)
                OVER (PARTITION BY bidder ORDER BY date_time) < INTERVAL 10 SECOND
                THEN 0 ELSE 1 END AS new FROM bid),
            n AS (SELECT *, sum(new) OVER (PARTITION BY bidder ORDER BY date_time
                ROWS UNBOUNDED PRECEDING) AS session FROM s)
        SELECT bidder, count(*), min(date_time), max(date_time) + INTERVAL 10 SECOND
        FROM n GROUP BY bidder, session""",
    # Tumbling windows of 10 s of processing time.
    "q12": f"""SELECT bidder, count(*), {_PT}, {_PT} + 10000000 FROM bid
        GROUP BY bidder, {_PT}""",
    # Spindle breaks ties in the ORDER BY with the other columns, ascending, NULLs first.
    "q19": """SELECT auction, bidder, price, date_time, rank_number FROM (
        SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC,
            bidder NULLS FIRST, channel NULLS FIRST, url NULLS FIRST,
            date_time NULLS FIRST, extra NULLS FIRST) AS rank_number FROM bid)
        WHERE rank_number <= 10""",
}


def norm(v: Any) -> Any:
    """One value as every system's output is compared: timestamps as epoch microseconds
    (DuckDB's zone is the machine's; a zone-less timestamp is UTC), numbers to 6 decimals."""
    if isinstance(v, datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=UTC)
        return (v - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    if isinstance(v, float):
        return None if math.isnan(v) else round(v, 6)
    if isinstance(v, Decimal):
        return round(float(v), 6)
    return v


def rows_of(rows: Iterable[Iterable[Any]]) -> Rows:
    return Counter(tuple(norm(v) for v in r) for r in rows)


def count_char(s: str | None, character: str | None) -> int:
    """Nexmark's CountChar UDF (q14), row by row as its reference defines it: how many
    times `character`'s first character occurs in `s`; 0 for a NULL `s`."""
    if s is None:
        return 0
    if not character:
        raise ValueError("count_char: an empty character")
    return sum(1 for c in s if c == character[0])


def _duckdb(query: exp.Expr) -> str:
    """A view's query in DuckDB's SQL, PROCTIME() (NOW(), CURRENT_TIMESTAMP) as the events'
    `PROCTIME_COLUMN`."""

    def proctime(n: exp.Expr) -> exp.Expr:
        named = isinstance(n, exp.Anonymous) and str(n.this).lower() in ("proctime", "now")
        if named or isinstance(n, exp.CurrentTimestamp):
            return exp.column(PROCTIME_COLUMN)
        return n

    return query.transform(proctime).sql(dialect="duckdb")


def oracle(
    name: str, sql: str, tables: dict[str, pa.Table], macros: dict[str, str] | None = None
) -> Rows:
    """Query `name` (the last view of `sql`, after the table views person, auction and bid)
    over `tables` (the input tables by name: `events`, and side inputs). Nexmark's UDF
    count_char is DuckDB's function here (`count_char`); `macros` are DuckDB macros
    (`"f(x)": "avg(x)"`) standing for a query's Python functions."""
    con = duckdb.connect()
    for head, body in (macros or {}).items():
        con.execute(f"CREATE MACRO {head} AS {body}")
    con.execute("SET TimeZone = 'UTC'")
    args: list[Any] = ["VARCHAR", "VARCHAR"]  # the stubs' list type is invariant
    con.create_function("count_char", count_char, args, "BIGINT", null_handling=duckdb_func.SPECIAL)
    for table, rows in tables.items():
        con.register(table, rows)
    views = parse(sql).views
    for v in views[:-1]:
        con.execute(f"CREATE VIEW {v.name} AS {_duckdb(v.query)}")
    query = HAND_WRITTEN.get(name) or _duckdb(views[-1].query)
    return rows_of(con.execute(query).fetchall())
