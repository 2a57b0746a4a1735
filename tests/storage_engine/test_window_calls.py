"""`RowsOver`'s window functions (ROW_NUMBER, RANK, DENSE_RANK, LAG, LEAD) and RANGE frames
against a plain-Python model: after every step of random inserts and retractions (with
duplicates, ties and NULLs in the order), the integral of the output equals the model's
answer over the live rows, across a checkpoint and restore (`check_against_model`)."""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from storage_engine.circuit import Aggregate, Circuit, CircuitError, RowsOver, WindowCall

from ..conftest import trials
from .test_circuit import SCHEMA, Row, agg_row, check_against_model, history, open_circuit, table

CALLS = [
    WindowCall("rn", "row_number"),
    WindowCall("rk", "rank"),
    WindowCall("dr", "dense_rank"),
    WindowCall("l1", "lag", "y"),
    WindowCall("l2", "lag", "y", 2, "y"),
    WindowCall("f1", "lead", "x"),
    WindowCall("f2", "lead", "y", -1, "y"),  # a negative offset looks back
]
# (aggregate, RANGE offset: None unbounded)
RANGED = [
    (Aggregate("n", "count"), None),
    (Aggregate("sy", "sum", "y"), 2),
    (Aggregate("my", "min", "y"), 1),
    (Aggregate("Mx", "max", "x"), 0),
    (Aggregate("ay", "avg", "y"), None),
    (Aggregate("nx", "count", "x"), 3),
]


def _sorted_groups(live: Counter[Row], desc: bool) -> list[list[Row]]:
    """Each g's rows (duplicates repeated) in the operator's order: x (NULLs first
    ascending, last descending), then y ascending, NULLs first."""
    groups: dict[Any, list[Row]] = {}
    for r, m in live.items():
        groups.setdefault(r[0], []).extend([r] * m)

    def key(r: Row) -> tuple[Any, ...]:
        x = (
            (r[1] is None, -r[1] if r[1] is not None else 0)
            if desc
            else (r[1] is not None, r[1] or 0)
        )
        return (*x, r[2] is not None, r[2] or 0.0)

    return [sorted(rows, key=key) for rows in groups.values()]


def _at(rows: list[Row], j: int, col: int, default: Any = None) -> Any:
    return rows[j][col] if 0 <= j < len(rows) else default


def model_calls(live: Counter[Row], desc: bool) -> Counter[Row]:
    out: Counter[Row] = Counter()
    for rows in _sorted_groups(live, desc):
        for i, r in enumerate(rows):
            before = [s for s in rows[:i] if s[1] != r[1]]  # rows before the peers of r
            values = (
                i + 1,
                len(before) + 1,
                len({s[1] for s in before}) + 1,
                _at(rows, i - 1, 2),
                _at(rows, i - 2, 2, r[2]),
                _at(rows, i + 1, 1),
                _at(rows, i - 1, 2, r[2]),
            )
            out[(*r, *values)] += 1
    return out


def model_ranged(live: Counter[Row], desc: bool) -> Counter[Row]:
    out: Counter[Row] = Counter()
    for rows in _sorted_groups(live, desc):
        for r in rows:
            frames = []
            for _, offset in RANGED:
                if r[1] is None:  # NULLs are peers of NULLs only
                    within = [s for s in rows if s[1] is None]
                    if offset is None:  # unbounded: every row up to the last peer
                        last = max(j for j, s in enumerate(rows) if s[1] is None)
                        within = rows[: last + 1]
                elif offset is None:
                    last = max(j for j, s in enumerate(rows) if s[1] == r[1])
                    within = rows[: last + 1]
                elif desc:
                    within = [s for s in rows if s[1] is not None and r[1] <= s[1] <= r[1] + offset]
                else:
                    within = [s for s in rows if s[1] is not None and r[1] - offset <= s[1] <= r[1]]
                frames.append(within)
            ys = [[s[2] for s in f if s[2] is not None] for f in frames]
            xs = [[s[1] for s in f if s[1] is not None] for f in frames]
            values = (
                len(frames[0]),
                sum(ys[1]) if ys[1] else None,
                min(ys[2]) if ys[2] else None,
                max(xs[3]) if xs[3] else None,
                sum(ys[4]) / len(ys[4]) if ys[4] else None,
                len(xs[5]),
            )
            out[(*r, *values)] += 1
    return out


@pytest.mark.parametrize(
    ("seed", "desc"), [(s, d) for s in range(trials(3, 2)) for d in (False, True)]
)
def test_window_calls_match_the_model(tmp_path: Path, seed: int, desc: bool) -> None:
    """ROW_NUMBER, RANK (gaps after ties), DENSE_RANK (none), LAG and LEAD with offsets and
    defaults, under retractions and a restore."""
    rng = random.Random(seed)
    steps = history(rng, 40, agg_row)

    def make() -> Circuit:
        return Circuit([RowsOver("over", SCHEMA, ["g"], [("x", desc)], None, CALLS)])

    check_against_model(tmp_path, make, SCHEMA, steps, lambda live: model_calls(live, desc))


@pytest.mark.parametrize(
    ("seed", "desc"), [(s, d) for s in range(trials(3, 2)) for d in (False, True)]
)
def test_range_frames_match_the_model(tmp_path: Path, seed: int, desc: bool) -> None:
    """Aggregates over RANGE frames (n PRECEDING and unbounded, ending at the last peer),
    with NULL order values peers of each other only, under retractions and a restore."""
    rng = random.Random(seed)
    steps = history(rng, 40, agg_row)
    aggs = [a for a, _ in RANGED]
    offsets = tuple(p for _, p in RANGED)

    def make() -> Circuit:
        op = RowsOver("over", SCHEMA, ["g"], [("x", desc)], offsets, aggs, ranges=[True] * 6)
        return Circuit([op])

    check_against_model(tmp_path, make, SCHEMA, steps, lambda live: model_ranged(live, desc))


def _unit(v: Any) -> float:
    """A timestamp in microseconds, a date in days."""
    return float(v.timestamp() * 1e6) if isinstance(v, dt.datetime) else float(v.toordinal())


def test_range_frames_over_timestamps(tmp_path: Path) -> None:
    """A RANGE offset over a timestamp is in microseconds; over a date, in days."""
    schema = pa.schema([("t", pa.timestamp("us", tz="UTC")), ("d", pa.date32()), ("v", pa.int64())])
    rng = random.Random(7)
    base = 1_700_000_000_000_000

    def row(rng: random.Random) -> Row:
        t = base + rng.randint(0, 6) * 1_000_000
        return (
            pa.scalar(t, schema.field("t").type).as_py(),
            pa.scalar(19000 + rng.randint(0, 5), pa.date32()).as_py(),
            rng.randint(0, 9),
        )

    steps = history(rng, 30, row)
    for column, offset in (("t", 2_000_000), ("d", 2)):

        def make(column: str = column, offset: int = offset) -> Circuit:
            aggs = [Aggregate("s", "sum", "v")]
            return Circuit(
                [
                    RowsOver(
                        f"over_{column}", schema, [], [(column, False)], offset, aggs, ranges=[True]
                    )
                ]
            )

        def model(live: Counter[Row], column: str = column, offset: int = offset) -> Counter[Row]:
            i = schema.names.index(column)
            out: Counter[Row] = Counter()
            for r, m in live.items():
                gap = [
                    q[2] * k for q, k in live.items() if 0 <= _unit(r[i]) - _unit(q[i]) <= offset
                ]
                s = sum(gap)
                out[(*r, s)] += m
            return out

        check_against_model(tmp_path / column, make, schema, steps, model)


def test_an_operator_without_them_describes_as_before() -> None:
    """Fingerprints of operators with ROWS frames only are those of before (values from the
    frames-per-aggregate test); RANGE frames and window calls make a different operator."""
    schema = pa.schema([("g", pa.string()), ("o", pa.int64()), ("x", pa.int64())])
    one = [Aggregate("s", "sum", "x")]

    def fp(**kw: Any) -> str:
        return Circuit([RowsOver("over", schema, ["g"], [("o", False)], 2, one, **kw)]).fingerprint

    assert fp() == fp(ranges=[False]) == "2de8d3fe587c845b2756ccccb51c13e6"
    assert fp(ranges=[True]) != fp()
    calls = Circuit(
        [RowsOver("over", schema, ["g"], [("o", False)], None, [WindowCall("r", "rank")])]
    )
    assert calls.fingerprint != fp()


def test_range_offsets_need_one_numeric_order_column() -> None:
    schema = pa.schema([("g", pa.string()), ("o", pa.int64())])
    with pytest.raises(CircuitError, match="RANGE frame with an offset"):
        RowsOver("over", schema, [], [("g", False)], 1, [Aggregate("n", "count")], ranges=[True])
    with pytest.raises(CircuitError, match="RANGE frame with an offset"):
        RowsOver(
            "o2",
            schema,
            [],
            [("o", False), ("g", False)],
            1,
            [Aggregate("n", "count")],
            ranges=[True],
        )


def test_nan_is_a_peer_of_nan_and_one_partition(tmp_path: Path) -> None:
    """NaN equals NaN where SQL groups values (Spark, DuckDB): NaN rows are peers (one
    RANK) and NaN partition keys one partition (ROW_NUMBER 1, 2, ...)."""
    nan = float("nan")
    schema = pa.schema([("g", pa.float64()), ("x", pa.float64()), ("i", pa.int64())])
    rows = [(nan, nan, 1), (nan, nan, 2), (nan, 1.0, 3), (1.0, nan, 4)]
    calls = [WindowCall("rn", "row_number"), WindowCall("rk", "rank")]
    c, loc = open_circuit(
        tmp_path,
        lambda: Circuit([RowsOver("o", schema, ["g"], [("x", False)], None, calls)]),
        "none",
    )
    out = c.step({"source": table([(r, 1) for r in rows], schema)})["o"].to_pylist()
    loc.close()
    got = sorted((r["i"], r["rn"], r["rk"]) for r in out)
    # Arrow sorts NaN after the numbers ascending, as Spark does.
    assert got == [(1, 2, 2), (2, 3, 2), (3, 1, 1), (4, 1, 1)]
