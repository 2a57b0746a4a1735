"""Pre-aggregated inputs (`step_partial`, what Spark sends for insert-only source deltas)
against a plain-Python reference: the integrated output equals the operator's result over
all rows so far, and equals what the same operator outputs when fed the rows themselves,
step by step; the state either path leaves is a valid start for the other (a checkpoint
taken before pre-aggregation existed restores and continues)."""

from __future__ import annotations

import datetime as dt
import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from storage_engine.circuit import (
    Aggregate,
    Circuit,
    CircuitError,
    Distinct,
    GroupAggregate,
    Join,
    PartialForm,
    WindowAggregate,
)

from .test_circuit import (
    AGGS,
    LINEAR_AGGS,
    SCHEMA,
    Row,
    _close,
    integrate,
    model_aggregate,
    model_linear,
    open_circuit,
    table,
)

EPOCH = dt.datetime(2024, 1, 1)


def preaggregate(
    rows: Sequence[Row], schema: pa.Schema, form: PartialForm, split: int = 1
) -> pa.Table:
    """What Spark computes for `form` from insert-only `rows`, in plain Python; each group
    cut into up to `split` rows (as partial aggregates of several partitions would be)."""
    names = schema.names
    groups: dict[tuple[Any, ...], list[list[dict[str, Any]]]] = {}
    for i, r in enumerate(rows):
        d = dict(zip(names, r, strict=True))
        key = tuple(d[k] for k in form.keys)
        if form.bucket is not None:
            t = d[form.bucket[0]]
            us = None if t is None else _us(t)
            key += (None if us is None else us - us % form.bucket[1],)
        parts = groups.setdefault(key, [[] for _ in range(split)])
        parts[i % split].append(d)
    out: list[dict[str, Any]] = []
    for key, parts in groups.items():
        for part in parts:
            if not part:
                continue
            row = dict(zip(form.keys, key, strict=False))
            if form.bucket is not None:
                row["__bucket"] = key[-1]
                ts = [_us(d[form.bucket[0]]) for d in part if d[form.bucket[0]] is not None]
                row["__tmax"] = max(ts) if ts else None
            row["__count"] = len(part)
            for c in form.counted:
                row[f"__n_{c}"] = sum(d[c] is not None for d in part)
            for c in form.summed:
                row[f"__s_{c}"] = sum(d[c] for d in part if d[c] is not None)
            for c in form.ordered:
                vs = [d[c] for d in part if d[c] is not None]
                real = [v for v in vs if not (isinstance(v, float) and math.isnan(v))]
                row[f"__min_{c}"] = min(real) if real else None
                row[f"__max_{c}"] = max(real) if real else None
                if f"__nan_{c}" in form.schema.names:
                    row[f"__nan_{c}"] = len(real) < len(vs)
            out.append(row)
    return pa.Table.from_pylist(out, schema=form.schema)


def _us(t: dt.datetime) -> int:
    return (t - EPOCH) // dt.timedelta(microseconds=1) + 1704067200 * 10**6


def agg_row(rng: random.Random) -> Row:
    g = rng.choice(["a", "b", "c", None])
    x = rng.choice([None, *range(-3, 6)])
    y = rng.choice([None, 0.5, 1.25, -2.0, 3.0])
    return (g, x, y)


def inserts(
    rng: random.Random, steps: int, make: Callable[[random.Random], Row]
) -> list[list[Row]]:
    return [[make(rng) for _ in range(rng.randint(0, 12))] for _ in range(steps)]


def _group_aggregate() -> Circuit:
    return Circuit([GroupAggregate("agg", SCHEMA, ["g"], AGGS)])


@pytest.mark.parametrize(
    ("aggs", "model"), [(AGGS, model_aggregate), (LINEAR_AGGS, model_linear)], ids=["all", "linear"]
)
@pytest.mark.parametrize("split", [1, 3])
def test_group_aggregate_partial_matches_the_model_and_the_row_path(
    tmp_path: Path, split: int, aggs: list[Aggregate], model: Any
) -> None:
    rng = random.Random(split)
    steps = inserts(rng, 30, agg_row)

    def make() -> Circuit:
        return Circuit([GroupAggregate("agg", SCHEMA, ["g"], aggs)])

    c, loc = open_circuit(tmp_path / "p", make)
    raw, raw_loc = open_circuit(tmp_path / "r", make)
    form = c.operators[0].partial_form()
    assert form is not None and form.keys == ("g",)
    live: Counter[Row] = Counter()
    out: Counter[Row] = Counter()
    for i, step in enumerate(steps, start=1):
        delta = c.step({}, {"agg": preaggregate(step, SCHEMA, form, split)})["agg"]
        want = raw.step({"source": table([(r, 1) for r in step], SCHEMA)})["agg"]
        assert _close(Counter(map(_row, delta.to_pylist())), Counter(map(_row, want.to_pylist())))
        integrate(out, delta)
        live.update(step)
        assert all(m == 1 for m in out.values())
        assert _close(out, model(live)), i
    loc.close()
    raw_loc.close()


def _row(d: dict[str, Any]) -> Row:
    return tuple(d.values())


@pytest.mark.parametrize("first", ["rows", "partial"])
def test_either_path_continues_from_the_others_checkpoint(tmp_path: Path, first: str) -> None:
    """Steps 1-10 one way, checkpoint, restore, steps 11-20 the other way: the same results
    as the model (the state layout and fingerprint are the same for both)."""
    rng = random.Random(4)
    steps = inserts(rng, 20, agg_row)
    c, loc = open_circuit(tmp_path, _group_aggregate)
    form = c.operators[0].partial_form()
    assert form is not None
    live: Counter[Row] = Counter()
    out: Counter[Row] = Counter()

    def feed(circuit: Circuit, rows: list[Row], partial: bool) -> None:
        if partial:
            integrate(out, circuit.step({}, {"agg": preaggregate(rows, SCHEMA, form)})["agg"])
        else:
            integrate(out, circuit.step({"source": table([(r, 1) for r in rows], SCHEMA)})["agg"])
        live.update(rows)
        assert _close(out, model_aggregate(live))

    for step in steps[:10]:
        feed(c, step, first == "partial")
    fp = c.fingerprint
    c.commit_async(10).wait_local()
    loc.close()
    c, loc = open_circuit(tmp_path, _group_aggregate)
    assert loc.step == 10 and c.fingerprint == fp
    for step in steps[10:]:
        feed(c, step, first != "partial")
    loc.close()


def test_min_and_max_only_need_the_extremes_of_inserts(tmp_path: Path) -> None:
    """The multiset gets the batch's min and max per group, not every value; with inserts
    only, every later min/max is still right, including NaN (Arrow's min/max skip NaN unless
    a group has nothing else, so the largest non-NaN value must be kept besides NaN)."""
    schema = pa.schema([("g", pa.string()), ("y", pa.float64()), ("x", pa.int64())])
    aggs = [Aggregate(f"{f}_{c}", f, c) for f in ("min", "max") for c in ("x", "y")]

    def make() -> Circuit:
        return Circuit([GroupAggregate("agg", schema, ["g"], aggs)])

    nan = float("nan")
    steps = [
        [("a", 1.0, 5), ("a", 5.0, 1), ("a", nan, 3), ("b", nan, None), ("b", None, None)],
        [("a", 3.0, 2), ("b", 2.0, 7), ("c", None, 4)],
        [("a", 9.0, 9), ("a", -1.0, -1), ("b", nan, 0), ("c", nan, None)],
    ]
    c, loc = open_circuit(tmp_path / "p", make)
    raw, raw_loc = open_circuit(tmp_path / "r", make)
    form = c.operators[0].partial_form()
    assert form is not None and "__nan_y" in form.schema.names
    assert "__nan_x" not in form.schema.names
    got: Counter[Row] = Counter()
    want: Counter[Row] = Counter()
    for step in steps:
        integrate(got, _nan_free(c.step({}, {"agg": preaggregate(step, schema, form)})["agg"]))
        integrate(
            want, _nan_free(raw.step({"source": table([(r, 1) for r in step], schema)})["agg"])
        )
        assert got == want
        assert all(m == 1 for m in got.values())
    assert set(got) == {
        ("a", -1, "-1.0", 9, "9.0"),
        ("b", 0, "2.0", 7, "2.0"),
        ("c", 4, "nan", 4, "nan"),
    }
    # The multiset holds extremes only: fewer rows than values inserted.
    op = c.operators[0]
    assert isinstance(op, GroupAggregate)
    vals = op.spines()[1].to_batch().to_table().num_rows
    raw_op = raw.operators[0]
    assert isinstance(raw_op, GroupAggregate)
    assert vals < raw_op.spines()[1].to_batch().to_table().num_rows
    loc.close()
    raw_loc.close()


def _nan_free(t: pa.Table) -> pa.Table:
    """Floats as strings ("nan"): NaN != NaN would keep retractions from cancelling."""
    schema = pa.schema(
        [
            pa.field(f.name, pa.string() if pa.types.is_floating(f.type) else f.type)
            for f in t.schema
        ]
    )
    rows = [{k: str(v) if isinstance(v, float) else v for k, v in r.items()} for r in t.to_pylist()]
    return pa.Table.from_pylist(rows, schema=schema)


def test_global_aggregate_partial(tmp_path: Path) -> None:
    aggs = [Aggregate("n", "count"), Aggregate("s", "sum", "x"), Aggregate("m", "max", "y")]

    def make() -> Circuit:
        return Circuit([GroupAggregate("all", SCHEMA, [], aggs)])

    c, loc = open_circuit(tmp_path, make)
    form = c.operators[0].partial_form()
    assert form is not None and form.keys == ()
    out: Counter[Row] = Counter()
    integrate(
        out, c.step({}, {"all": preaggregate([("a", 1, None), ("b", 2, 0.5)], SCHEMA, form)})["all"]
    )
    assert out == Counter({(2, 3, 0.5): 1})
    integrate(out, c.step({}, {"all": preaggregate([(None, None, None)], SCHEMA, form)})["all"])
    assert out == Counter({(3, 3, 0.5): 1})
    integrate(out, c.step({}, {"all": preaggregate([], SCHEMA, form)})["all"])
    assert out == Counter({(3, 3, 0.5): 1})
    loc.close()


def test_distinct_partial_matches_the_model(tmp_path: Path) -> None:
    rng = random.Random(8)
    schema = pa.schema([("k", pa.int64()), ("s", pa.string())])
    steps = inserts(rng, 20, lambda r: (r.choice([None, *range(5)]), r.choice(["p", None])))
    c = Circuit([Distinct("d", schema)])
    c, loc = open_circuit(tmp_path, lambda: Circuit([Distinct("d", schema)]))
    form = c.operators[0].partial_form()
    assert form is not None
    live: Counter[Row] = Counter()
    out: Counter[Row] = Counter()
    for step in steps:
        integrate(out, c.step({}, {"d": preaggregate(step, schema, form)})["d"])
        live.update(step)
        assert out == Counter({r: 1 for r in live})
    loc.close()


@pytest.mark.parametrize("slide", [None, 5])
def test_window_partial_equals_the_row_path(tmp_path: Path, slide: int | None) -> None:
    """Per (bucket, group) accumulators give the same outputs, late-row counts, watermarks
    and state truncation as the rows, tumbling and hopping, with late rows and rows without
    an event time; across a restore in the middle."""
    schema = pa.schema([("ts", pa.timestamp("us")), ("k", pa.string()), ("v", pa.int64())])
    rng = random.Random(3)
    clock = 0.0
    steps: list[list[Row]] = []
    for _ in range(30):
        step: list[Row] = []
        for _ in range(rng.randint(0, 8)):
            clock += rng.random() * 1.5
            t = clock - rng.random() * 14
            ts = None if rng.random() < 0.1 else EPOCH + dt.timedelta(seconds=t)
            step.append((ts, rng.choice(["a", "b", None]), rng.choice([None, *range(9)])))
        steps.append(step)

    def make() -> Circuit:
        aggs = [Aggregate("n", "count"), Aggregate("s", "sum", "v"), Aggregate("lo", "min", "v")]
        aggs.append(Aggregate("hi", "max", "v"))
        return Circuit(
            [
                WindowAggregate(
                    "w",
                    schema,
                    "ts",
                    size_us=10 * 10**6,
                    slide_us=slide * 10**6 if slide else None,
                    lateness_us=1 * 10**6,
                    group_by=["k"],
                    aggregates=aggs,
                )
            ]
        )

    c, loc = open_circuit(tmp_path / "p", make)
    raw, raw_loc = open_circuit(tmp_path / "r", make)
    form = c.operators[0].partial_form()
    assert form is not None and form.bucket == ("ts", (slide or 10) * 10**6)
    got: Counter[Row] = Counter()
    want: Counter[Row] = Counter()
    for i, step in enumerate(steps, start=1):
        integrate(got, c.step({}, {"w": preaggregate(step, schema, form, split=2)})["w"])
        integrate(want, raw.step({"source": table([(r, 1) for r in step], schema)})["w"])
        assert got == want, i
        op, raw_op = c.operators[0], raw.operators[0]
        assert isinstance(op, WindowAggregate) and isinstance(raw_op, WindowAggregate)
        assert (op.watermark, op.late_rows) == (raw_op.watermark, raw_op.late_rows), i
        acc, raw_acc = (o._agg.spines()[0].to_batch().to_table() for o in (op, raw_op))
        assert acc.equals(raw_acc), i  # same accumulators, closed windows dropped alike
        if i == 15:
            c.commit_async(i).wait_local()
            loc.close()
            c, loc = open_circuit(tmp_path / "p", make)
    op = c.operators[0]
    assert isinstance(op, WindowAggregate) and op.late_rows > 0
    loc.close()
    raw_loc.close()


def test_partial_inputs_are_checked(tmp_path: Path) -> None:
    ls = pa.schema([("id", pa.int64())])
    c, loc = open_circuit(
        tmp_path,
        lambda: Circuit(
            [Join("j", ls, ls, ["id"], ["id"]), GroupAggregate("agg", SCHEMA, ["g"], AGGS)]
        ),
    )
    assert c.operators[0].partial_form() is None
    with pytest.raises(CircuitError, match="unknown operators"):
        c.step({}, {"nope": pa.table({})})
    with pytest.raises(CircuitError, match="'j' cannot take a pre-aggregated input"):
        c.step({}, {"j": pa.table({})})
    with pytest.raises(CircuitError, match="'j' needs the inputs"):
        c.step({}, {"agg": preaggregate([], SCHEMA, c.operators[1].partial_form())})
    loc.close()
