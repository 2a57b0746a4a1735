"""Watermarks: a table with an event-time column and a lateness drops the rows that come
later than the watermark, and its views forget the state no later row can reach. After every
step, each view's integrated output equals DuckDB's batch query over the rows that were not
late (a plain-Python model of the watermark decides which), across a restore; the windowed
operators' live state stays bounded while the same views without a watermark keep it all."""

from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from spindle_sql.dataflow import Dataflow
from spindle_sql.parse import parse
from spindle_sql.planner import plan
from spindle_sql.watermarks import EventTime
from storage_engine import StorageLocation
from storage_engine.schema import WEIGHT
from workers.runtime.dataflow_run import DataflowRun

from .incremental import SETTINGS
from .incremental import delta_table as _table
from .test_dataflow_oracle import T0, TABLES, WINDOWED, _norm

LATENESS_S = 3
EVENT_TIME = {"b": EventTime("ts", LATENESS_S * 1_000_000)}

_TUMBLE = "TABLE(TUMBLE(TABLE b, DESCRIPTOR(ts), INTERVAL '4' SECOND))"
_SESSIONS = """(SELECT auction, ts, CASE WHEN ts - lag(ts) OVER (PARTITION BY auction
    ORDER BY ts) < INTERVAL 2 SECOND THEN 0 ELSE 1 END AS new FROM b WHERE ts IS NOT NULL)"""
# (Spindle SQL, DuckDB's batch query over the rows that were not late)
CASES: dict[str, tuple[str, str]] = {
    "tumble": (
        f"""CREATE VIEW out AS SELECT auction, window_start, count(*) AS n, max(price) AS top
        FROM {_TUMBLE} GROUP BY auction, window_start""",
        """SELECT auction, (epoch_us(ts) // 4000000) * 4000000 AS ws, count(*), max(price)
        FROM b WHERE ts IS NOT NULL GROUP BY auction, ws""",
    ),
    "hop_hot_items": WINDOWED["hop_hot_items"],
    "sessions": (
        """CREATE VIEW out AS SELECT auction, count(*) AS n, window_start, window_end
        FROM TABLE(SESSION(TABLE b PARTITION BY auction, DESCRIPTOR(ts), INTERVAL '2' SECOND))
        GROUP BY auction, window_start, window_end""",
        f"""WITH n AS (SELECT *, sum(new) OVER (PARTITION BY auction ORDER BY ts
            ROWS UNBOUNDED PRECEDING) AS s FROM {_SESSIONS})
        SELECT auction, count(*), min(ts), max(ts) + INTERVAL 2 SECOND
        FROM n GROUP BY auction, s""",
    ),
    "distinct_top_bid": (
        f"""CREATE VIEW out AS SELECT DISTINCT window_start, auction FROM (
            SELECT window_start, auction, ROW_NUMBER() OVER (PARTITION BY window_start
            ORDER BY price DESC) AS rn FROM {_TUMBLE}) WHERE rn = 1""",
        """SELECT DISTINCT ws, auction FROM (SELECT (epoch_us(ts) // 4000000) * 4000000
            AS ws, auction, ROW_NUMBER() OVER (PARTITION BY ws ORDER BY price DESC,
            auction, ts) AS rn FROM b WHERE ts IS NOT NULL) WHERE rn = 1""",
    ),
    "left_join_of_windows": (
        f"""CREATE VIEW w AS SELECT auction, window_start, count(*) AS n FROM {_TUMBLE}
        GROUP BY auction, window_start;
        CREATE VIEW out AS SELECT a.auction, a.window_start, a.n, c.n AS cheap FROM w a
        LEFT JOIN (SELECT auction, window_start, count(*) AS n FROM {_TUMBLE}
            WHERE price < 30 GROUP BY auction, window_start) c
        ON a.auction = c.auction AND a.window_start = c.window_start""",
        """WITH w AS (SELECT auction, (epoch_us(ts) // 4000000) * 4000000 AS ws, price
            FROM b WHERE ts IS NOT NULL)
        SELECT a.auction, a.ws, a.n, c.n FROM (SELECT auction, ws, count(*) AS n FROM w
            GROUP BY auction, ws) a LEFT JOIN (SELECT auction, ws, count(*) AS n FROM w
            WHERE price < 30 GROUP BY auction, ws) c ON a.auction = c.auction
            AND a.ws = c.ws""",
    ),
}


class _Model:
    """The watermark by its definition: newest event time so far minus the lateness,
    advanced after each step; a row below the previous step's watermark, or without an
    event time, is late."""

    def __init__(self) -> None:
        self.watermark: Any = None
        self.late = 0

    def admit(self, rows: list[tuple[Any, ...]], weights: list[int]) -> list[int]:
        kept = [
            i
            for i, r in enumerate(rows)
            if r[2] is not None and (self.watermark is None or r[2] >= self.watermark)
        ]
        self.late += len(rows) - len(kept)
        if kept:
            newest = max(rows[i][2] for i in kept) - timedelta(seconds=LATENESS_S)
            if self.watermark is None or newest > self.watermark:
                self.watermark = newest
        return kept


def _duckdb(query: str, rows: Counter[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    con = duckdb.connect()
    listed = [r for r, w in rows.items() for _ in range(w)]
    con.register("b", _table(TABLES["b"], listed, [1] * len(listed)).drop_columns([WEIGHT]))
    return Counter(tuple(_norm(v) for v in r) for r in con.execute(query).fetchall())


def _live_state_rows(loc: StorageLocation) -> int:
    return sum(len(sp.to_batch()) for sp in loc.spines())


def _step_rows(
    rng: random.Random, clock: float, live: Counter[tuple[Any, ...]]
) -> tuple[list[tuple[Any, ...]], list[int]]:
    """Rows around the clock, some far behind it (late), a few without a time, and
    retractions of live rows (late ones too, when their time has fallen behind)."""
    rows: list[tuple[Any, ...]] = []
    for _ in range(rng.randint(4, 14)):
        behind = rng.uniform(0, 12) if rng.random() < 0.2 else rng.uniform(0, 2.5)
        ts = None if rng.random() < 0.04 else T0 + timedelta(seconds=clock - behind)
        rows.append((rng.randint(1, 4), rng.randint(1, 100), ts))
    weights = [1] * len(rows)
    present = list((+live).elements())
    for r in rng.sample(present, min(len(present), rng.randint(0, 2))):
        rows.append(r)
        weights.append(-1)
    return rows, weights


@pytest.mark.parametrize("name", sorted(CASES))
def test_views_equal_the_batch_query_over_rows_not_late(name: str, tmp_path: Path) -> None:
    sql, oracle = CASES[name]
    views = plan(parse(sql), TABLES)
    rng = random.Random(name)
    model = _Model()
    live: dict[str, Counter[tuple[Any, ...]]] = {t: Counter() for t in TABLES}
    integral: Counter[tuple[Any, ...]] = Counter()

    def open_flow(path: Path, checkpoint: str, event_time: bool) -> tuple[DataflowRun, Any]:
        flow = DataflowRun(Dataflow(views, event_time=EVENT_TIME if event_time else None))
        loc = StorageLocation.open(
            str(path), fingerprint=flow.fingerprint, settings=SETTINGS, checkpoint=checkpoint
        )
        flow.open(loc)
        return flow, loc

    flow, loc = open_flow(tmp_path / "wm", "none", True)
    unbounded, uloc = open_flow(tmp_path / "all", "none", False)  # fed the admitted rows
    saved = None
    clock, step, steps = 0.0, 0, 40
    while step < steps:
        step += 1
        clock += rng.uniform(0.3, 1.5)
        rows, weights = _step_rows(rng, clock, live["b"])
        kept = model.admit(rows, weights)
        for i in kept:
            live["b"][rows[i]] += weights[i]
        out = flow.step({"b": _table(TABLES["b"], rows, weights)})["out"]
        admitted = _table(TABLES["b"], [rows[i] for i in kept], [weights[i] for i in kept])
        unbounded.step({"b": admitted})
        for r in out.to_pylist():
            w = r.pop(WEIGHT)
            integral[tuple(_norm(v) for v in r.values())] += w
        assert +integral == integral, f"negative weights after step {step}"
        assert integral == _duckdb(oracle, live["b"]), f"step {step}"
        assert flow.flow.watermarks.late_rows["b"] == model.late, f"step {step}"
        if step == 15:
            flow.commit_async(15).wait_local()
            saved = (step, Counter(integral), Counter(live["b"]), model.watermark, model.late)
        if step == 20 and saved is not None:
            loc.close()  # back to step 15: the watermark too
            flow, loc = open_flow(tmp_path / "wm", "latest", True)
            step, integral, live["b"] = saved[0], Counter(saved[1]), Counter(saved[2])
            model.watermark, model.late = saved[3], saved[4]
            saved = None
    assert model.late > 0
    kept_rows, all_rows = _live_state_rows(loc), _live_state_rows(uloc)
    assert kept_rows < all_rows / 2, (kept_rows, all_rows)
    loc.close()
    uloc.close()


def test_state_below_the_watermark_goes_per_operator(tmp_path: Path) -> None:
    """Which operators forget: every one keyed by a window bound (moved to the front of
    its keys), and none over a key the watermark does not bound."""
    sql = f"""CREATE VIEW per_window AS SELECT auction, window_start, count(*) AS n
        FROM {_TUMBLE} GROUP BY auction, window_start;
        CREATE VIEW per_auction AS SELECT auction, count(*) AS n FROM b GROUP BY auction"""
    flow = Dataflow(plan(parse(sql), TABLES), event_time=EVENT_TIME)
    leads = {st.op.id: set(st.leads) for st in flow._stateful.values()}
    assert leads == {"per_window.agg0": {"in"}, "per_auction.agg0": set()}
    without = Dataflow(plan(parse(sql), TABLES))
    assert (
        without.circuit.operator_fingerprints["per_auction.agg0"]
        == (flow.circuit.operator_fingerprints["per_auction.agg0"])
    )
    loc = StorageLocation.open(str(tmp_path), fingerprint=flow.fingerprint, settings=SETTINGS)
    DataflowRun(flow).open(loc)
    for second in range(0, 60, 2):
        ts = T0 + timedelta(seconds=second)
        flow.step({"b": _table(TABLES["b"], [(second % 5, 1, ts)], [1])})
    groups = {sp.op_id: len(sp.to_batch()) for sp in loc.spines()}
    assert groups["per_window.agg0.acc"] == 4  # two open windows, two auctions each
    assert groups["per_auction.agg0.acc"] == 5
    late = _table(TABLES["b"], [(1, 1, T0), (1, 1, None)], [1, 1])
    out = flow.step({"b": late})
    assert all(t.num_rows == 0 for t in out.values())
    assert flow.watermarks.late_rows == {"b": 2}
    loc.close()


def test_event_time_column_errors() -> None:
    from pipeline_spec.model import SpecError, load_spec
    from spindle_sql.spec import plan_spec

    base = "name: p\nsource: {kind: datagen, generator: nexmark, table: events, %s}\n"
    body = "sql: CREATE VIEW v AS SELECT * FROM events\n"
    for event_time, message in [
        ("event_time: {column: nope}", "'nope' is not a column"),
        ("event_time: {column: bid_price}", "the event time is a timestamp"),
    ]:
        with pytest.raises(SpecError) as e:
            plan_spec(load_spec(base % event_time + body))
        assert e.value.errors[0][0] == "source.event_time.column"
        assert message in e.value.errors[0][1]
    with pytest.raises(SpecError, match="lateness"):
        load_spec(base % "event_time: {column: date_time, lateness: -1}" + body)
    spec = load_spec(base % "event_time: {column: date_time, lateness: 2.5s}" + body)
    assert plan_spec(spec).event_time["events"] == EventTime("date_time", 2_500_000)
    with pytest.raises(SpecError, match=r"source\.event_time"):
        load_spec(
            "name: p\nsource: {kind: datagen, event_time: {column: ts}}\n"
            "state: [{name: a, kind: distinct, columns: [user]}]\n"
        )
    assert pa.types.is_timestamp(TABLES["b"].field("ts").type)
