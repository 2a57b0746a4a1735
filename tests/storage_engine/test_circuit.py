"""Circuit operators against a plain-Python reference: after every step, the sum of all
output deltas must equal the operator's result recomputed from scratch over the sum of all
input deltas (with retractions, nulls, restores from checkpoints in between)."""

from __future__ import annotations

import datetime as dt
import math
import random
from collections import Counter
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from storage_engine import EngineSettings, StorageLocation
from storage_engine.circuit import (
    Aggregate,
    Circuit,
    CircuitError,
    Distinct,
    GroupAggregate,
    Join,
    RowsOver,
    SessionWindows,
    TopN,
    WindowAggregate,
)
from storage_engine.schema import WEIGHT

from ..conftest import trials

SETTINGS = EngineSettings(block_rows=32, merge_base_rows=32, merge_fanout=3)
SCHEMA = pa.schema([("g", pa.string()), ("x", pa.int64()), ("y", pa.float64())])
AGGS = [
    Aggregate("n", "count"),
    Aggregate("nx", "count", "x"),
    Aggregate("sx", "sum", "x"),
    Aggregate("ay", "avg", "y"),
    Aggregate("mx", "min", "x"),
    Aggregate("Mx", "max", "x"),
    Aggregate("my", "min", "y"),
]

Row = tuple[Any, ...]


def table(rows: Iterable[tuple[Row, int]], schema: pa.Schema) -> pa.Table:
    rows = list(rows)
    cols = list(zip(*[r for r, _ in rows], strict=True)) if rows else [[] for _ in schema]
    arrays = [pa.array(list(c), f.type) for c, f in zip(cols, schema, strict=True)]
    t = pa.Table.from_arrays(arrays, schema=schema)
    return t.append_column(WEIGHT, pa.array([w for _, w in rows], pa.int64()))


def integrate(acc: Counter[Row], delta: pa.Table) -> None:
    names = [n for n in delta.column_names if n != WEIGHT]
    for r in delta.to_pylist():
        acc[tuple(r[n] for n in names)] += r[WEIGHT]
        if acc[tuple(r[n] for n in names)] == 0:
            del acc[tuple(r[n] for n in names)]


def history(rng: random.Random, steps: int, make: Any) -> list[list[tuple[Row, int]]]:
    """Steps of inserts and retractions of rows present (multiplicities stay >= 0)."""
    live: Counter[Row] = Counter()
    out = []
    for _ in range(steps):
        step = []
        for _ in range(rng.randint(0, 12)):
            if live and rng.random() < 0.35:
                r = rng.choice(sorted(live, key=repr))
                live[r] -= 1
                if not live[r]:
                    del live[r]
                step.append((r, -1))
            else:
                r = make(rng)
                live[r] += 1
                step.append((r, 1))
        out.append(step)
    return out


def agg_row(rng: random.Random) -> Row:
    g = rng.choice(["a", "b", "c", None])
    x = rng.choice([None, *range(-3, 6)])
    y = rng.choice([None, 0.5, 1.25, -2.0, 3.0])
    return (g, x, y)


def model_aggregate(live: Counter[Row]) -> Counter[Row]:
    groups: dict[Any, list[tuple[Row, int]]] = {}
    for r, m in live.items():
        if m > 0:
            groups.setdefault(r[0], []).append((r, m))
    out: Counter[Row] = Counter()
    for g, rows in groups.items():
        xs = [r[1] for r, m in rows for _ in range(m) if r[1] is not None]
        ys = [r[2] for r, m in rows for _ in range(m) if r[2] is not None]
        n = sum(m for _, m in rows)
        out[
            (
                g,
                n,
                len(xs),
                sum(xs) if xs else None,
                sum(ys) / len(ys) if ys else None,
                min(xs) if xs else None,
                max(xs) if xs else None,
                min(ys) if ys else None,
            )
        ] += 1
    return out


def _close(a: Counter[Row], b: Counter[Row]) -> bool:
    """Equal, with float columns compared approximately (sums of floats in another order)."""

    def norm(c: Counter[Row]) -> list[Any]:
        rounded = [
            (tuple(round(v, 9) if isinstance(v, float) else v for v in r), m) for r, m in c.items()
        ]
        return sorted(rounded, key=repr)

    return norm(a) == norm(b)


def open_circuit(path: Path, make: Any, checkpoint: str | None = "latest") -> Any:
    circuit = make()
    loc = StorageLocation.open(
        str(path), fingerprint=circuit.fingerprint, settings=SETTINGS, checkpoint=checkpoint
    )
    circuit.open(loc)
    return circuit, loc


def check_against_model(
    tmp_path: Path, make: Any, schema: pa.Schema, steps: list[list[tuple[Row, int]]], model: Any
) -> None:
    """Step the one operator of `make()` through `steps`; after each, the integral of its
    output equals `model(live rows)`; after step 20 (if there are that many), the state is
    checkpointed and the operator restored from it."""
    c, loc = open_circuit(tmp_path, make, "none")
    op = c.operators[0].id
    live: Counter[Row] = Counter()
    out: Counter[Row] = Counter()
    for i, step in enumerate(steps):
        integrate(out, c.step({"source": table(step, schema)})[op])
        for r, w in step:
            live[r] += w
            if not live[r]:
                del live[r]
        assert out == model(live), f"step {i}"
        if i == 20:
            loc.commit(step=i)
            loc.close()
            c, loc = open_circuit(tmp_path, make)
    loc.close()


LINEAR_AGGS = AGGS[:4]  # no min/max: the accumulators are added by position


def model_linear(live: Counter[Row]) -> Counter[Row]:
    return Counter({r[:5]: m for r, m in model_aggregate(live).items()})


@pytest.mark.parametrize(
    ("aggs", "model"), [(AGGS, model_aggregate), (LINEAR_AGGS, model_linear)], ids=["all", "linear"]
)
@pytest.mark.parametrize("seed", range(trials(6, 2)))
def test_group_aggregate_matches_the_model(
    tmp_path: Path, seed: int, aggs: list[Aggregate], model: Any
) -> None:
    rng = random.Random(seed)
    steps = history(rng, 40, agg_row)

    def make() -> Circuit:
        return Circuit([GroupAggregate("agg", SCHEMA, ["g"], aggs)])

    circuit, loc = open_circuit(tmp_path, make)
    live: Counter[Row] = Counter()
    out: Counter[Row] = Counter()
    snapshots: dict[int, tuple[Counter[Row], Counter[Row]]] = {}
    for i, step in enumerate(steps, start=1):
        delta = circuit.step({"source": table(step, SCHEMA)})["agg"]
        for r, w in step:
            live[r] += w
        integrate(out, delta)
        assert all(m == 1 for m in out.values()), out
        assert _close(out, model(live)), (i, sorted(out), sorted(model(live)))
        if i % 10 == 0:
            circuit.commit_async(i).wait_local()
            snapshots[i] = (Counter(live), Counter(out))
        if i == 25:  # restart from the checkpoint at step 20: redo steps 21..25
            loc.close()
            circuit, loc = open_circuit(tmp_path, make)
            assert loc.step == 20
            live, out = (Counter(c) for c in snapshots[20])
            for j in range(21, 26):
                integrate(out, circuit.step({"source": table(steps[j - 1], SCHEMA)})["agg"])
                for r, w in steps[j - 1]:
                    live[r] += w
            assert _close(out, model(live))
    loc.close()


@pytest.mark.parametrize("group_by", [["g"], []], ids=["grouped", "global"])
@pytest.mark.parametrize(
    ("aggs", "model"), [(AGGS, model_aggregate), (LINEAR_AGGS, model_linear)], ids=["all", "linear"]
)
@pytest.mark.parametrize("seed", range(trials(4, 2)))
def test_group_aggregate_from_partials_matches_the_model(
    tmp_path: Path, seed: int, aggs: list[Aggregate], model: Any, group_by: list[str]
) -> None:
    """Each step's rows cut into three parts at random, each part reduced alone
    (`partial`, as a shard does), the parts' partials concatenated and applied: the
    output is the model's, across a restore, as if the operator had stepped on the rows."""
    rng = random.Random(seed)
    steps = history(rng, 30, agg_row if group_by else lambda r: (None, *agg_row(r)[1:]))

    def make() -> Circuit:
        return Circuit([GroupAggregate("agg", SCHEMA, group_by, aggs)])

    circuit, loc = open_circuit(tmp_path, make)
    live: Counter[Row] = Counter()
    out: Counter[Row] = Counter()
    for i, step in enumerate(steps, start=1):
        op = circuit.operators[0]
        cuts = sorted(rng.randint(0, len(step)) for _ in range(2))
        parts = [step[: cuts[0]], step[cuts[0] : cuts[1]], step[cuts[1] :]]
        partials: dict[str, list[pa.Table]] = {}
        for part in parts:
            for name, t in op.partial(table(part, SCHEMA)).items():
                partials.setdefault(name, []).append(t)
        merged = {name: pa.concat_tables(ts) for name, ts in partials.items()}
        delta = op.apply_partials(merged)
        for r, w in step:
            live[r] += w
        integrate(out, delta if group_by else _with_key(delta))
        assert _close(out, model(live)), (i, sorted(out), sorted(model(live)))
        if i == 15:
            circuit.commit_async(i).wait_local()
            loc.close()
            circuit, loc = open_circuit(tmp_path, make)
    loc.close()


def _with_key(delta: pa.Table) -> pa.Table:
    """A global aggregate's rows with the model's (NULL) group column first."""
    return delta.add_column(0, "g", pa.nulls(delta.num_rows, pa.string()))


def test_global_aggregate_without_group_by(tmp_path: Path) -> None:
    c = Circuit(
        [GroupAggregate("all", SCHEMA, [], [Aggregate("n", "count"), Aggregate("s", "sum", "x")])]
    )
    loc = StorageLocation.open(str(tmp_path), fingerprint=c.fingerprint, settings=SETTINGS)
    c.open(loc)
    out: Counter[Row] = Counter()
    integrate(
        out, c.step({"source": table([(("a", 1, None), 1), (("b", 2, None), 1)], SCHEMA)})["all"]
    )
    assert out == Counter({(2, 3): 1})
    integrate(out, c.step({"source": table([(("a", 1, None), -1)], SCHEMA)})["all"])
    assert out == Counter({(1, 2): 1})
    integrate(out, c.step({"source": table([(("b", 2, None), -1)], SCHEMA)})["all"])
    assert out == Counter()  # no rows, no group
    loc.close()


def test_decimal_sums_and_min_max_of_a_group_key(tmp_path: Path) -> None:
    """Decimal sums widen by ten digits and averages by four digits of scale (as Spark's)
    and survive retractions; min/max of a group-by column is the key itself (its multiset
    needs its own column name)."""
    schema = pa.schema([("g", pa.string()), ("d", pa.decimal128(10, 2))])
    aggs = [
        Aggregate("s", "sum", "d"),
        Aggregate("a", "avg", "d"),
        Aggregate("lo", "min", "g"),
        Aggregate("hi", "max", "d"),
    ]
    c = Circuit([GroupAggregate("agg", schema, ["g"], aggs)])
    assert c.operators[0].output_schema.field("s").type == pa.decimal128(20, 2)
    loc = StorageLocation.open(str(tmp_path), fingerprint=c.fingerprint, settings=SETTINGS)
    c.open(loc)
    big, small = Decimal("99999999.99"), Decimal("0.01")
    out: Counter[Row] = Counter()
    rows = [(("a", big), 1), (("a", big), 1), (("a", small), 1), (("b", None), 1)]
    integrate(out, c.step({"source": table(rows, schema)})["agg"])
    total = 2 * big + small
    assert out == Counter(
        {("a", total, Decimal("66666666.663333"), "a", big): 1, ("b", None, None, "b", None): 1}
    )
    integrate(out, c.step({"source": table([(("a", big), -2)], schema)})["agg"])
    assert out == Counter({("a", small, small, "a", small): 1, ("b", None, None, "b", None): 1})
    loc.close()


def test_distinct_matches_the_model(tmp_path: Path) -> None:
    rng = random.Random(7)
    schema = pa.schema([("k", pa.int64()), ("s", pa.string())])
    steps = history(rng, 50, lambda r: (r.randint(0, 6), r.choice(["p", "q", None])))
    c = Circuit([Distinct("d", schema)])
    loc = StorageLocation.open(str(tmp_path), fingerprint=c.fingerprint, settings=SETTINGS)
    c.open(loc)
    live: Counter[Row] = Counter()
    out: Counter[Row] = Counter()
    for step in steps:
        integrate(out, c.step({"source": table(step, schema)})["d"])
        for r, w in step:
            live[r] += w
        assert out == Counter({r: 1 for r, m in live.items() if m > 0})
    loc.close()


def model_top_n(live: Counter[Row], limit: int) -> Counter[Row]:
    """Per g: rows by x descending (NULLs last), then y ascending (NULLs first), first
    `limit` (duplicates counted), with their rank."""
    groups: dict[Any, list[Row]] = {}
    for r, m in live.items():
        groups.setdefault(r[0], []).extend([r] * m)
    out: Counter[Row] = Counter()
    for rows in groups.values():
        rows.sort(key=lambda r: (r[2] is not None, r[2] if r[2] is not None else 0.0))
        rows.sort(key=lambda r: (r[1] is None, -(r[1] or 0)))
        for rank, r in enumerate(rows[:limit], 1):
            out[(*r, rank)] += 1
    return out


@pytest.mark.parametrize("seed", range(trials(4, 2)))
def test_top_n_matches_the_model(tmp_path: Path, seed: int) -> None:
    """Ranks per group, across retractions of rows at the top, duplicates and a restore."""
    rng = random.Random(seed)
    steps = history(rng, 40, agg_row)

    def make() -> Circuit:
        return Circuit([TopN("top", SCHEMA, ["g"], [("x", True)], 2, "rank")])

    check_against_model(tmp_path, make, SCHEMA, steps, lambda live: model_top_n(live, 2))


Frames = int | None | tuple[int | None, ...]


def model_rows_over(live: Counter[Row], preceding: Frames) -> Counter[Row]:
    """Per g: rows by x ascending, then y ascending (NULLs first; duplicates counted),
    each with count(*), count(x), sum(x), avg(y), min(x), max(y) over the frame of rows
    from `preceding` before it (None: all; a tuple: one per aggregate) to itself; sum, avg,
    min, max of no value: NULL. All over one ordering: each output row is one copy's."""
    frames = preceding if isinstance(preceding, tuple) else (preceding,) * 6
    groups: dict[Any, list[Row]] = {}
    for r, m in live.items():
        groups.setdefault(r[0], []).extend([r] * m)
    out: Counter[Row] = Counter()
    for rows in groups.values():
        rows.sort(key=lambda r: (r[1] is not None, r[1] or 0, r[2] is not None, r[2] or 0.0))
        for i, r in enumerate(rows):
            frame = [rows[0 if p is None else max(0, i - p) : i + 1] for p in frames]
            xs = [[f[1] for f in fr if f[1] is not None] for fr in frame]
            ys = [[f[2] for f in fr if f[2] is not None] for fr in frame]
            aggs = (
                len(frame[0]),
                len(xs[1]),
                sum(xs[2]) if xs[2] else None,
                sum(ys[3]) / len(ys[3]) if ys[3] else None,
                min(xs[4]) if xs[4] else None,
                max(ys[5]) if ys[5] else None,
            )
            out[(*r, *aggs)] += 1
    return out


@pytest.mark.parametrize(
    ("seed", "preceding"),
    [(s, p) for s in range(trials(3, 2)) for p in (2, None, (2, None, 0, 3, None, 1))],
)
def test_rows_over_matches_the_model(tmp_path: Path, seed: int, preceding: Frames) -> None:
    """Aggregates over frames of rows per group (one frame for all, or one each), across
    retractions, duplicates, ties and NULLs in the order, and a restore."""
    rng = random.Random(seed)
    steps = history(rng, 40, agg_row)
    aggs = [
        Aggregate("n", "count"),
        Aggregate("nx", "count", "x"),
        Aggregate("sx", "sum", "x"),
        Aggregate("ay", "avg", "y"),
        Aggregate("mx", "min", "x"),
        Aggregate("My", "max", "y"),
    ]

    def make() -> Circuit:
        return Circuit([RowsOver("over", SCHEMA, ["g"], [("x", False)], preceding, aggs)])

    check_against_model(
        tmp_path, make, SCHEMA, steps, lambda live: model_rows_over(live, preceding)
    )


def test_rows_over_fingerprints_are_unchanged_by_frames_per_aggregate() -> None:
    """An operator whose aggregates share one frame (one aggregate, or several) describes
    and fingerprints exactly as before frames per aggregate (values from before), so its
    checkpoints restore; frames that differ are a different operator."""
    schema = pa.schema([("g", pa.string()), ("o", pa.int64()), ("x", pa.int64())])
    one = [Aggregate("s", "sum", "x")]
    two = [*one, Aggregate("m", "max", "x")]

    def fp(preceding: Frames, aggs: list[Aggregate]) -> str:
        op = RowsOver("over", schema, ["g"], [("o", False)], preceding, aggs)
        circuit = Circuit([op])
        assert circuit.operator_fingerprints == {"over": circuit.fingerprint}
        return circuit.fingerprint

    assert fp(2, one) == fp((2,), one) == "2de8d3fe587c845b2756ccccb51c13e6"
    assert fp(None, one) == "30f9ffa0421b96a82d1a8a386a8c3b5c"
    assert fp(2, two) == fp((2, 2), two) == "2719990f1e4abc5fef429299b4208afa"
    assert fp(None, two) == fp((None, None), two) == "3313e93682669e23d1e97822cd891e31"
    assert fp((2, None), two) not in {fp(2, two), fp(None, two)}
    with pytest.raises(CircuitError, match="one frame per aggregate"):
        fp((2, None), one)


SESSION_SCHEMA = pa.schema([("g", pa.string()), ("ts", pa.timestamp("us", tz="UTC"))])
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def session_row(rng: random.Random) -> Row:
    """Times out of order over 60 s, so rows merge sessions and retractions split them."""
    second = rng.choice([None, *range(60)])
    ts = None if second is None else EPOCH + dt.timedelta(seconds=second)
    return (rng.choice(["a", "b", None]), ts)


def model_sessions(live: Counter[Row], gap: dt.timedelta) -> Counter[Row]:
    out: Counter[Row] = Counter()
    for g in {r[0] for r in live}:
        rows = sorted((r for r in live if r[0] == g and r[1] is not None), key=lambda r: r[1])
        sessions: list[list[Row]] = []
        for r in rows:
            if sessions and r[1] - sessions[-1][-1][1] < gap:
                sessions[-1].append(r)
            else:
                sessions.append([r])
        for sess in sessions:
            for r in sess:
                out[(*r, sess[0][1], sess[-1][1] + gap)] += live[r]
    return out


@pytest.mark.parametrize("seed", range(trials(4, 2)))
def test_session_windows_match_the_model(tmp_path: Path, seed: int) -> None:
    """Sessions per partition, merged by a row between two and split by its retraction,
    with duplicates, NULL partitions and times, and a restore."""
    rng = random.Random(seed)
    steps = history(rng, 40, session_row)
    gap = dt.timedelta(seconds=5)

    def make() -> Circuit:
        op = SessionWindows("s", SESSION_SCHEMA, ["g"], "ts", 5_000_000, "start", "end")
        return Circuit([op])

    check_against_model(
        tmp_path, make, SESSION_SCHEMA, steps, lambda live: model_sessions(live, gap)
    )


def test_join_matches_the_model(tmp_path: Path) -> None:
    rng = random.Random(11)
    ls = pa.schema([("id", pa.int64()), ("name", pa.string())])
    rs = pa.schema([("uid", pa.int64()), ("name", pa.string()), ("amount", pa.int64())])
    left = history(rng, 30, lambda r: (r.choice([None, 1, 2, 3, 4]), r.choice(["x", "y"])))
    right = history(rng, 30, lambda r: (r.choice([None, 1, 2, 3]), "z", r.randint(0, 3)))

    def make() -> Circuit:
        return Circuit([Join("j", ls, rs, ["id"], ["uid"], left="users", right="orders")])

    c, loc = open_circuit(tmp_path, make)
    assert c.operators[0].output_schema.names == ["id", "name", "right_name", "amount"]
    L: Counter[Row] = Counter()
    R: Counter[Row] = Counter()
    out: Counter[Row] = Counter()
    rows_in = rows_out = 0  # since the circuit was built
    for i, (dl, dr) in enumerate(zip(left, right, strict=True), start=1):
        delta = c.step({"users": table(dl, ls), "orders": table(dr, rs)})["j"]
        integrate(out, delta)
        rows_in, rows_out = rows_in + len(dl) + len(dr), rows_out + delta.num_rows
        m = c.operator_metrics()["j"]
        assert (m.rows_in, m.rows_out) == (rows_in, rows_out)
        assert m.step_ms > 0 and m.state_rows > 0 and m.state_bytes > 0
        for r, w in dl:
            L[r] += w
        for r, w in dr:
            R[r] += w
        want: Counter[Row] = Counter()
        for lr, lm in L.items():
            for rr, rm in R.items():
                if lr[0] is not None and lr[0] == rr[0] and lm * rm:
                    want[(lr[0], lr[1], rr[1], rr[2])] += lm * rm
        assert out == +want, i
        if i == 15:
            c.commit_async(i).wait_local()
            loc.close()
            c, loc = open_circuit(tmp_path, make)
            rows_in = rows_out = 0
    loc.close()


def _ts(seconds: float) -> dt.datetime:
    return dt.datetime(2024, 1, 1) + dt.timedelta(seconds=seconds)


@pytest.mark.parametrize("slide", [None, 5])
def test_window_aggregate_matches_the_model(tmp_path: Path, slide: int | None) -> None:
    """Tumbling (10 s) and hopping (10 s every 5 s) windows, 3 s of allowed lateness:
    rows for closed windows are dropped and counted; closed windows leave the state."""
    schema = pa.schema([("ts", pa.timestamp("us")), ("k", pa.string()), ("v", pa.int64())])
    size, lateness = 10, 3
    step_sz = slide or size
    rng = random.Random(3)
    clock = 0.0
    steps: list[list[tuple[Row, int]]] = []
    for _ in range(40):
        step = []
        for _ in range(rng.randint(1, 6)):
            clock += rng.random() * 1.5
            t = clock - rng.random() * 8  # out of order, some beyond the lateness
            step.append(((_ts(t), rng.choice("ab"), rng.randint(0, 9)), 1))
        steps.append(step)

    def make() -> Circuit:
        return Circuit(
            [
                WindowAggregate(
                    "w",
                    schema,
                    "ts",
                    size_us=size * 10**6,
                    slide_us=slide * 10**6 if slide else None,
                    lateness_us=lateness * 10**6,
                    group_by=["k"],
                    aggregates=[Aggregate("n", "count"), Aggregate("s", "sum", "v")],
                )
            ]
        )

    c, loc = open_circuit(tmp_path, make)
    out: Counter[Row] = Counter()
    accepted: Counter[Row] = Counter()  # (window start, key, v) assignments kept
    wm: float | None = None
    late = 0
    epoch = _ts(0)
    for i, step in enumerate(steps, start=1):
        integrate(out, c.step({"source": table(step, schema)})["w"])
        for (ts, k, v), _ in step:
            t = (ts - epoch).total_seconds()
            starts = [
                math.floor(t / step_sz) * step_sz - j * step_sz for j in range(size // step_sz)
            ]
            dropped = False
            for s in starts:
                if wm is not None and s + size <= wm:
                    dropped = True
                    continue
                accepted[(s, k, v)] += 1
            late += dropped
        newest = max((ts - epoch).total_seconds() for (ts, _, _), _ in step) - lateness
        wm = newest if wm is None else max(wm, newest)
        want: Counter[Row] = Counter()
        per: dict[tuple[float, str], list[int]] = {}
        for (s, k, v), m in accepted.items():
            per.setdefault((s, k), []).extend([v] * m)
        for (s, k), vs in per.items():
            want[(_ts(s), _ts(s + size), k, len(vs), sum(vs))] += 1
        assert out == want, i
        op = c.operators[0]
        assert isinstance(op, WindowAggregate) and op.late_rows == late
        if i == 20:
            c.commit_async(i).wait_local()
            loc.close()
            c, loc = open_circuit(tmp_path, make)
    assert late > 0, "the history should have had late rows"
    # State holds only windows that are still open.
    op = c.operators[0]
    assert isinstance(op, WindowAggregate) and op.watermark is not None
    rows = op._agg.spines()[0].to_batch().to_table().column("window_start").to_pylist()
    assert rows and min(rows) > _ts(wm - size - 1)
    loc.close()


def test_fingerprint_changes_with_the_stateful_part(tmp_path: Path) -> None:
    a = Circuit([GroupAggregate("agg", SCHEMA, ["g"], AGGS)])
    b = Circuit([GroupAggregate("agg", SCHEMA, ["g"], AGGS)])
    c = Circuit([GroupAggregate("agg", SCHEMA, ["g"], AGGS[:2])])
    d = Circuit([GroupAggregate("agg2", SCHEMA, ["g"], AGGS)])
    assert a.fingerprint == b.fingerprint
    assert len({a.fingerprint, c.fingerprint, d.fingerprint}) == 3


def test_bad_definitions_name_the_operator_and_field() -> None:
    with pytest.raises(CircuitError, match=r"'agg'.*group_by columns \['nope'\]"):
        GroupAggregate("agg", SCHEMA, ["nope"], AGGS)
    with pytest.raises(CircuitError, match=r"'agg'.*needs a column"):
        GroupAggregate("agg", SCHEMA, ["g"], [Aggregate("s", "sum")])
    with pytest.raises(CircuitError, match="cannot sum"):
        GroupAggregate("agg", SCHEMA, ["g"], [Aggregate("s", "sum", "g")])
    with pytest.raises(CircuitError, match="not a timestamp"):
        WindowAggregate("w", SCHEMA, "x", 10, [Aggregate("n", "count")])
    with pytest.raises(CircuitError, match="unique"):
        Circuit([Distinct("d", SCHEMA), Distinct("d", SCHEMA)])
