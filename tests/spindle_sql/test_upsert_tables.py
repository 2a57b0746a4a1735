"""Tables fed by upserts and deletes (issue 52): a `log` table with `upsert` is the live rows
its records leave, and every view over it (a join, an aggregate, a filter) sees updates and
deletes as retractions: after every step each view's integral equals the same query run by
DuckDB over the table's live rows, kept by a plain-Python model of the records, across a
restore that redoes steps."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from oracles.nexmark import norm
from pipeline_spec.model import PipelineSpec, SpecError, parse_spec
from spindle_sql.dataflow import Dataflow
from spindle_sql.spec import plan_spec
from storage_engine import EngineSettings, StorageLocation
from storage_engine.schema import WEIGHT
from workers.runtime.dataflow_run import DataflowRun

SQL = """
CREATE VIEW per_city AS
  SELECT city, count(*) AS customers, sum(credit) AS credit FROM customers GROUP BY city;
CREATE VIEW big_orders AS
  SELECT o.id, c.name, o.amount FROM orders o JOIN customers c ON o.customer = c.id
  WHERE o.amount > 50;
CREATE VIEW open_orders AS SELECT id, amount FROM orders WHERE amount IS NOT NULL
"""


def _spec(**more: Any) -> PipelineSpec:
    return parse_spec(
        {
            "name": "upserts",
            "tables": [
                {
                    "kind": "log",
                    "stream": "customers",
                    "table": "customers",
                    "schema": {"id": "bigint", "name": "string", "city": "string", "credit": "int"},
                    "upsert": {"key": ["id"]},
                },
                {
                    "kind": "log",
                    "stream": "orders",
                    "table": "orders",
                    "schema": {"id": "bigint", "customer": "bigint", "amount": "double"},
                    "upsert": {"key": ["id"], "op_column": "change"},
                },
            ],
            "sql": SQL,
            **more,
        }
    )


Record = dict[str, Any]


def _customers(rng: random.Random, n: int) -> list[Record]:
    out = []
    for _ in range(n):
        i = rng.randint(0, 9)
        if rng.random() < 0.25:
            out.append({"id": i, "op": rng.choice(["delete", "D"])})
        else:
            out.append(
                {
                    "id": i,
                    "name": f"n{rng.randint(0, 3)}",
                    "city": rng.choice(["lyon", "oslo", None]),
                    "credit": rng.choice([10, 20, None]),
                    "op": rng.choice([None, "upsert"]),
                }
            )
    return out


def _orders(rng: random.Random, n: int) -> list[Record]:
    out = []
    for _ in range(n):
        i = rng.randint(100, 120)
        if rng.random() < 0.2:
            out.append({"id": i, "change": "delete"})
        else:
            amount = rng.choice([20.0, 60.0, 99.5, None])
            out.append({"id": i, "customer": rng.randint(0, 11), "amount": amount})
    return out


def _table(records: list[Record], schema: pa.Schema) -> pa.Table:
    t = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in records], schema)
    return t.append_column(WEIGHT, pa.array([1] * t.num_rows, pa.int64()))


def _apply(live: dict[Any, Record], records: list[Record], op: str) -> int:
    """The records on the model, in order; how many deleted a key without a row."""
    unmatched = 0
    for r in records:
        if str(r.get(op) or "").lower() in ("delete", "d"):
            unmatched += r["id"] not in live
            live.pop(r["id"], None)
        else:
            live[r["id"]] = {k: v for k, v in r.items() if k != op}
    return unmatched


def _oracle(customers: dict[Any, Record], orders: dict[Any, Record]) -> dict[str, Counter[Any]]:
    con = duckdb.connect()
    c_schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("city", pa.string()),
                          ("credit", pa.int32())])  # fmt: skip
    o_schema = pa.schema([("id", pa.int64()), ("customer", pa.int64()), ("amount", pa.float64())])
    c = pa.Table.from_pylist(
        [{f.name: r.get(f.name) for f in c_schema} for r in customers.values()], c_schema
    )
    o = pa.Table.from_pylist(
        [{f.name: r.get(f.name) for f in o_schema} for r in orders.values()], o_schema
    )
    con.register("customers", c)
    con.register("orders", o)
    out = {}
    for stmt in SQL.strip().split(";"):
        name, query = stmt.split(" AS", 1)
        name = name.split()[-1]
        out[name] = Counter(tuple(norm(v) for v in r) for r in con.execute(query).fetchall())
    return out


@pytest.mark.parametrize("seed", range(3))
def test_views_over_upserted_tables_equal_duckdb_over_the_live_rows(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    planned = plan_spec(_spec())
    schemas = planned.tables
    assert schemas["customers"].names[-1] == "op" and schemas["orders"].names[-1] == "change"
    steps = [
        (_customers(rng, rng.randint(0, 12)), _orders(rng, rng.randint(0, 12))) for _ in range(16)
    ]

    def opened() -> tuple[Dataflow, StorageLocation]:
        flow = Dataflow(planned.views)
        loc = StorageLocation.open(
            str(tmp_path), fingerprint=flow.fingerprint, settings=EngineSettings()
        )
        DataflowRun(flow).open(loc)
        return flow, loc

    flow, loc = opened()
    customers: dict[Any, Record] = {}
    orders: dict[Any, Record] = {}
    got: dict[str, Counter[Any]] = {v: Counter() for v in planned.views}
    saved: Any = None
    seen: set[str] = set()  # views that had rows at some step

    def step(i: int) -> None:
        cs, os_ = steps[i]
        out = flow.step(
            {
                "customers": _table(cs, schemas["customers"]),
                "orders": _table(os_, schemas["orders"]),
            }
        )
        for view, delta in out.items():
            for r in delta.to_pylist():
                w = r.pop(WEIGHT)
                got[view][tuple(norm(v) for v in r.values())] += w
        unmatched = flow.take_unmatched()
        assert unmatched["customers"].column_names == ["id", "name", "city", "credit"]
        assert unmatched["customers"].num_rows == _apply(customers, cs, "op")
        assert unmatched["orders"].num_rows == _apply(orders, os_, "change")
        want = _oracle(customers, orders)
        for view in planned.views:
            assert +got[view] == want[view] and min(got[view].values(), default=0) >= 0, (i, view)
        seen.update(v for v in planned.views if got[v])

    for i in range(len(steps)):
        step(i)
        if i == 7:
            loc.commit(step=i + 1, metadata=flow.checkpoint_metadata())
            saved = (dict(customers), dict(orders), {v: Counter(c) for v, c in got.items()})
        if i == 11:  # restart from the checkpoint after step 8: redo steps 9..12
            loc.close()
            flow, loc = opened()
            customers, orders = dict(saved[0]), dict(saved[1])
            got = {v: Counter(c) for v, c in saved[2].items()}
            assert loc.step == 8
            for j in range(8, 12):
                step(j)
    loc.close()
    assert seen == set(planned.views)  # no view was empty throughout


def test_upsert_settings_are_checked() -> None:
    def log(**upsert: Any) -> dict[str, Any]:
        return {"kind": "log", "stream": "c", "schema": {"id": "bigint"}, "upsert": upsert}

    sql = "CREATE VIEW v AS SELECT id FROM input"
    with pytest.raises(SpecError, match=r"upsert\.key: \['nope'\]"):
        parse_spec({"name": "x", "tables": [log(key=["nope"])], "sql": sql})
    with pytest.raises(SpecError, match="op_column"):
        parse_spec({"name": "x", "tables": [log(key=["id"], op_column="id")], "sql": sql})
    with pytest.raises(SpecError, match="needs sql"):
        ops = [{"name": "d", "kind": "distinct"}]
        parse_spec({"name": "x", "source": log(key=["id"]), "state": ops})
