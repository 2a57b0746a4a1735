"""Python aggregate functions in SQL views (issue 52), in process: a weighted average that
retracts and merges (incremental) and a median (`middle`) that cannot retract (recomputed
per touched group), alone, together, beside built-in aggregates and without GROUP BY,
over an upserted table whose updates and deletes retract rows. After every step each
view's integral equals DuckDB's query over the live rows, across a restore that redoes
steps. Then what is refused, and a failing aggregate's error."""

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
from spindle_sql.udfs import UdfError
from storage_engine import EngineSettings, StorageLocation
from storage_engine.schema import WEIGHT
from workers.runtime import udfs as runtime_udfs
from workers.runtime.dataflow_run import DataflowRun

CODE = '''
import statistics
import pyarrow.compute as pc


class wavg:
    """sum(price * qty) / sum(qty) over the rows with both."""

    def create(self):
        return [0.0, 0.0]

    def _sums(self, price, qty):
        both = pc.and_(pc.is_valid(price), pc.is_valid(qty))
        p, q = pc.filter(price, both), pc.cast(pc.filter(qty, both), "double")
        return pc.sum(pc.multiply(p, q)).as_py() or 0.0, pc.sum(q).as_py() or 0.0

    def accumulate(self, acc, price, qty):
        s, n = self._sums(price, qty)
        return [acc[0] + s, acc[1] + n]

    def retract(self, acc, price, qty):
        s, n = self._sums(price, qty)
        return [acc[0] - s, acc[1] - n]

    def merge(self, acc, other):
        return [acc[0] + other[0], acc[1] + other[1]]

    def finish(self, acc):
        return acc[0] / acc[1] if acc[1] else None


class middle:
    def create(self):
        return []

    def accumulate(self, acc, x):
        return acc + [v for v in x.to_pylist() if v is not None]

    def finish(self, acc):
        return float(statistics.median(acc)) if acc else None


class picky:
    def create(self):
        return 0

    def accumulate(self, acc, x):
        if "boom" in x.to_pylist():
            raise ValueError("no booms")
        return acc + len(x)

    def finish(self, acc):
        return acc
'''
SQL = """
CREATE VIEW per_city AS
  SELECT city, count(*) AS n, wavg(price, qty) AS w, middle(qty) AS m, max(price) AS top
  FROM orders GROUP BY city;
CREATE VIEW python_only AS SELECT city, middle(price) AS m FROM orders GROUP BY city;
CREATE VIEW overall AS SELECT wavg(price, qty + 1) AS w FROM orders
"""
ORACLE = {
    "per_city": "SELECT city, count(*), {wavg}, median(qty), max(price) FROM orders GROUP BY city",
    "python_only": "SELECT city, median(price) FROM orders GROUP BY city",
    "overall": "SELECT {wavg1} FROM orders",
}
WAVG = (
    "sum(price * qty) FILTER (WHERE price IS NOT NULL AND qty IS NOT NULL) / "
    "nullif(sum(qty) FILTER (WHERE price IS NOT NULL AND qty IS NOT NULL), 0)"
)
FUNCTIONS = [
    {"name": "wavg", "kind": "aggregate", "args": ["double", "int"], "returns": "double"},
    {"name": "middle", "kind": "aggregate", "args": ["double"], "returns": "double"},
    {"name": "picky", "kind": "aggregate", "args": ["string"], "returns": "bigint"},
]


def _spec(sql: str = SQL) -> PipelineSpec:
    return parse_spec(
        {
            "name": "udafs",
            "tables": [
                {
                    "kind": "log",
                    "stream": "orders",
                    "table": "orders",
                    "schema": {"id": "bigint", "city": "string", "price": "double", "qty": "int"},
                    "upsert": {"key": ["id"]},
                }
            ],
            "udfs": {"code": CODE, "functions": FUNCTIONS},
            "sql": sql,
        }
    )


def _records(rng: random.Random, n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for _ in range(n):
        i = rng.randint(0, 14)
        if rng.random() < 0.25:
            out.append({"id": i, "op": "delete"})
        else:
            out.append(
                {
                    "id": i,
                    "city": rng.choice(["lyon", "oslo", None]),
                    "price": rng.choice([1.0, 2.0, 5.0, None]),
                    "qty": rng.choice([1, 2, 3, None]),
                }
            )
    return out


def _oracle(live: dict[Any, dict[str, Any]]) -> dict[str, Counter[Any]]:
    con = duckdb.connect()
    schema = pa.schema(
        [("id", pa.int64()), ("city", pa.string()), ("price", pa.float64()), ("qty", pa.int32())]
    )
    con.register(
        "orders",
        pa.Table.from_pylist(
            [{f.name: r.get(f.name) for f in schema} for r in live.values()], schema
        ),
    )
    wavg1 = WAVG.replace("qty", "(qty + 1)")
    out = {}
    for view, q in ORACLE.items():
        rows = con.execute(q.format(wavg=WAVG, wavg1=wavg1)).fetchall()
        out[view] = Counter(tuple(norm(v) for v in r) for r in rows)
    return out


@pytest.mark.parametrize("seed", range(3))
def test_python_aggregates_equal_duckdb_over_the_live_rows(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    spec = _spec()
    planned = plan_spec(spec, udf_impls=runtime_udfs.load(spec))
    schema = planned.tables["orders"]
    steps = [_records(rng, rng.randint(0, 10)) for _ in range(16)]

    def opened() -> tuple[Dataflow, StorageLocation]:
        flow = Dataflow(planned.views)
        loc = StorageLocation.open(
            str(tmp_path), fingerprint=flow.fingerprint, settings=EngineSettings()
        )
        DataflowRun(flow).open(loc)
        return flow, loc

    flow, loc = opened()
    ops = {op.describe()["kind"] for op in flow.circuit.operators}
    assert "udf_aggregate" in ops
    live: dict[Any, dict[str, Any]] = {}
    got: dict[str, Counter[Any]] = {v: Counter() for v in planned.views}
    saved: Any = None

    def step(i: int) -> None:
        t = pa.Table.from_pylist(
            [{f.name: r.get(f.name) for f in schema} for r in steps[i]], schema
        )
        for view, delta in flow.step({"orders": t}).items():
            for r in delta.to_pylist():
                w = r.pop(WEIGHT)
                got[view][tuple(norm(v) for v in r.values())] += w
        flow.take_unmatched()
        for r in steps[i]:
            if r.get("op") == "delete":
                live.pop(r["id"], None)
            else:
                live[r["id"]] = r
        want = _oracle(live)
        for view in planned.views:
            assert +got[view] == want[view] and min(got[view].values(), default=0) >= 0, (i, view)

    for i in range(len(steps)):
        step(i)
        if i == 7:
            loc.commit(step=i + 1, metadata=flow.checkpoint_metadata())
            saved = (dict(live), {v: Counter(c) for v, c in got.items()})
        if i == 11:
            loc.close()
            flow, loc = opened()
            live, got = dict(saved[0]), {v: Counter(c) for v, c in saved[1].items()}
            for j in range(8, 12):
                step(j)
    loc.close()


def test_an_aggregate_that_raises_names_itself_and_the_group(tmp_path: Path) -> None:
    spec = _spec("CREATE VIEW v AS SELECT city, picky(city) AS n FROM orders GROUP BY city")
    planned = plan_spec(spec, udf_impls=runtime_udfs.load(spec))
    flow = Dataflow(planned.views)
    loc = StorageLocation.open(str(tmp_path), fingerprint=flow.fingerprint)
    DataflowRun(flow).open(loc)
    schema = planned.tables["orders"]
    rows = [{"id": 1, "city": "boom"}, {"id": 2, "city": "lyon"}]
    t = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema)
    with pytest.raises(UdfError) as e:
        flow.step({"orders": t})
    assert (
        "udf picky failed in accumulate on group ('boom'): ValueError: no booms" in e.value.message
    )
    assert "raise ValueError" in e.value.detail  # the function's own line
    loc.close()


def test_what_python_aggregates_refuse() -> None:
    with pytest.raises(SpecError, match=r"a Python aggregate takes no FILTER"):
        plan_spec(
            _spec("CREATE VIEW v AS SELECT middle(price) FILTER (WHERE qty > 1) AS m FROM orders")
        )
    with pytest.raises(SpecError, match="not allowed here"):
        plan_spec(_spec("CREATE VIEW v AS SELECT id FROM orders WHERE middle(qty) > 1"))
    with pytest.raises(SpecError, match="argument 1 is string, declared double"):
        plan_spec(_spec("CREATE VIEW v AS SELECT middle(city) AS m FROM orders"))
    doc = _spec().model_dump(by_alias=True, exclude_none=True)
    doc["udfs"]["code"] = "class wavg:\n    def create(self):\n        return 0\n"
    with pytest.raises(SpecError) as e:
        parse_spec(doc)
    text = str(e.value)
    assert "aggregate 'wavg' (line 1) has no method 'accumulate'" in text
    assert "aggregate 'middle' is not a class" in text
