"""The upsert operator (storage_engine/circuit/upsert.py) against a plain-Python model: a
dict of each key's live row, fed the same upserts and deletes (several per key in a step,
NULL keys, deletes of keys never seen); its integrated output is the model's rows after
every step, across a restore from a checkpoint that redoes steps."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from storage_engine import EngineSettings, StorageLocation
from storage_engine.circuit import Circuit
from storage_engine.circuit.operator import CircuitError
from storage_engine.circuit.upsert import Upsert

SETTINGS = EngineSettings(block_rows=32, merge_base_rows=32, merge_fanout=3)
SCHEMA = pa.schema(
    [("k", pa.int64()), ("op", pa.string()), ("tag", pa.string()), ("v", pa.float64())]
)
Event = tuple[Any, str | None, float | None, bool]


def _events(rng: random.Random, n: int) -> list[Event]:
    keys = [None, *range(8)]
    return [
        (
            rng.choice(keys),
            rng.choice(["a", "b", None]),
            rng.choice([1.0, 2.5, None]),
            rng.random() < 0.3,
        )
        for _ in range(n)
    ]


def _table(events: list[Event], rng: random.Random) -> pa.Table:
    """The events in order; a delete's op in any case, an upsert's any other op or NULL."""
    ops = [
        rng.choice(["delete", "D", "Delete"]) if e[3] else rng.choice(["u", "c", None])
        for e in events
    ]
    return pa.table(
        {
            "k": pa.array([e[0] for e in events], pa.int64()),
            "op": pa.array(ops, pa.string()),
            "tag": pa.array([e[1] for e in events], pa.string()),
            "v": pa.array([e[2] for e in events], pa.float64()),
        }
    )


def _open(path: Path) -> tuple[Circuit, Upsert, StorageLocation]:
    op = Upsert("u", SCHEMA, ["k"], "op")
    c = Circuit([op])
    loc = StorageLocation.open(str(path), fingerprint=c.fingerprint, settings=SETTINGS)
    c.open(loc)
    return c, op, loc


def _apply(model: dict[Any, tuple[Any, ...]], events: list[Event]) -> int:
    """The events on the model, in order; how many deleted a key without a row."""
    unmatched = 0
    for k, tag, v, deleted in events:
        if deleted:
            unmatched += k not in model
            model.pop(k, None)
        else:
            model[k] = (k, tag, v)
    return unmatched


@pytest.mark.parametrize("seed", range(4))
def test_upsert_matches_the_model(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    steps = [_events(rng, rng.randint(0, 14)) for _ in range(30)]
    circuit, op, loc = _open(tmp_path)
    model: dict[Any, tuple[Any, ...]] = {}
    out: Counter[tuple[Any, ...]] = Counter()
    saved: tuple[dict[Any, tuple[Any, ...]], Counter[tuple[Any, ...]]] = ({}, Counter())

    def step(i: int) -> None:
        delta = circuit.step({"source": _table(steps[i], rng)})["u"]
        for r in delta.to_pylist():
            out[(r["k"], r["tag"], r["v"])] += r["__weight"]
        unmatched = op.take_unmatched()
        assert unmatched.num_rows == _apply(model, steps[i]), i
        assert +out == Counter(model.values()) and min(out.values(), default=0) >= 0, i

    for i in range(len(steps)):
        step(i)
        if i == 14:
            circuit.commit_async(i + 1).wait_local()
            saved = (dict(model), Counter(out))
        if i == 20:  # restart from the checkpoint at step 15: redo steps 16..21
            loc.close()
            circuit, op, loc = _open(tmp_path)
            assert loc.step == 15
            model, out = dict(saved[0]), Counter(saved[1])
            for j in range(15, 21):
                step(j)
    loc.close()


def test_upsert_refuses_an_input_without_its_columns() -> None:
    with pytest.raises(CircuitError, match="key"):
        Upsert("u", SCHEMA, [], "op")
    with pytest.raises(CircuitError):
        Upsert("u", pa.schema([("k", pa.int64())]), ["k"], "op")
    with pytest.raises(CircuitError, match="string"):
        Upsert("u", SCHEMA, ["k"], "v")


def test_the_spec_and_the_engine_agree_on_what_deletes() -> None:
    from pipeline_spec.changes import DELETE_OPS as SPEC_DELETE_OPS
    from storage_engine.circuit.upsert import DELETE_OPS

    assert SPEC_DELETE_OPS == DELETE_OPS
