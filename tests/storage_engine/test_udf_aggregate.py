"""The user-defined aggregate operator (storage_engine/circuit/udf_aggregate.py) against a
plain-Python model: each group's live multiset of rows, fed the same inserts and deletes
(NULL groups and values, a group emptied and refilled, a row inserted and deleted in one
step). Incremental (functions that retract, one merging, one not) and recomputed (a
median, which cannot retract) operators; the integrated output is the model's result per
group after every step, across a restore from a checkpoint that redoes steps."""

from __future__ import annotations

import random
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from storage_engine import EngineSettings, StorageLocation
from storage_engine.circuit import Circuit, UdfCall, UdfGroupAggregate
from storage_engine.circuit.operator import CircuitError

SETTINGS = EngineSettings(block_rows=32, merge_base_rows=32, merge_fanout=3)
SCHEMA = pa.schema([("g", pa.string()), ("x", pa.int64()), ("y", pa.float64())])
Row = tuple[str | None, int | None, float | None]


class SumProduct:
    """sum(x * y) over rows with both: retracts; merges if `merges`."""

    retracts = True

    def __init__(self, merges: bool) -> None:
        self.merges = merges

    def __repr__(self) -> str:  # in the operator's fingerprint
        return f"sum_product merges={self.merges}"

    def create(self, group: Any) -> Any:
        return [0.0, 0]

    def accumulate(self, acc: Any, args: list[pa.Array], group: Any) -> Any:
        x, y = args
        p = pc.multiply(pc.cast(x, pa.float64()), y)
        return [acc[0] + (pc.sum(p).as_py() or 0.0), acc[1] + len(p) - p.null_count]

    def retract(self, acc: Any, args: list[pa.Array], group: Any) -> Any:
        x, y = args
        p = pc.multiply(pc.cast(x, pa.float64()), y)
        return [acc[0] - (pc.sum(p).as_py() or 0.0), acc[1] - (len(p) - p.null_count)]

    def merge(self, acc: Any, other: Any, group: Any) -> Any:
        return [acc[0] + other[0], acc[1] + other[1]]

    def finish(self, acc: Any, group: Any) -> Any:
        return round(acc[0], 6) if acc[1] else None


class DistinctX:
    """How many distinct non-null x: its accumulator (x -> rows) changed in place, as
    Python code does."""

    retracts = True
    merges = True

    def __repr__(self) -> str:
        return "distinct_x"

    def create(self, group: Any) -> Any:
        return {}

    def accumulate(self, acc: Any, args: list[pa.Array], group: Any) -> Any:
        for v in args[0].to_pylist():
            if v is not None:
                acc[str(v)] = acc.get(str(v), 0) + 1
        return acc

    def retract(self, acc: Any, args: list[pa.Array], group: Any) -> Any:
        for v in args[0].to_pylist():
            if v is not None:
                acc[str(v)] -= 1
                if acc[str(v)] == 0:
                    del acc[str(v)]
        return acc

    def merge(self, acc: Any, other: Any, group: Any) -> Any:
        for k, n in other.items():
            acc[k] = acc.get(k, 0) + n
        return acc

    def finish(self, acc: Any, group: Any) -> Any:
        return float(len(acc))


class Median:
    """The median of x's non-null values: cannot retract."""

    retracts = False
    merges = False

    def __repr__(self) -> str:
        return "median"

    def create(self, group: Any) -> Any:
        return []

    def accumulate(self, acc: Any, args: list[pa.Array], group: Any) -> Any:
        return acc + [v for v in args[0].to_pylist() if v is not None]

    def finish(self, acc: Any, group: Any) -> Any:
        return float(statistics.median(acc)) if acc else None

    def retract(self, acc: Any, args: list[pa.Array], group: Any) -> Any:
        raise AssertionError("never called")

    def merge(self, acc: Any, other: Any, group: Any) -> Any:
        raise AssertionError("never called")


def _model_out(rows: Counter[Row], calls: list[str]) -> Counter[tuple[Any, ...]]:
    groups: dict[Any, list[Row]] = {}
    for r, n in rows.items():
        groups.setdefault(r[0], []).extend([r] * n)
    out: Counter[tuple[Any, ...]] = Counter()
    for g, rs in groups.items():
        values: list[Any] = [g]
        for c in calls:
            if c == "median":
                xs = [r[1] for r in rs if r[1] is not None]
                values.append(float(statistics.median(xs)) if xs else None)
            elif c == "distinct":
                values.append(float(len({r[1] for r in rs if r[1] is not None})))
            else:
                ps = [r[1] * r[2] for r in rs if r[1] is not None and r[2] is not None]
                values.append(round(sum(ps), 6) if ps else None)
        out[tuple(values)] += 1
    return out


def _open(path: Path, calls: list[str]) -> tuple[Circuit, StorageLocation]:
    made = [
        UdfCall(
            f"c{i}",
            Median()
            if c == "median"
            else DistinctX()
            if c == "distinct"
            else SumProduct(c == "merging"),
            ("x",) if c in ("median", "distinct") else ("x", "y"),
            pa.float64(),
        )
        for i, c in enumerate(calls)
    ]
    op = UdfGroupAggregate("a", SCHEMA, ["g"], made)
    circuit = Circuit([op])
    loc = StorageLocation.open(str(path), fingerprint=circuit.fingerprint, settings=SETTINGS)
    circuit.open(loc)
    return circuit, loc


@pytest.mark.parametrize(
    "calls",
    [["merging", "plain"], ["median"], ["median", "merging"], ["distinct", "merging"]],
    ids=str,
)
@pytest.mark.parametrize("seed", range(3))
def test_udf_aggregate_matches_the_model(tmp_path: Path, calls: list[str], seed: int) -> None:
    rng = random.Random(seed)
    live: Counter[Row] = Counter()
    steps: list[list[tuple[Row, int]]] = []
    for _ in range(24):
        step: list[tuple[Row, int]] = []
        for _ in range(rng.randint(0, 12)):
            if live and rng.random() < 0.4:
                r = rng.choice(sorted(live, key=repr))
                step.append((r, -1))
                live[r] -= 1
                live = +live
            else:
                r = (
                    rng.choice(["a", "b", None]),
                    rng.choice([1, 2, 5, None]),
                    rng.choice([0.5, 2.0, None]),
                )
                step.append((r, 1))
                live[r] += 1
        steps.append(step)

    circuit, loc = _open(tmp_path, calls)
    model: Counter[Row] = Counter()
    out: Counter[tuple[Any, ...]] = Counter()
    saved: tuple[Counter[Row], Counter[tuple[Any, ...]]] = (Counter(), Counter())

    def run(i: int) -> None:
        rows = steps[i]
        t = pa.table(
            {
                "g": pa.array([r[0] for r, _ in rows], pa.string()),
                "x": pa.array([r[1] for r, _ in rows], pa.int64()),
                "y": pa.array([r[2] for r, _ in rows], pa.float64()),
                "__weight": pa.array([w for _, w in rows], pa.int64()),
            }
        )
        for r in circuit.step({"source": t})["a"].to_pylist():
            out[(r["g"], *(r[f"c{j}"] for j in range(len(calls))))] += r["__weight"]
        for r, w in rows:
            model[r] += w
        assert +out == _model_out(+model, calls) and min(out.values(), default=0) >= 0, i

    for i in range(len(steps)):
        run(i)
        if i == 11:
            circuit.commit_async(i + 1).wait_local()
            saved = (Counter(model), Counter(out))
        if i == 17:  # restart from the checkpoint at step 12: redo steps 13..18
            loc.close()
            circuit, loc = _open(tmp_path, calls)
            assert loc.step == 12
            model, out = Counter(saved[0]), Counter(saved[1])
            for j in range(12, 18):
                run(j)
    loc.close()


def test_an_accumulator_that_is_not_json_fails_the_step(tmp_path: Path) -> None:
    class Bad(SumProduct):
        def accumulate(self, acc: Any, args: list[pa.Array], group: Any) -> Any:
            return {1, 2}

    op = UdfGroupAggregate(
        "a", SCHEMA, ["g"], [UdfCall("c0", Bad(False), ("x", "y"), pa.float64())]
    )
    circuit = Circuit([op])
    loc = StorageLocation.open(str(tmp_path), fingerprint=circuit.fingerprint, settings=SETTINGS)
    circuit.open(loc)
    t = pa.table({"g": ["a"], "x": [1], "y": [2.0]}, schema=SCHEMA)
    with pytest.raises(CircuitError, match="JSON value"):
        circuit.step({"source": t})
    loc.close()
