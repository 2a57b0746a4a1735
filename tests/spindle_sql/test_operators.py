"""Operator specs as views (`spindle_sql.operators`) in the operator-spec layout: the dataflow's
operators are those the runtime built before issue 49, one per spec operator under its name
with the same fingerprints (so their checkpoints restore), and its steps give their
outputs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pipeline_spec.model import SpecError, parse_spec
from spindle_sql.dataflow import Dataflow
from spindle_sql.layout import Layout
from spindle_sql.operators import plan_operators
from storage_engine.circuit import (
    Aggregate,
    Circuit,
    Distinct,
    GroupAggregate,
    Join,
    WindowAggregate,
)
from storage_engine.location import StorageLocation
from storage_engine.schema import WEIGHT

TS = pa.timestamp("us", tz="UTC")
STREAM = pa.schema([("user", pa.string()), ("amount", pa.int64()), ("ts", TS)])
LEFT = pa.schema([("user", pa.string()), ("amount", pa.int64())])
RIGHT = pa.schema([("user", pa.string()), ("amount", pa.int64()), ("note", pa.string())])
STATE: list[dict[str, Any]] = [
    {
        "name": "per_user",
        "kind": "aggregate",
        "group_by": ["user"],
        "aggregates": [
            {"name": "n", "func": "count"},
            {"name": "total", "func": "sum", "column": "amount"},
            {"name": "mean", "func": "avg", "column": "amount"},
            {"name": "hi", "func": "max", "column": "amount"},
        ],
    },
    {
        "name": "per_min",
        "kind": "window_aggregate",
        "time_column": "ts",
        "size": "1m",
        "slide": "30s",
        "lateness": "5s",
        "aggregates": [{"name": "n", "func": "count"}],
    },
    {"name": "users", "kind": "distinct", "columns": ["user"]},
    {
        "name": "pairs",
        "kind": "join",
        "left": {"select": ["user", "amount"]},
        "right": {"select": ["user", "amount", "user AS note"]},
        "left_on": ["user"],
        "right_on": ["user"],
    },
]


def _spec(state: list[dict[str, Any]]) -> Any:
    return parse_spec(
        {
            "name": "ops",
            "source": {"kind": "log", "stream": "s", "schema": {"user": "string"}},
            "state": state,
        }
    )


def _flow(state: list[dict[str, Any]] = STATE) -> Dataflow:
    ops = plan_operators(_spec(state), STREAM, {"pairs.left": LEFT, "pairs.right": RIGHT})
    return Dataflow(ops.views, layout=Layout(ops.names))


def _circuit_before() -> Circuit:
    """The circuit the runtime built for STATE before issue 49 (`workers/runtime/plan.py` then)."""
    return Circuit(
        [
            GroupAggregate(
                "per_user",
                STREAM,
                ["user"],
                [
                    Aggregate("n", "count"),
                    Aggregate("total", "sum", "amount"),
                    Aggregate("mean", "avg", "amount"),
                    Aggregate("hi", "max", "amount"),
                ],
            ),
            WindowAggregate(
                "per_min",
                STREAM,
                "ts",
                60_000_000,
                [Aggregate("n", "count")],
                [],
                30_000_000,
                5_000_000,
            ),
            Distinct("users", STREAM, ["user"]),
            Join("pairs", LEFT, RIGHT, ["user"], ["user"], left="pairs.left", right="pairs.right"),
        ]
    )


def test_operators_keep_their_names_layouts_and_fingerprints() -> None:
    flow, before = _flow(), _circuit_before()
    assert [o.id for o in flow.operators] == [o.id for o in before.operators]
    assert [o.describe() for o in flow.operators] == [o.describe() for o in before.operators]
    assert flow.fingerprint == before.fingerprint
    assert flow.circuit.operator_fingerprints == before.operator_fingerprints
    assert flow.output_schemas == before.output_schemas
    assert set(flow.tables) == {"source", "pairs.left", "pairs.right"}


def _rows(t: pa.Table) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for r in t.to_pylist():
        w = r.pop(WEIGHT)
        out[tuple(r.values())] += w
    return out


def test_steps_give_the_circuits_outputs(tmp_path: Path) -> None:
    """Both run the same steps (with a retraction on a join side) from their own location:
    each step's outputs are equal as Z-sets."""
    flow, before = _flow(), _circuit_before()
    for name, circuit in (("a", flow.circuit), ("b", before)):
        loc = StorageLocation.open(str(tmp_path / name), fingerprint=circuit.fingerprint)
        circuit.open(loc)
    flow.resume(None)
    t0 = 1_700_000_000_000_000
    stream = pa.table(
        {
            "user": ["a", "b", "a", None],
            "amount": [1, 2, None, 4],
            "ts": pa.array([t0, t0 + 40_000_000, t0 + 70_000_000, None], TS),
        }
    )
    left = stream.select(["user", "amount"])
    right = pa.table({"user": ["a", "a"], "amount": [5, 6], "note": ["x", "y"]})
    undo = right.slice(0, 1).append_column(WEIGHT, pa.array([-1], pa.int64()))
    steps: list[dict[str, pa.Table]] = [
        {"source": stream, "pairs.left": left, "pairs.right": right},
        {"source": stream.slice(0, 2), "pairs.right": undo},
    ]
    for deltas in steps:
        got = flow.step(deltas)
        want = before.step(_all_inputs(deltas))
        for op in want:
            assert _rows(got[op]) == _rows(want[op]), op


def _all_inputs(deltas: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """A circuit needs every input at every step: the absent ones empty."""
    empty = {"source": STREAM, "pairs.left": LEFT, "pairs.right": RIGHT}
    return {k: deltas.get(k, s.empty_table()) for k, s in empty.items()}


def test_a_missing_column_names_its_operator() -> None:
    state = [{**STATE[0], "group_by": ["page"]}]
    with pytest.raises(SpecError, match=r"state.0: .*'page'"):
        _flow(state)
