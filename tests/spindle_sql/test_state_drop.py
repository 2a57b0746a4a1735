"""A changed query and its checkpoint: the operators whose state no longer fits (changed,
new, or reading a changed one) are named and the restore refused, unless their state is
dropped; then they start empty and every other operator keeps its state."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from spindle_sql.dataflow import Dataflow
from spindle_sql.parse import parse
from spindle_sql.planner import plan
from storage_engine import StorageLocation
from storage_engine.schema import WEIGHT
from workers.runtime.dataflow_run import DataflowRun
from workers.runtime.restore import DROP_ALL, StateError, open_circuit_state

TABLES = {
    "t": pa.schema([("k", pa.int32()), ("g", pa.string()), ("v", pa.int64())]),
    "u": pa.schema([("k", pa.int32()), ("name", pa.string())]),
}
BEFORE = """
CREATE VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS s FROM t GROUP BY g;
CREATE VIEW per_k AS SELECT k, count(*) AS n FROM t WHERE v > 0 GROUP BY k;
CREATE VIEW busy AS SELECT DISTINCT k FROM per_k WHERE n > 1
"""
# per_k's filter changed (and busy reads per_k); a view added in front renumbers every
# internal column, which must not matter to per_g.
AFTER = """
CREATE VIEW early AS SELECT k, upper(name) AS name FROM u;
CREATE VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS s FROM t GROUP BY g;
CREATE VIEW per_k AS SELECT k, count(*) AS n FROM t WHERE v > 10 GROUP BY k;
CREATE VIEW busy AS SELECT DISTINCT k FROM per_k WHERE n > 1
"""


def _delta(rows: list[tuple[int, str, int]]) -> dict[str, pa.Table]:
    cols = list(zip(*rows, strict=True))
    t = pa.table(
        [pa.array(c, f.type) for c, f in zip(cols, TABLES["t"], strict=True)],
        schema=TABLES["t"],
    )
    return {"t": t.append_column(WEIGHT, pa.array([1] * len(rows), pa.int64()))}


def _open(path: Path, sql: str, drop: tuple[str, ...] = ()) -> tuple[DataflowRun, StorageLocation]:
    flow = DataflowRun(Dataflow(plan(parse(sql), TABLES)))
    loc, _ = open_circuit_state(
        str(path), flow, "latest", drop_state=drop, remote=None, fallback=False
    )
    return flow, loc


def _rows(t: pa.Table) -> set[tuple[object, ...]]:
    return {tuple(r.values()) for r in t.to_pylist()}


def test_only_the_operators_a_change_reaches_lose_their_state(tmp_path: Path) -> None:
    flow, loc = _open(tmp_path, BEFORE)
    flow.step(_delta([(1, "a", 20), (1, "a", 30), (2, "b", 5)]))
    flow.commit_async(1, {}).wait_local()
    loc.close()

    with pytest.raises(StateError) as refused:
        _open(tmp_path, AFTER)
    message = str(refused.value)
    assert "per_k.agg0, busy.distinct0 no longer fits" in message
    assert "per_g" not in message and "(step 1)" in message
    with pytest.raises(StateError, match=r"of busy\.distinct0 no longer fits"):
        _open(tmp_path, AFTER, ("per_k.agg0",))

    flow, loc = _open(tmp_path, AFTER, ("per_k.agg0", "busy.distinct0"))
    out = flow.step(_delta([(1, "a", 40)]))
    # per_g kept its state: the group's old row goes, the new one counts all three rows.
    assert _rows(out["per_g"]) == {("a", 2, 50, -1), ("a", 3, 90, 1)}
    # per_k starts empty: only the new row counts; busy, below it, starts empty too.
    assert _rows(out["per_k"]) == {(1, 1, 1)}
    assert out["busy"].num_rows == 0
    flow.commit_async(2, {}).wait_local()
    loc.close()

    # Its checkpoint is the changed query's: the same query restores all of it.
    flow, loc = _open(tmp_path, AFTER)
    out = flow.step(_delta([(1, "a", 50)]))
    assert _rows(out["per_k"]) == {(1, 1, -1), (1, 2, 1)}
    assert _rows(out["busy"]) == {(1, 1)}
    loc.close()


def test_every_operator_that_does_not_fit_with_the_wildcard(tmp_path: Path) -> None:
    flow, loc = _open(tmp_path, BEFORE)
    flow.step(_delta([(1, "a", 20)]))
    flow.commit_async(1, {}).wait_local()
    loc.close()
    flow, loc = _open(tmp_path, AFTER, (DROP_ALL,))
    out = flow.step(_delta([(1, "a", 40)]))
    assert _rows(out["per_g"]) == {("a", 1, 20, -1), ("a", 2, 60, 1)}
    assert _rows(out["per_k"]) == {(1, 1, 1)}
    loc.close()


def test_dropped_operators_may_change_their_state_layout(tmp_path: Path) -> None:
    """An aggregate gaining a column changes its state's layout and renumbers the view's
    later internal columns: it and the join reading it start empty, the other aggregate
    keeps its state although its internal names changed."""
    one = """CREATE VIEW v AS SELECT a.g, a.n, b.m FROM
        (SELECT g, count(*) AS n FROM t GROUP BY g) a JOIN
        (SELECT g, max(v) AS m FROM t WHERE v > 0 GROUP BY g) b ON a.g = b.g"""
    two = one.replace("SELECT a.g, a.n,", "SELECT a.g, a.n, a.s,").replace(
        "count(*) AS n", "count(*) AS n, sum(v) AS s"
    )
    flow, loc = _open(tmp_path, one)
    flow.step(_delta([(1, "a", 5), (2, "b", 7)]))
    flow.commit_async(0, {}).wait_local()
    loc.close()
    with pytest.raises(StateError) as refused:
        _open(tmp_path, two)
    assert "the state of v.agg0, v.join2 no longer fits" in str(refused.value)
    flow, loc = _open(tmp_path, two, (DROP_ALL,))
    try:
        # a starts over (count 1, sum 9); b's kept maximum for 'a' goes from 5 to 9; the
        # emptied join sees only these changes.
        out = _rows(flow.step(_delta([(1, "a", 9)]))["v"])
        assert out == {("a", 1, 9, 9, 1), ("a", 1, 9, 5, -1)}
    finally:
        loc.close()


def test_an_edit_early_in_a_view_leaves_its_later_operators_alone() -> None:
    """A column added to the first aggregate of a view renumbers the view's later internal
    columns; the operators the edit does not reach keep their fingerprints, and a changed
    literal is still a change."""
    one = """CREATE VIEW v AS SELECT a.g, a.n, b.m FROM
        (SELECT g, count(*) AS n FROM t GROUP BY g) a JOIN
        (SELECT g, max(v) AS m FROM t WHERE v > 0 GROUP BY g) b ON a.g = b.g"""
    edits = {
        "an aggregate added to a": one.replace("count(*) AS n", "count(*) AS n, sum(v) AS s"),
        "b's filter": one.replace("v > 0", "v > 1"),
    }
    before = Dataflow(plan(parse(one), TABLES)).circuit.operator_fingerprints
    changed = {}
    for what, sql in edits.items():
        after = Dataflow(plan(parse(sql), TABLES)).circuit.operator_fingerprints
        changed[what] = sorted(i for i, fp in after.items() if before.get(i) != fp)
    assert changed == {
        "an aggregate added to a": ["v.agg0", "v.join2"],
        "b's filter": ["v.agg1", "v.join2"],
    }


def test_window_aggregates_keep_their_ids_and_fingerprints() -> None:
    """Window aggregates of one SELECT sharing PARTITION BY and ORDER BY are one operator
    (each aggregate its own frame); a SELECT with one such aggregate, or with aggregates
    over different windows, keeps the operator ids and fingerprints it had when each item
    was an operator of its own (values from then), so its checkpoints restore. Several
    aggregates over one window were several operators: a query-plan change (docs/sql.md,
    Changing a query)."""
    w = "OVER (PARTITION BY g ORDER BY k ROWS 2 PRECEDING)"
    queries = {
        "one": f"SELECT g, v, sum(v) {w} AS s FROM t",
        "computed": """SELECT g, v, max(v * 2) OVER (PARTITION BY k % 2, g ORDER BY v DESC
            ROWS UNBOUNDED PRECEDING) AS m FROM t""",
        "windows apart": f"""SELECT g, v, sum(v) {w} AS s,
            count(*) OVER (PARTITION BY k ORDER BY v + 1 ROWS 1 PRECEDING) AS n FROM t""",
        "one window": f"SELECT g, v, sum(v) {w} AS s, count(*) {w} AS n FROM t",
    }
    fps = {
        name: Dataflow(plan(parse(f"CREATE VIEW o AS {sql}"), TABLES)).circuit.operator_fingerprints
        for name, sql in queries.items()
    }
    assert fps == {
        "one": {"o.over0": "56abc64b97f2702e91896637d7e6e898"},
        "computed": {"o.over0": "6a92fb3961cd301336fd26312c3e9cd1"},
        "windows apart": {
            "o.over0": "56abc64b97f2702e91896637d7e6e898",
            "o.over1": "8e6d8c9d89337c923951cce53bba1e35",
        },
        # was o.over0 (as "one") and o.over1 (a4318b51f767f2eb32c0a514b1f2d691)
        "one window": {"o.over0": "e3a917182a6617430eec2b722dbcf88c"},
    }
