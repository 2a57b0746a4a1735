"""Aggregates of decimal columns against a plain-Python model in exact decimal arithmetic
(Spark's result types and HALF_UP averages: storage_engine/circuit/decimals.py), across
retractions, NULLs and a restore; a sum or average that does not fit is an error."""

from __future__ import annotations

import decimal
import random
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from storage_engine.circuit import Aggregate, Circuit, GroupAggregate, RowsOver, WindowAggregate
from storage_engine.circuit.decimals import DecimalOverflow

from .test_circuit import Row, check_against_model, history, integrate, open_circuit, table

D = pa.decimal128(12, 2)
SCHEMA = pa.schema([("g", pa.string()), ("d", D), ("o", pa.int64())])
AGGS = [
    Aggregate("n", "count", "d"),
    Aggregate("s", "sum", "d"),
    Aggregate("a", "avg", "d"),
    Aggregate("lo", "min", "d"),
    Aggregate("hi", "max", "d"),
]
EXACT = decimal.Context(prec=100, rounding=decimal.ROUND_HALF_UP)


def dec_row(rng: random.Random) -> Row:
    """Values with every cent digit, both signs, NULLs, near the precision's limit."""
    d = rng.choice(
        [
            None,
            Decimal(rng.randint(-99_999, 99_999)).scaleb(-2),
            Decimal("9999999999.99"),
            Decimal("-9999999999.99"),
            Decimal("0.01"),
            Decimal("-0.01"),
        ]
    )
    return (rng.choice(["a", "b", None]), d, rng.randint(0, 9))


def spark_avg(values: list[Decimal], scale: int) -> Decimal | None:
    if not values:
        return None
    with decimal.localcontext(EXACT):
        return (sum(values) / len(values)).quantize(Decimal(1).scaleb(-scale))


def model(live: Counter[Row]) -> Counter[Row]:
    groups: dict[Any, list[Decimal]] = {}
    for r, m in live.items():
        if m > 0:
            groups.setdefault(r[0], []).extend([r[1]] * m)
    out: Counter[Row] = Counter()
    for g, values in groups.items():
        ds = [v for v in values if v is not None]
        out[
            (
                g,
                len(ds),
                sum(ds) if ds else None,
                spark_avg(ds, 6),
                min(ds) if ds else None,
                max(ds) if ds else None,
            )
        ] += 1
    return out


def test_result_types_are_sparks() -> None:
    """As PySpark 4.0.5 types them (typeof(sum(d)), typeof(avg(d)) over decimal columns)."""
    for (p, s), (sum_t, avg_t) in {
        (15, 2): ((25, 2), (19, 6)),
        (36, 2): ((38, 2), (38, 6)),
        (38, 10): ((38, 10), (38, 14)),
        (5, 5): ((15, 5), (9, 9)),
        (30, 30): ((38, 30), (34, 34)),
        (38, 38): ((38, 38), (38, 38)),
    }.items():
        schema = pa.schema([("d", pa.decimal128(p, s))])
        op = GroupAggregate("agg", schema, [], AGGS[1:])
        out = op.output_schema
        assert out.field("s").type == pa.decimal128(*sum_t)
        assert out.field("a").type == pa.decimal128(*avg_t)
        assert out.field("lo").type == pa.decimal128(p, s)


@pytest.mark.parametrize("seed", range(3))
def test_group_aggregate_of_decimals_matches_the_model(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    steps = history(rng, 30, dec_row)

    def make() -> Circuit:
        return Circuit([GroupAggregate("agg", SCHEMA, ["g"], AGGS)])

    circuit, loc = open_circuit(tmp_path, make, "none")
    live: Counter[Row] = Counter()
    out: Counter[Row] = Counter()
    for i, step in enumerate(steps, start=1):
        integrate(out, circuit.step({"source": table(step, SCHEMA)})["agg"])
        for r, w in step:
            live[r] += w
        assert out == model(live), f"step {i}"
        if i == 15:  # a restore continues from the same exact sums
            circuit.commit_async(i).wait_local()
            loc.close()
            circuit, loc = open_circuit(tmp_path, make)
    loc.close()


def test_averages_round_half_up_at_four_more_digits(tmp_path: Path) -> None:
    """1/32 = 0.03125 is a tie at scale 4: Spark gives 0.0313 and -0.0313 (measured)."""
    schema = pa.schema([("g", pa.string()), ("d", pa.decimal128(1, 0))])
    c = Circuit([GroupAggregate("agg", schema, ["g"], [Aggregate("a", "avg", "d")])])
    c, loc = open_circuit(tmp_path, lambda: c, "none")
    rows = [(("p", Decimal(1)), 1), (("m", Decimal(-1)), 1)]
    rows += [((g, Decimal(0)), 31) for g in ("p", "m")]
    out: Counter[Row] = Counter()
    integrate(out, c.step({"source": table(rows, schema)})["agg"])
    assert out == Counter({("p", Decimal("0.0313")): 1, ("m", Decimal("-0.0313")): 1})
    loc.close()


def test_a_sum_that_does_not_fit_is_an_error(tmp_path: Path) -> None:
    """sum of decimal(38, 0) is decimal(38, 0): 6e37 + 6e37 does not fit (Spark:
    NUMERIC_VALUE_OUT_OF_RANGE), but a step whose sum fits in the end is exact."""
    schema = pa.schema([("g", pa.string()), ("d", pa.decimal128(38, 0))])
    big = Decimal("6e37")

    def make() -> Circuit:
        return Circuit([GroupAggregate("agg", schema, ["g"], [Aggregate("s", "sum", "d")])])

    c, loc = open_circuit(tmp_path, make, "none")
    out: Counter[Row] = Counter()
    step = [(("a", big), 1), (("a", big), 1), (("a", -big), 1)]
    integrate(out, c.step({"source": table(step, schema)})["agg"])
    assert out == Counter({("a", big): 1})
    with pytest.raises(DecimalOverflow, match=r"cannot be represented as decimal\(38,0\)"):
        c.step({"source": table([(("a", big), 1)], schema)})
    with pytest.raises(DecimalOverflow, match="cannot be represented"):
        c.step({"source": table([(("b", big), 2)], schema)})  # a weight of 2
    loc.close()


def test_an_average_that_does_not_fit_is_an_error(tmp_path: Path) -> None:
    """avg of decimal(38, 0) is decimal(38, 4): 6e37 does not fit, as in Spark."""
    schema = pa.schema([("d", pa.decimal128(38, 0))])
    c, loc = open_circuit(
        tmp_path,
        lambda: Circuit([GroupAggregate("agg", schema, [], [Aggregate("a", "avg", "d")])]),
        "none",
    )
    with pytest.raises(DecimalOverflow, match=r"avg .* decimal\(38,4\)"):
        c.step({"source": table([((Decimal("6e37"),), 1)], schema)})
    loc.close()


def test_window_aggregate_of_decimals(tmp_path: Path) -> None:
    """A tumbling window's sum and avg of decimals are typed and rounded as a group's."""
    ts = pa.timestamp("us", tz="UTC")
    schema = pa.schema([("t", ts), ("d", D)])
    aggs = [Aggregate("s", "sum", "d"), Aggregate("a", "avg", "d")]
    c, loc = open_circuit(
        tmp_path,
        lambda: Circuit([WindowAggregate("w", schema, "t", 1_000_000, aggs)]),
        "none",
    )
    rows = [((1, Decimal("0.01")), 1), ((2, Decimal("0.02")), 1), ((3, Decimal("0.02")), 1)]
    out: Counter[Row] = Counter()
    integrate(out, c.step({"source": table(rows, schema)})["w"])
    ((row, _),) = out.items()
    assert row[-2:] == (Decimal("0.05"), Decimal("0.016667"))
    assert c.operators[0].output_schema.field("a").type == pa.decimal128(16, 6)
    loc.close()


def model_rows_over(live: Counter[Row], preceding: int | None) -> Counter[Row]:
    """Per g, rows by o then d (NULLs first), each with sum, avg, min and max of d over
    the frame from `preceding` rows before it to itself."""
    groups: dict[Any, list[Row]] = {}
    for r, m in live.items():
        groups.setdefault(r[0], []).extend([r] * m)
    out: Counter[Row] = Counter()
    for rows in groups.values():
        rows.sort(key=lambda r: (r[2], r[1] is not None, r[1] or 0))
        for i, r in enumerate(rows):
            frame = rows[0 if preceding is None else max(0, i - preceding) : i + 1]
            ds = [f[1] for f in frame if f[1] is not None]
            aggs = (
                sum(ds) if ds else None,
                spark_avg(ds, 6),
                min(ds) if ds else None,
                max(ds) if ds else None,
            )
            out[(*r, *aggs)] += 1
    return out


@pytest.mark.parametrize("preceding", [2, None])
def test_rows_over_of_decimals_matches_the_model(tmp_path: Path, preceding: int | None) -> None:
    rng = random.Random(preceding or 0)
    steps = history(rng, 30, dec_row)
    aggs = [
        Aggregate("s", "sum", "d"),
        Aggregate("a", "avg", "d"),
        Aggregate("lo", "min", "d"),
        Aggregate("hi", "max", "d"),
    ]

    def make() -> Circuit:
        return Circuit([RowsOver("over", SCHEMA, ["g"], [("o", False)], preceding, aggs)])

    assert make().operators[0].output_schema.field("s").type == pa.decimal128(22, 2)
    check_against_model(
        tmp_path, make, SCHEMA, steps, lambda live: model_rows_over(live, preceding)
    )


def test_rows_over_sum_that_does_not_fit_is_an_error(tmp_path: Path) -> None:
    schema = pa.schema([("o", pa.int64()), ("d", pa.decimal128(38, 0))])
    big = Decimal("6e37")
    c, loc = open_circuit(
        tmp_path,
        lambda: Circuit(
            [RowsOver("over", schema, [], [("o", False)], 1, [Aggregate("s", "sum", "d")])]
        ),
        "none",
    )
    with pytest.raises(DecimalOverflow, match="cannot be represented"):
        c.step({"source": table([((1, big), 1), ((2, big), 1)], schema)})
    loc.close()
