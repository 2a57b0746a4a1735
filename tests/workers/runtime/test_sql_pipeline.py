"""A pipeline written in SQL runs on Spark and the engine: a files source read as a table,
views (an aggregate, a view over it joined back to the input), sinks writing views. Its
output, integrated, equals the same SQL run as a batch by DuckDB over the same files, also
when the run stops and a second run resumes from its checkpoint; and a mistake in the SQL is
refused with the field and line before Spark runs anything."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest
from pyspark.sql import SparkSession

from pipeline_spec.model import PipelineSpec, SpecError, parse_spec
from storage_engine.schema import WEIGHT
from workers.runtime.run_builder import open_runner

from ... import customers

SQL = """
CREATE VIEW per_customer AS
  SELECT customer, count(*) AS n, sum(amount) AS total
  FROM orders WHERE amount > 10 GROUP BY customer;
CREATE VIEW big_orders AS
  SELECT o.customer, o.amount, p.total
  FROM orders o JOIN per_customer p ON o.customer = p.customer
  WHERE o.amount * 20 > p.total
"""


def spec(tmp: Path, sql: str = SQL) -> dict[str, Any]:
    return {
        "name": "orders-sql",
        "source": {
            "kind": "files",
            "table": "orders",
            "path": str(tmp / "in"),
            "format": "json",
            "schema": {"customer": "string", "amount": "bigint"},
            "max_files_per_step": 1,
        },
        "sql": sql,
        "sinks": [
            {
                "name": "a",
                "kind": "files",
                "from": "per_customer",
                "path": str(tmp / "a"),
                "format": "jsonl",
            },
            {
                "name": "b",
                "kind": "files",
                "from": "big_orders",
                "path": str(tmp / "b"),
                "format": "jsonl",
            },
        ],
        "checkpoint": {"every_steps": 2},
        "trigger": {"interval": "200ms"},
    }


def integrated(d: Path) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for f in sorted(d.iterdir()):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            w = r.pop(WEIGHT)
            r.pop("__step", None)
            out[tuple(r.values())] += w
    assert all(w > 0 for w in (+out).values()) and +out == out
    return out


def oracle(tmp: Path, view: str) -> Counter[tuple[Any, ...]]:
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE orders AS SELECT * FROM read_json("
        f"'{tmp / 'in'}/*', columns={{customer: 'VARCHAR', amount: 'BIGINT'}})"
    )
    for statement in SQL.split(";"):
        con.execute(statement.replace("CREATE VIEW", "CREATE VIEW IF NOT EXISTS"))
    return Counter(tuple(r) for r in con.execute(f"SELECT * FROM {view}").fetchall())


def run_and_resume(s: PipelineSpec, tmp: Path, spark: SparkSession) -> None:
    """Run `s` (state in `tmp/state`) for 3 steps and stop, then resume it to the end of its
    input: the second run restores the checkpoint of step 2 and redoes the logged step 3."""
    for steps in (3, None):
        r = open_runner(s, str(tmp / "state"), base_dir=str(tmp), spark=spark)
        try:
            r.run(max_steps=steps, stop_when_idle=2.0)
        finally:
            r.close()


def test_a_sql_pipeline_equals_the_batch_query_across_a_resume(
    tmp_path: Path, spark: SparkSession
) -> None:
    customers.write_input(tmp_path / "in", 6, 200, customers=20, seed=5)
    s = parse_spec(spec(tmp_path))
    run_and_resume(s, tmp_path, spark)
    assert integrated(tmp_path / "a") == oracle(tmp_path, "per_customer")
    assert integrated(tmp_path / "b") == oracle(tmp_path, "big_orders")
    # Each step's record has the stateful operators' figures: the aggregate took every
    # order over 10 once, across both runs (a step redone by the second run counts once).
    records = [json.loads(x) for x in (tmp_path / "state" / "metrics.jsonl").open()]
    steps = list({r["step"]: r for r in records if "event" not in r and "step" in r}.values())
    agg = [r["operators"]["per_customer.agg0"] for r in steps]
    over_10 = sum(n for (_, n, _) in oracle(tmp_path, "per_customer"))
    assert sum(a["rows_in"] for a in agg) == over_10
    assert agg[-1]["state_rows"] > 0 and agg[-1]["state_bytes"] > 0
    assert {k for r in steps for k in r["operators"]} == {"per_customer.agg0", "big_orders.join0"}


def test_sql_mistakes_name_the_field_and_line(tmp_path: Path) -> None:
    from spindle_sql.spec import plan_spec

    bad = spec(tmp_path, SQL.replace("sum(amount)", "sum(amont)"))
    with pytest.raises(SpecError) as e:
        plan_spec(parse_spec(bad))
    assert e.value.errors == [("sql", "line 3, column 39: unknown column: amont")]
    with pytest.raises(SpecError) as e:
        parse_spec({**bad, "state": [{"name": "x", "kind": "distinct"}]})
    assert "either state (operators) or sql (views)" in str(e.value)


def test_late_rows_are_dropped_counted_and_the_watermark_survives_a_resume(
    tmp_path: Path, spark: SparkSession
) -> None:
    """Files of clicks in event-time order but for one file of stragglers: with 2 s of
    lateness its rows more than 2 s behind the newest are dropped and counted in the step
    records; the watermark of the first run's checkpoint drops them in the second run. The
    same windows in an `emit_final` view reach its sink once each, when closed."""
    seconds = [range(0, 10), range(10, 20), [3, 12, 18, 21], range(22, 30)]
    (tmp_path / "in").mkdir()
    for i, secs in enumerate(seconds):
        rows = [{"user": f"u{s % 3}", "ts": f"2026-01-01T00:00:{s:02d}Z"} for s in secs]
        (tmp_path / "in" / f"part-{i}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    doc = spec(
        tmp_path,
        """CREATE VIEW w AS SELECT window_start, count(*) AS n
           FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '5' SECOND))
           GROUP BY window_start;
           CREATE VIEW wf WITH ('emit_final' = 'window_end') AS SELECT window_end, count(*) AS n
           FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '5' SECOND))
           GROUP BY window_end""",
    )
    doc["source"].update(
        table="clicks",
        schema={"user": "string", "ts": "timestamp"},
        event_time={"column": "ts", "lateness": "2s"},
    )
    doc["sinks"] = [doc["sinks"][0] | {"from": "w"}, doc["sinks"][1] | {"from": "wf"}]
    doc["checkpoint"] = {"every_steps": 1}
    s = parse_spec(doc)
    for steps in (2, None):  # the stragglers come in the second run
        r = open_runner(s, str(tmp_path / "state"), base_dir=str(tmp_path), spark=spark)
        try:
            r.run(max_steps=steps, stop_when_idle=2.0)
        finally:
            r.close()
    # Watermark after the second file: 19 - 2 = 17 s; so 3 and 12 are late, 18 and 21 not.
    kept = [s for secs in seconds for s in secs if s not in (3, 12) or secs is not seconds[2]]
    want = Counter(s // 5 * 5 for s in kept)
    got = Counter(
        {datetime.fromisoformat(ws).second: n for (ws, n), w in integrated(tmp_path / "a").items()}
    )
    assert integrated(tmp_path / "a").total() == len(want)  # one row per window
    assert got == want
    records = [json.loads(x) for x in (tmp_path / "state" / "metrics.jsonl").open()]
    steps = {r["step"]: r for r in records if "event" not in r and "step" in r}
    assert sum(r["late_rows"] for r in steps.values()) == 2
    # Final watermark 29 - 2 = 27 s: the windows ending at 5-25 s are closed, each sent
    # once as an insertion; the one ending at 30 s is held.
    final = [json.loads(x) for f in sorted((tmp_path / "b").iterdir()) for x in f.open()]
    assert all(r[WEIGHT] == 1 for r in final)
    got_final = [(datetime.fromisoformat(r["window_end"]).second, r["n"]) for r in final]
    assert sorted(got_final) == [(ws + 5, n) for ws, n in sorted(want.items()) if ws + 5 <= 25]


def test_only_live_columns_are_read_and_a_discard_sink_counts_its_rows(
    tmp_path: Path, spark: SparkSession
) -> None:
    """A JSON table's columns no view needs are not read: a value of one that does not
    convert is no error, while one in a column a view reads is a dead letter. A `discard`
    sink computes its view and keeps nothing; its rows count in the step's figures."""
    d = tmp_path / "in"
    d.mkdir()
    lines = [
        {"customer": "a", "amount": 20, "note": 1},
        {"customer": "a", "amount": 30, "note": "not a number"},  # note: no view reads it
        {"customer": "b", "amount": "x", "note": 2},  # amount: a dead letter
        {"customer": "b", "amount": 40, "note": 3},
    ]
    (d / "0001.json").write_text("".join(json.dumps(x) + "\n" for x in lines))
    doc = spec(tmp_path, SQL.split(";")[0])
    doc["source"]["schema"]["note"] = "bigint"
    doc["sinks"] = [
        {**doc["sinks"][0]},
        {"name": "gone", "kind": "discard", "from": "per_customer"},
    ]
    r = open_runner(parse_spec(doc), str(tmp_path / "state"), base_dir=str(tmp_path), spark=spark)
    try:
        r.run(stop_when_idle=2.0)
    finally:
        r.close()
    assert integrated(tmp_path / "a") == Counter({("a", 2, 50): 1, ("b", 1, 40): 1})
    letters = [
        json.loads(x)
        for p in (tmp_path / "state" / "dead-letters").iterdir()
        for x in p.read_text().splitlines()
    ]
    assert [(x["line"], json.loads(x["record"])["amount"]) for x in letters] == [(3, "x")]
    records = [json.loads(x) for x in (tmp_path / "state" / "metrics.jsonl").open()]
    last = [x for x in records if "event" not in x and "step" in x][-1]
    assert last["sinks"]["gone"] == {"rows": 2, "last_step": 1}
    assert not list(tmp_path.glob("**/gone*"))
