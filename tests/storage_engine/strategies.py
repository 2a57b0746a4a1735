"""Shared schemas, hypothesis strategies and the plain-dict Z-set reference model.

The model of a Z-set is `{(key..., value...): weight}` with zero weights removed. Rows order
by their columns in turn, with None (null) before every other value.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

from storage_engine import Batch, ZSetSchema

Row = tuple[Any, ...]
Model = dict[Row, int]


@dataclass(frozen=True)
class Case:
    """A schema with strategies for one key tuple and one value tuple."""

    name: str
    schema: ZSetSchema
    key: st.SearchStrategy[tuple[Any, ...]]
    value: st.SearchStrategy[tuple[Any, ...]]

    @property
    def nkeys(self) -> int:
        return len(self.schema.keys)


_BASE_TS = dt.datetime(2024, 1, 1)
_TS = st.integers(0, 40).map(lambda s: _BASE_TS + dt.timedelta(seconds=s * 7))
_WORDS = st.sampled_from(["", "a", "ab", "b", "ba", "zz", "é", "a\x00", "m" * 20])
_SMALL = st.integers(-6, 30)

CASES: dict[str, Case] = {
    "int64": Case(
        "int64",
        ZSetSchema.of([("k", pa.int64())], [("v", pa.int64())]),
        st.tuples(st.integers(-(2**40), 2**40) | _SMALL),
        st.tuples(st.integers(0, 3)),
    ),
    "int64_novalue": Case(
        "int64_novalue",
        ZSetSchema.of([("k", pa.int64())]),
        st.tuples(_SMALL),
        st.just(()),
    ),
    "string": Case(
        "string",
        ZSetSchema.of([("k", pa.string())], [("v", pa.string())]),
        st.tuples(_WORDS),
        st.tuples(st.sampled_from(["x", "y", ""])),
    ),
    "timestamp": Case(
        "timestamp",
        ZSetSchema.of([("t", pa.timestamp("us"))], [("v", pa.int64())]),
        st.tuples(_TS),
        st.tuples(st.integers(0, 2)),
    ),
    "composite": Case(
        "composite",
        ZSetSchema.of([("s", pa.string()), ("i", pa.int32())], [("v", pa.int64())]),
        st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(-3, 5)),
        st.tuples(st.integers(0, 2)),
    ),
    "composite_novalue": Case(
        "composite_novalue",
        ZSetSchema.of([("s", pa.string()), ("i", pa.int32())]),
        st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 6)),
        st.just(()),
    ),
    "numeric_composite": Case(
        "numeric_composite",
        ZSetSchema.of([("a", pa.int32()), ("b", pa.bool_())], [("c", pa.int16())]),
        st.tuples(st.integers(-2, 4), st.booleans()),
        st.tuples(st.integers(-2, 2)),
    ),
    "date": Case(
        "date",
        ZSetSchema.of([("d", pa.date32())]),
        st.tuples(st.integers(0, 30).map(lambda d: dt.date(2023, 12, 20) + dt.timedelta(days=d))),
        st.just(()),
    ),
    "nullable_int": Case(
        "nullable_int",
        ZSetSchema.of([("k", pa.int64())], [("v", pa.string())]),
        st.tuples(st.none() | _SMALL),
        st.tuples(st.none() | st.sampled_from(["p", "q"])),
    ),
    "nullable_numeric": Case(
        "nullable_numeric",
        ZSetSchema.of([("k", pa.int64())], [("v", pa.int64())]),
        st.tuples(st.none() | _SMALL),
        st.tuples(st.none() | st.integers(0, 2)),
    ),
    "nullable_string": Case(
        "nullable_string",
        ZSetSchema.of([("k", pa.string())], [("v", pa.int64())]),
        st.tuples(st.none() | _WORDS),
        st.tuples(st.none() | st.integers(0, 2)),
    ),
}

NULL_FREE = [n for n in CASES if not n.startswith("nullable")]

weights = st.integers(-3, 3)


def rows_strategy(case: Case, max_size: int = 40) -> st.SearchStrategy[list[tuple[Row, Row, int]]]:
    """Unconsolidated ((key...), (value...), weight) rows, zero weights and repeats included."""
    return st.lists(st.tuples(case.key, case.value, weights), max_size=max_size)


# -- the reference model ---------------------------------------------------------------------


def add_rows(model: Model, rows: Iterable[tuple[Row, Row, int]]) -> Model:
    """Add unconsolidated rows into `model` in place (dropping zeros); returns it."""
    for k, v, w in rows:
        r = (*k, *v)
        model[r] = model.get(r, 0) + w
        if model[r] == 0:
            del model[r]
    return model


def model_of(rows: Iterable[tuple[Row, Row, int]]) -> Model:
    return add_rows({}, rows)


def add_models(*models: Model) -> Model:
    out: Model = {}
    for m in models:
        add_rows(out, ((r, (), w) for r, w in m.items()))
    return out


def sort_key(row: Sequence[Any]) -> tuple[Any, ...]:
    """Batch order: column by column, None first."""
    return tuple((x is not None, x) for x in row)


def cmp_prefix(key: Sequence[Any], bound: Sequence[Any]) -> int:
    """Compare `key` with `bound` on bound's length (a key prefix), None first."""
    a, b = sort_key(key[: len(bound)]), sort_key(bound)
    return (a > b) - (a < b)


def restrict_keys(model: Model, nkeys: int, keys: Iterable[Row]) -> Model:
    ks = set(keys)
    return {r: w for r, w in model.items() if r[:nkeys] in ks}


def key_range(model: Model, nkeys: int, lo: Row | None, hi: Row | None) -> Model:
    return {
        r: w
        for r, w in model.items()
        if (lo is None or cmp_prefix(r[:nkeys], lo) >= 0)
        and (hi is None or cmp_prefix(r[:nkeys], hi) < 0)
    }


def at_or_above(model: Model, nkeys: int, bound: Row | None) -> Model:
    return key_range(model, nkeys, bound, None)


# -- looking at batches ----------------------------------------------------------------------


def batch_of(case: Case, rows: Iterable[tuple[Row, Row, int]]) -> Batch:
    return Batch.from_tuples(case.schema, rows)


def ordered_rows(batch: Batch) -> list[tuple[Row, int]]:
    """The batch's rows in stored order, as (row tuple, weight)."""
    names = batch.schema.row_names
    cols = [batch.data.column(n).to_pylist() for n in names]
    w = batch.weights.tolist()
    return [(tuple(c[i] for c in cols), int(w[i])) for i in range(len(batch))]


def assert_invariant(batch: Batch) -> None:
    """Sorted strictly by (keys, values) with None first, and every weight non-zero."""
    rows = ordered_rows(batch)
    for (a, _), (b, _) in itertools.pairwise(rows):
        assert sort_key(a) < sort_key(b), f"rows out of order or duplicated: {a!r} then {b!r}"
    assert all(w != 0 for _, w in rows), "zero weight in a consolidated batch"
    assert batch.data.schema == batch.schema.arrow, (
        f"batch data schema {batch.data.schema} differs from {batch.schema.arrow}"
    )


def assert_matches(batch: Batch, model: Model) -> None:
    assert batch.to_dict() == model
    assert_invariant(batch)


def batch_files(path: str) -> set[str]:
    return {n for n in os.listdir(path) if n.endswith(".batch")}
