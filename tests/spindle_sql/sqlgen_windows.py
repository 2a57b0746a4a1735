"""The window table functions of the differential test's grammar (tests/spindle_sql/sqlgen.py):
TUMBLE, HOP and SESSION over t's ts in FROM, and the same rows written out for DuckDB,
which has none of them."""

from __future__ import annotations

import random

from .sqlgen_tables import TABLES, column_type
from .sqlgen_types import TS, E, From, both


def window_table(r: random.Random, al: str) -> From:
    """TUMBLE, HOP or SESSION over t's ts, named `al`: t's columns and the window's bounds
    (DuckDB: a row per window its ts falls in, from epoch microseconds)."""
    slide = r.choice([10, 60, 600])
    size = slide * r.choice([1, 2, 3]) if r.random() < 0.5 else slide
    iv = "INTERVAL '{}' MINUTE"
    if r.random() < 0.3:
        return _session(al, slide)
    if size == slide:
        tvf = f"TUMBLE(TABLE t, DESCRIPTOR(ts), {iv.format(size)})"
    else:
        tvf = f"HOP(TABLE t, DESCRIPTOR(ts), {iv.format(slide)}, {iv.format(size)})"
    us = slide * 60_000_000
    start = f"(epoch_us(ts) // {us} - j) * {us}"
    duck = (
        f"(SELECT t.*, make_timestamp({start})::TIMESTAMPTZ AS window_start,"
        f" make_timestamp({start} + {size * 60_000_000})::TIMESTAMPTZ AS window_end"
        f" FROM t, range({size // slide}) AS r(j) WHERE ts IS NOT NULL) {al}"
    )
    return From(f"TABLE({tvf}) {al}", duck, _columns(al), [])


def _session(al: str, gap: int) -> From:
    """SESSION over t's ts partitioned by a (DuckDB: a new session where a row follows the
    one before by the gap or more, its bounds the first ts and the last plus the gap)."""
    iv = f"INTERVAL '{gap}' MINUTE"
    tvf = f"SESSION(TABLE t PARTITION BY a, DESCRIPTOR(ts), {iv})"
    names = ", ".join(f.name for f in TABLES["t"])
    duck = (
        f"(WITH s AS (SELECT *, CASE WHEN ts - lag(ts) OVER (PARTITION BY a ORDER BY ts)"
        f" < {iv} THEN 0 ELSE 1 END AS new FROM t WHERE ts IS NOT NULL),"
        " n AS (SELECT *, sum(new) OVER (PARTITION BY a ORDER BY ts"
        " ROWS UNBOUNDED PRECEDING) AS sid FROM s)"
        f" SELECT {names}, min(ts) OVER (PARTITION BY a, sid) AS window_start,"
        f" max(ts) OVER (PARTITION BY a, sid) + {iv} AS window_end FROM n) {al}"
    )
    return From(f"TABLE({tvf}) {al}", duck, _columns(al), [])


def _columns(al: str) -> list[E]:
    cols = [both(f"{al}.{f.name}", column_type(f)) for f in TABLES["t"]]
    return [*cols, both(f"{al}.window_start", TS), both(f"{al}.window_end", TS)]
