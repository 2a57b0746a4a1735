"""Columns no read view needs may reach the dataflow as nulls: the read views' outputs are
the same, and so is every operator's state, which a later run reading other views
restores."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from spindle_sql.dataflow import Dataflow
from spindle_sql.liveness import live_columns
from spindle_sql.parse import parse
from spindle_sql.planner import PlannedView, plan
from storage_engine import StorageLocation
from storage_engine.schema import WEIGHT
from workers.runtime.dataflow_run import DataflowRun

TABLES = {
    "t": pa.schema(
        [
            ("k", pa.int64()),
            ("g", pa.string()),
            ("v", pa.int64()),
            ("note", pa.string()),
            ("ts", pa.timestamp("us", tz="UTC")),
        ]
    ),
    "u": pa.schema([("k", pa.int64()), ("name", pa.string()), ("city", pa.string())]),
}
SQL = """
CREATE VIEW wide AS SELECT k, g, v, note, ts FROM t WHERE v > 2;
CREATE VIEW per_g AS SELECT g, count(*) AS n, max(v) AS top FROM wide GROUP BY g;
CREATE VIEW named AS SELECT w.k, w.v, w.note, u.name FROM wide w JOIN u ON w.k = u.k;
CREATE VIEW per_name AS SELECT name, sum(v) AS s FROM named GROUP BY name;
CREATE VIEW windows AS
  SELECT k, count(*) AS n, window_start
  FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND))
  GROUP BY k, window_start, window_end;
CREATE VIEW firsts AS SELECT k, g, v FROM (
  SELECT k, g, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS rn
  FROM (SELECT k, g, v FROM t)
) WHERE rn <= 2;
CREATE VIEW kinds AS SELECT DISTINCT g FROM t;
CREATE VIEW both AS SELECT k, g AS s FROM t UNION ALL SELECT k, city AS s FROM u
"""
# A session window and an outer join whose outputs need columns nothing else does.
SESSIONS = """
CREATE VIEW per_g AS SELECT g, count(*) AS n FROM t GROUP BY g;
CREATE VIEW sessions AS
  SELECT g, note, window_start, window_end
  FROM TABLE(SESSION(TABLE t PARTITION BY g, DESCRIPTOR(ts), INTERVAL '5' SECOND));
CREATE VIEW unmatched AS
  SELECT w.k, w.v, u.city FROM (SELECT k, v FROM t WHERE v > 2) w LEFT JOIN u ON w.k = u.k
"""


# Top-N and distinct alone, so that nothing else keeps their input columns live.
RANKED = """
CREATE VIEW per_k AS SELECT k, count(*) AS n FROM t GROUP BY k;
CREATE VIEW firsts AS SELECT k, g, v FROM (
  SELECT k, g, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS rn FROM t
) WHERE rn <= 2;
CREATE VIEW kinds AS SELECT DISTINCT note FROM t
"""


def _views(sql: str = SQL) -> dict[str, PlannedView]:
    return plan(parse(sql), TABLES)


def _live(read: set[str], sql: str = SQL) -> dict[str, set[str]]:
    return live_columns(_views(sql), read, {"t": "ts"})


def test_only_what_read_views_and_stateful_operators_need_is_live() -> None:
    # Unread views' operators keep complete state: `named`'s join keeps what `named` shows
    # (`note`, `name`), though only `per_g` is read; nothing shows `u.city`.
    assert _live({"per_g"}) == {"t": {"k", "g", "v", "note", "ts"}, "u": {"k", "name"}}
    assert _live({"per_g"}, SESSIONS) == {"t": {"k", "g", "v", "note", "ts"}, "u": {"k", "city"}}

    def live(sql: str, read: set[str]) -> dict[str, set[str]]:
        return live_columns(plan(parse(sql), TABLES), read, {"t": "ts"})

    grouped = "CREATE VIEW a AS SELECT g, count(*) AS n FROM t WHERE v > 0 GROUP BY g"
    assert live(grouped, {"a"}) == {"t": {"g", "v", "ts"}}
    projected = "CREATE VIEW a AS SELECT k, upper(g) AS G FROM t; CREATE VIEW b AS SELECT * FROM u"
    assert live(projected, {"a"}) == {"t": {"k", "g", "ts"}, "u": set()}
    assert live(projected, set()) == {"t": {"ts"}, "u": set()}
    assert live(projected, {"b"})["u"] == {"k", "name", "city"}


def _batch(rng: random.Random, step: int) -> dict[str, pa.Table]:
    t = [
        (
            rng.randrange(6),
            rng.choice(["a", "b", "c", None]),
            step * 3 + rng.randrange(10),
            rng.choice(["x", "y", None]),
            step * 7_000_000 + rng.randrange(7_000_000),
        )
        for _ in range(40)
    ]
    u = [
        (rng.randrange(6), rng.choice(["ann", "bo"]), rng.choice(["oslo", "rome"]))
        for _ in range(3)
    ]
    out = {}
    for name, rows in (("t", t), ("u", u)):
        schema = TABLES[name]
        cols = [pa.array(c, f.type) for c, f in zip(zip(*rows, strict=True), schema, strict=True)]
        table = pa.table(cols, schema=schema)
        out[name] = table.append_column(WEIGHT, pa.array([1] * len(rows), pa.int64()))
    return out


def _nulled(batch: dict[str, pa.Table], live: dict[str, set[str]]) -> dict[str, pa.Table]:
    out = {}
    for name, t in batch.items():
        cols = [
            c if n == WEIGHT or n in live.get(name, set()) else pa.nulls(len(t), c.type)
            for n, c in zip(t.column_names, t.columns, strict=True)
        ]
        out[name] = pa.table(cols, names=t.column_names)
    return out


def _rows(t: pa.Table) -> list[tuple[object, ...]]:
    """A delta's rows with their summed weights (an insert-only delta may repeat a row)."""
    summed: Counter[tuple[object, ...]] = Counter()
    for r in t.to_pylist():
        w = r.pop(WEIGHT)
        summed[tuple(r.values())] += w
    return sorted(((*r, w) for r, w in summed.items() if w != 0), key=repr)


@pytest.mark.parametrize(
    ("sql", "first", "then"),
    [
        (SQL, {"per_g"}, {"per_g", "named"}),
        (SQL, {"windows"}, {"both", "firsts", "kinds"}),
        (SQL, set(), {"per_name", "per_g", "wide"}),
        (SESSIONS, {"per_g"}, {"sessions", "unmatched"}),
        (RANKED, {"per_k"}, {"firsts", "kinds"}),
    ],
)
def test_read_views_and_state_are_those_of_the_whole_input(
    sql: str, first: set[str], then: set[str], tmp_path: Path
) -> None:
    """Steps 1-5 read by `first`'s sinks, then a checkpoint restored by a run whose sinks
    read `then`, steps 6-10: every view read in a step equals its output on the whole
    input."""

    def opened(name: str) -> tuple[Dataflow, StorageLocation]:
        flow = Dataflow(_views(sql))
        loc = StorageLocation.open(str(tmp_path / name), fingerprint=flow.fingerprint)
        DataflowRun(flow).open(loc)
        return flow, loc

    (whole, whole_loc), (pruned, loc) = opened("whole"), opened("pruned")
    rng = random.Random(7)
    for step in range(1, 11):
        read = first if step <= 5 else then
        batch = _batch(rng, step)
        want = whole.step(batch)
        got = pruned.step(_nulled(batch, _live(read, sql)))
        for view in read:
            assert _rows(got[view]) == _rows(want[view]), (step, view)
        if step == 5:
            loc.commit(step=5)
            loc.close()
            pruned, loc = opened("pruned")
    loc.close()
    whole_loc.close()
