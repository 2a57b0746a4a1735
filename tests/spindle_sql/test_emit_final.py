"""`emit_final`: a view declared `WITH ('emit_final' = 'window_end')` gives its sinks each
row once, when the watermark has closed its window, and never a retraction. After every
step, its integrated output equals DuckDB's batch query over the rows that were not late,
restricted to the windows (or sessions) whose end is at or below the watermark (a
plain-Python model of the watermark decides both), across a restore; a view reading it sees
its ordinary changes."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from oracles.nexmark import norm
from pipeline_spec.model import SpecError, load_spec
from spindle_sql.dataflow import Dataflow
from spindle_sql.errors import SqlError
from spindle_sql.parse import parse
from spindle_sql.planner import plan
from spindle_sql.spec import plan_spec
from storage_engine import StorageLocation
from storage_engine.schema import WEIGHT
from workers.runtime.dataflow_run import DataflowRun

from .incremental import SETTINGS
from .incremental import delta_table as _table
from .test_dataflow_oracle import TABLES
from .test_watermarks import _SESSIONS, _TUMBLE, EVENT_TIME, _duckdb, _Model, _step_rows

_FINAL = "WITH ('emit_final' = 'window_end')"
# (Spindle SQL, DuckDB's batch query over the rows that were not late; its last column is
# the window's end, in epoch microseconds)
CASES: dict[str, tuple[str, str]] = {
    "tumble": (
        f"""CREATE VIEW out {_FINAL} AS SELECT auction, count(*) AS n, max(price) AS top,
        window_end FROM {_TUMBLE} GROUP BY auction, window_end""",
        """SELECT auction, count(*), max(price), (epoch_us(ts) // 4000000 + 1) * 4000000 AS we
        FROM b WHERE ts IS NOT NULL GROUP BY auction, we""",
    ),
    "sessions": (
        f"""CREATE VIEW out {_FINAL} AS SELECT auction, count(*) AS n, window_start,
        window_end FROM TABLE(SESSION(TABLE b PARTITION BY auction, DESCRIPTOR(ts),
        INTERVAL '2' SECOND)) GROUP BY auction, window_start, window_end""",
        f"""WITH n AS (SELECT *, sum(new) OVER (PARTITION BY auction ORDER BY ts
            ROWS UNBOUNDED PRECEDING) AS s FROM {_SESSIONS})
        SELECT auction, count(*), epoch_us(min(ts)), epoch_us(max(ts) + INTERVAL 2 SECOND)
        FROM n GROUP BY auction, s""",
    ),
    "null_column": (  # a column of NULL's type, held and released as such
        f"""CREATE VIEW out {_FINAL} AS SELECT auction, NULL AS note, count(*) AS n,
        window_end FROM {_TUMBLE} GROUP BY auction, window_end""",
        """SELECT auction, NULL, count(*), (epoch_us(ts) // 4000000 + 1) * 4000000 AS we
        FROM b WHERE ts IS NOT NULL GROUP BY auction, we""",
    ),
    # A view reading the final view sees its changes, not its final rows.
    "reader": (
        f"""CREATE VIEW out {_FINAL} AS SELECT auction, count(*) AS n, window_end
        FROM {_TUMBLE} GROUP BY auction, window_end;
        CREATE VIEW busy AS SELECT window_end, count(*) AS auctions FROM out
        GROUP BY window_end""",
        """SELECT auction, count(*), (epoch_us(ts) // 4000000 + 1) * 4000000 AS we
        FROM b WHERE ts IS NOT NULL GROUP BY auction, we""",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rows_come_once_when_the_watermark_closes_their_window(name: str, tmp_path: Path) -> None:
    sql, oracle = CASES[name]
    views = plan(parse(sql), TABLES)
    rng = random.Random(name)
    model = _Model()
    live: Counter[tuple[Any, ...]] = Counter()
    integral: Counter[tuple[Any, ...]] = Counter()
    busy: Counter[tuple[Any, ...]] = Counter()

    def open_flow(checkpoint: str) -> tuple[DataflowRun, StorageLocation]:
        flow = DataflowRun(Dataflow(views, event_time=EVENT_TIME))
        loc = StorageLocation.open(
            str(tmp_path), fingerprint=flow.fingerprint, settings=SETTINGS, checkpoint=checkpoint
        )
        flow.open(loc)
        return flow, loc

    flow, loc = open_flow("none")
    saved = None
    clock, step = 0.0, 0
    while step < 40:
        step += 1
        clock += rng.uniform(0.3, 1.5)
        rows, weights = _step_rows(rng, clock, live)
        for i in model.admit(rows, weights):
            live[rows[i]] += weights[i]
        outs = flow.step({"b": _table(TABLES["b"], rows, weights)})
        for r in outs["out"].to_pylist():
            w = r.pop(WEIGHT)
            row = tuple(norm(v) for v in r.values())
            assert w > 0 and row not in integral, f"step {step}: {row} emitted again ({w})"
            integral[row] += w
        whole = _duckdb(oracle, live)
        closed = Counter({r: n for r, n in whole.items() if r[-1] <= norm(model.watermark)})
        assert integral == closed, f"step {step}"
        if "busy" in outs:
            for r in outs["busy"].to_pylist():
                w = r.pop(WEIGHT)
                busy[tuple(norm(v) for v in r.values())] += w
            assert busy == Counter(Counter(r[-1] for r in whole.elements()).items())
        if step == 15:
            flow.commit_async(15).wait_local()
            saved = (step, Counter(integral), Counter(live), model.watermark, model.late, +busy)
        if step == 20 and saved is not None:
            loc.close()  # back to step 15: the rows held for their window too
            flow, loc = open_flow("latest")
            step, integral, live, model.watermark, model.late, busy = saved
            integral, live, busy = Counter(integral), Counter(live), Counter(busy)
            saved = None
    assert 0 < sum(integral.values()) < sum(_duckdb(oracle, live).values())
    held = flow.operator_metrics()["out.final"]
    assert held.state_rows > 0 and held.rows_out > 0  # the open windows' rows; final ones
    loc.close()


def test_emit_final_errors_name_the_view_and_its_line() -> None:
    def problems(sql: str) -> list[str]:
        with pytest.raises((SqlError, SpecError)) as e:
            views = plan(parse(sql), TABLES)
            Dataflow(views, event_time=EVENT_TIME)
        err = e.value
        return [str(p) for p in err.problems] if isinstance(err, SqlError) else [str(err)]

    group = "GROUP BY auction, window_end"
    count = f"AS SELECT auction, count(*) AS n, window_end FROM {_TUMBLE} {group}"
    assert problems(f"CREATE VIEW v WITH ('emit_final' = 'nope') {count}") == [
        "line 1, column 1: view 'v': emit_final names 'nope', not one of its columns "
        "(auction, n, window_end)"
    ]
    (unbounded,) = problems(
        "\nCREATE VIEW v WITH ('emit_final' = 'n')\n"
        f"AS SELECT auction, count(*) AS n FROM {_TUMBLE} GROUP BY auction"
    )
    assert unbounded.startswith("line 2, column 1: view 'v': emit_final column 'n' is not")
    assert (
        "unknown view property 'emit'"
        in problems(f"CREATE VIEW v WITH ('emit' = 'window_end') {count}")[0]
    )
    # The spec's validation (no Spark, no storage) reports it at `sql`: without an event
    # time, no column is bounded.
    spec = load_spec(
        "name: p\nsource: {kind: datagen, generator: nexmark, table: bid}\n"
        "sql: |\n  CREATE VIEW v WITH ('emit_final' = 'window_end') AS\n"
        "    SELECT count(*) AS n, window_end FROM TABLE(TUMBLE(TABLE bid,\n"
        "    DESCRIPTOR(date_time), INTERVAL '10' SECOND)) GROUP BY window_end\n"
    )
    with pytest.raises(SpecError) as e:
        plan_spec(spec)
    assert e.value.errors[0][0] == "sql" and "not bounded" in e.value.errors[0][1]


def test_the_dataflow_graph_shows_the_stage_between_the_view_and_its_sinks() -> None:
    from spindle_sql.graph import pipeline_graph

    spec = load_spec(
        "name: p\nsource: {kind: datagen, generator: nexmark, table: bid,\n"
        "  event_time: {column: date_time, lateness: 2s}}\n"
        "sql: |\n  CREATE VIEW v WITH ('emit_final' = 'window_end') AS\n"
        "    SELECT count(*) AS n, window_end FROM TABLE(TUMBLE(TABLE bid,\n"
        "    DESCRIPTOR(date_time), INTERVAL '10' SECOND)) GROUP BY window_end;\n"
        "  CREATE VIEW w AS SELECT max(n) AS most FROM v\n"
        "sinks: [{name: s, kind: discard, from: v}, {name: t, kind: discard, from: w}]\n"
    )
    graph = pipeline_graph(spec)
    kinds = {n.id: n.kind for n in graph.nodes}
    assert kinds["v.final"] == "emit_final"
    edges = set(graph.edges)
    assert {("view:v", "v.final"), ("v.final", "sink:s"), ("view:w", "sink:t")} <= edges
    assert ("view:v", "sink:s") not in edges
    # The view reading v reads its changes, not the final rows.
    assert not any(src == "v.final" and dst != "sink:s" for src, dst in edges)
