"""Exactly-once, proven for SQL pipelines: a pipeline of views (an aggregate joined back to
its input, an aggregate over that join, a hopping-window aggregate; files, Postgres change
rows and tables, Delta Lake change logs and tables as sinks) over a fixed input of JSON
files is killed with SIGKILL at random moments among its steps and restarted from its
latest checkpoint each time, restored once to an older checkpoint part-way through (and
killed again after it); the sinks' final contents, each row's weights summed (a table's
rows as they are), must equal DuckDB running the same SQL as a batch over the whole input.
Every view's state, the Spark source's offsets, the sinks and the dead letters thus roll
back and forward together."""

from __future__ import annotations

import datetime as dt
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pyarrow as pa
from deltalake import DeltaTable

from storage_engine.location_view import list_checkpoints
from storage_engine.schema import WEIGHT
from workers.runtime.connectors.delta_sink import STEP_COLUMN

from ...conftest import trials
from ...spindle_sql.test_dataflow_oracle import _norm
from .test_exactly_once import FILES, assert_dead_letters, run, write_input
from .test_sql_pipeline import integrated

# Runs as written by DuckDB too.
JOINED = """
CREATE VIEW per_customer AS
  SELECT customer, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer;
CREATE VIEW above_average AS
  SELECT o.customer, o.amount
  FROM orders o JOIN per_customer p ON o.customer = p.customer
  WHERE o.amount * p.n > p.total;
CREATE VIEW above_average_per_customer AS
  SELECT customer, count(*) AS n, sum(amount) AS total, avg(amount) AS mean
  FROM above_average GROUP BY customer
"""
WINDOWED = """
CREATE VIEW per_window AS
  SELECT window_start, window_end, count(*) AS n, sum(amount) AS total
  FROM TABLE(HOP(TABLE orders, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '10' SECOND))
  GROUP BY window_start, window_end
"""
# DuckDB has no HOP table function: per_window written out for it. A row is in the 10 s
# windows starting at floor(ts / 5 s) * 5 s - k * 5 s for k in 0..1 (size / slide - 1), as
# epoch microseconds (the event times are after the epoch, so `//` is the floor).
WINDOWED_ORACLE = """
WITH w AS (SELECT (epoch_us(ts) // 5000000 - k) * 5000000 AS ws, amount
           FROM orders, range(2) AS r(k))
SELECT ws, ws + 10000000, count(*), sum(amount) FROM w GROUP BY ws
"""


def spec(tmp: Path, dsn: str) -> Path:
    p = tmp / "spec.yaml"
    sql = (JOINED.strip() + ";\n" + WINDOWED.strip()).replace("\n", "\n  ")
    p.write_text(
        f"""
name: sql-exactly-once
source:
  kind: files
  table: orders
  path: {tmp / "in"}
  format: json
  schema: {{customer: string, amount: bigint, ts: timestamp}}
  max_files_per_step: 1
sql: |
  {sql}
sinks:
  - {{name: agg, kind: files, from: above_average_per_customer, path: {tmp / "out-agg"},
     format: jsonl}}
  - {{name: win, kind: files, from: per_window, path: {tmp / "out-win"}, format: jsonl}}
  - {{name: pg, kind: postgres, from: above_average_per_customer, dsn: "{dsn}",
     table: above_average_per_customer}}
  - {{name: pg_win, kind: postgres, from: per_window, dsn: "{dsn}", table: per_window,
     mode: table, key: [window_start, window_end]}}
  - {{name: delta_win, kind: delta, from: per_window, path: {tmp / "delta-win"}, mode: table,
     key: [window_start, window_end]}}
  - {{name: delta_agg, kind: delta, from: above_average_per_customer,
     path: {tmp / "delta-agg"}}}
checkpoint: {{every_steps: 2}}
trigger: {{interval: 100ms}}
"""
    )
    return p


def test_sigkills_and_a_restore_give_exactly_the_batch_result(tmp_path: Path, pg_dsn: str) -> None:
    bad = write_input(tmp_path / "in")
    spec_path = spec(tmp_path, pg_dsn)
    rng = random.Random(30)
    runs = mid_way = 0

    def killed_run(*args: str, steps: tuple[int, int] = (2, 5)) -> None:
        """A run killed at a random moment of its steps: within a second of its k-th, k
        drawn from `steps`. (Counted in steps, not seconds: a Spark start takes 20 to 40 s
        on a loaded machine, and the first step is read ahead, seconds before the streaming
        query's. Each run costs such a start, so the test runs few.)"""
        nonlocal runs, mid_way
        runs += 1
        k = rng.randint(*steps)
        if run(tmp_path, spec_path, rng.uniform(0.0, 1.0), *args, after_steps=k) is None:
            mid_way += _last_step(tmp_path) < FILES

    # A killed run (more if need be) leaves a checkpoint older than the head's to go back to.
    killed_run(steps=(4, 8))
    while _head_step(tmp_path) < 4:
        assert runs < 4, "four killed runs and the pipeline has not checkpointed step 4"
        killed_run()
    head = _head_step(tmp_path)
    older = [c for c in list_checkpoints(tmp_path / "state").checkpoints if 0 < c.step < head]
    restore = rng.choice(older)
    killed_run("--from-checkpoint", restore.uuid)
    started = [e for e in _events(tmp_path) if e.get("event") == "started"][-1]
    assert (started["restored"], started["first_step"]) == (restore.uuid, restore.step + 1)
    for _ in range(trials(1, 0)):
        killed_run()
    run(tmp_path, spec_path, kill_after=None)  # to the end of the input
    assert _last_step(tmp_path) == FILES
    assert mid_way >= runs - 1, f"only {mid_way} of {runs} runs were killed mid-way"

    want_agg = _oracle(tmp_path, "SELECT * FROM above_average_per_customer")
    want_win = _oracle(tmp_path, WINDOWED_ORACLE)
    assert want_agg and len(want_win) == 49  # 240 s of event time: windows from -5 s
    assert _normalised(integrated(tmp_path / "out-agg")) == want_agg
    assert _normalised(integrated(tmp_path / "out-win"), timestamps=2) == want_win
    with psycopg.connect(pg_dsn) as c:
        rows = c.execute(
            "SELECT customer, n, total, mean, sum(weight) FROM above_average_per_customer "
            "GROUP BY customer, n, total, mean HAVING sum(weight) <> 0"
        ).fetchall()
    got_pg: Counter[tuple[Any, ...]] = Counter()
    for *r, w in rows:
        assert w > 0, f"negative weight {w} for {r}"
        got_pg[tuple(_norm(v) for v in r)] += int(w)
    assert got_pg == want_agg
    with psycopg.connect(pg_dsn) as c:
        current = c.execute("SELECT window_start, window_end, n, total FROM per_window").fetchall()
    assert Counter(tuple(_norm(v) for v in r) for r in current) == want_win
    delta_win = DeltaTable(str(tmp_path / "delta-win")).to_pyarrow_table()
    assert Counter(tuple(_norm(v) for v in r.values()) for r in delta_win.to_pylist()) == want_win
    log = DeltaTable(str(tmp_path / "delta-agg")).to_pyarrow_table()
    got_delta: Counter[tuple[Any, ...]] = Counter()
    for r in log.to_pylist():
        w, step = r.pop(WEIGHT), r.pop(STEP_COLUMN)
        assert 0 < step <= FILES, step
        got_delta[tuple(_norm(v) for v in r.values())] += w
    assert +got_delta == want_agg
    assert_dead_letters(tmp_path, bad)


def _head_step(tmp: Path) -> int:
    """The step of the checkpoint a run restores ("latest"); 0 if none."""
    listing = list_checkpoints(tmp / "state")
    return next((c.step for c in listing.checkpoints if c.uuid == listing.head), 0)


def _last_step(tmp: Path) -> int:
    """The last step a run took (its metrics record)."""
    return int([e["step"] for e in _events(tmp) if "event" not in e][-1])


def _events(tmp: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (tmp / "state" / "metrics.jsonl").read_text().splitlines()]


def _normalised(rows: Counter[tuple[Any, ...]], timestamps: int = 0) -> Counter[tuple[Any, ...]]:
    """A sink's integrated rows as the oracle's: the first `timestamps` columns, written as
    text by the JSON-lines sink, and floats as `_norm` makes them; rows whose weights sum
    to 0 left out."""
    out: Counter[tuple[Any, ...]] = Counter()
    for r, w in rows.items():
        ts = [dt.datetime.fromisoformat(v) for v in r[:timestamps]]
        out[tuple(_norm(v) for v in (*ts, *r[timestamps:]))] += w
    return +out


def _oracle(tmp: Path, query: str) -> Counter[tuple[Any, ...]]:
    """`query` run by DuckDB over the input's well-formed lines (the others are dead
    letters), after the views of JOINED."""
    rows = []
    for f in sorted((tmp / "in").iterdir()):
        for line in f.read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            rows.append({**r, "ts": dt.datetime.fromisoformat(r["ts"])})
    schema = pa.schema(
        [("customer", pa.string()), ("amount", pa.int64()), ("ts", pa.timestamp("us", "UTC"))]
    )
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("orders", pa.Table.from_pylist(rows, schema=schema))
    for statement in JOINED.split(";"):
        con.execute(statement)
    return Counter(tuple(_norm(v) for v in r) for r in con.execute(query).fetchall())
