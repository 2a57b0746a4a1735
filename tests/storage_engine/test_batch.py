"""In-memory batches against the plain-dict Z-set model."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_engine import WEIGHT, Batch, ZSetSchema
from tests.conftest import trials

from .strategies import (
    CASES,
    Case,
    Row,
    add_models,
    assert_invariant,
    assert_matches,
    at_or_above,
    batch_of,
    key_range,
    model_of,
    ordered_rows,
    restrict_keys,
    rows_strategy,
    sort_key,
)

ALL = sorted(CASES)
PROPS = settings(
    max_examples=trials(60, 12),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _no_nulls(key: Row) -> bool:
    return all(x is not None for x in key)


# -- consolidation ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_construction_consolidates(name: str) -> None:
    case = CASES[name]

    @PROPS
    @given(rows=rows_strategy(case, 60))
    def check(rows: list[tuple[Row, Row, int]]) -> None:
        b = batch_of(case, rows)
        assert_matches(b, model_of(rows))
        assert len(b) == len(model_of(rows))
        assert int(b.weights.sum()) == sum(model_of(rows).values())

    check()


@pytest.mark.parametrize("name", ALL)
def test_merge_of_many_batches_is_the_sum(name: str) -> None:
    case = CASES[name]

    @PROPS
    @given(parts=st.lists(rows_strategy(case, 25), min_size=0, max_size=6), data=st.data())
    def check(parts: list[list[tuple[Row, Row, int]]], data: st.DataObject) -> None:
        batches = [batch_of(case, p) for p in parts]
        expected = add_models(*(model_of(p) for p in parts))
        base = batch_of(case, data.draw(rows_strategy(case, 10)))
        expected = add_models(expected, base.to_dict())
        assert_matches(base.merge(*batches), expected)
        # merge is commutative and associative
        if batches:
            perm = data.draw(st.permutations(batches))
            assert perm[0].merge(*perm[1:], base).to_dict() == expected
            folded = base
            for b in batches:
                folded = folded.merge(b)
            assert_matches(folded, expected)

    check()


@pytest.mark.parametrize("name", ALL)
def test_negate(name: str) -> None:
    case = CASES[name]

    @PROPS
    @given(rows=rows_strategy(case))
    def check(rows: list[tuple[Row, Row, int]]) -> None:
        b = batch_of(case, rows)
        n = b.negate()
        assert_matches(n, {r: -w for r, w in model_of(rows).items()})
        assert len(b.merge(n)) == 0
        assert n.negate().to_dict() == b.to_dict()

    check()


# -- seek / range / truncate -----------------------------------------------------------------


def _probe_forms(case: Case, probes: list[Row]) -> list[Any]:
    """The same probe keys in every input shape `seek` accepts."""
    names = case.schema.key_names
    cols = {n: [p[i] for p in probes] for i, n in enumerate(names)}
    arrays = [pa.array(cols[f.name], f.type) for f in case.schema.keys]
    rb = pa.RecordBatch.from_arrays(arrays, schema=case.schema.key_schema)
    forms: list[Any] = [probes, cols, rb, pa.Table.from_batches([rb])]
    if case.nkeys == 1:
        forms.append([p[0] for p in probes])
        if case.schema.numpy_sortable and probes:
            forms.append(np.asarray(arrays[0].to_numpy(zero_copy_only=False)))
    return forms


@pytest.mark.parametrize("name", ALL)
def test_seek_matches_model(name: str) -> None:
    case = CASES[name]

    @PROPS
    @given(rows=rows_strategy(case), data=st.data())
    def check(rows: list[tuple[Row, Row, int]], data: st.DataObject) -> None:
        b = batch_of(case, rows)
        present = [r[0] for r in rows]
        pool = st.sampled_from(present) | case.key if present else case.key
        # unsorted, duplicated and absent probes; null probes have their own test
        probes = data.draw(st.lists(pool.filter(_no_nulls), max_size=12))
        expected = restrict_keys(model_of(rows), case.nkeys, probes)
        for form in _probe_forms(case, probes):
            assert_matches(b.seek(form), expected)

    check()


def _bound(case: Case) -> st.SearchStrategy[Row | None]:
    """None (unbounded) or a non-null prefix of a key."""
    prefix = st.tuples(case.key, st.integers(1, case.nkeys)).map(lambda t: t[0][: t[1]])
    return st.none() | prefix.filter(_no_nulls)


@pytest.mark.parametrize("name", ALL)
def test_range_is_half_open_on_key_prefix(name: str) -> None:
    case = CASES[name]

    @PROPS
    @given(rows=rows_strategy(case), lo=_bound(case), hi=_bound(case))
    def check(rows: list[tuple[Row, Row, int]], lo: Row | None, hi: Row | None) -> None:
        b = batch_of(case, rows)
        assert_matches(b.range(lo, hi), key_range(model_of(rows), case.nkeys, lo, hi))
        if lo is not None:
            # [lo, lo) is empty; splitting at a bound partitions the batch
            assert len(b.range(lo, lo)) == 0
            below, above = b.range(None, lo), b.range(lo, None)
            assert add_models(below.to_dict(), above.to_dict()) == b.to_dict()
            assert not set(below.to_dict()) & set(above.to_dict())

    check()


@pytest.mark.parametrize("name", ALL)
def test_truncate_below(name: str) -> None:
    case = CASES[name]

    @PROPS
    @given(rows=rows_strategy(case), bound=_bound(case).filter(lambda b: b is not None))
    def check(rows: list[tuple[Row, Row, int]], bound: Row) -> None:
        b = batch_of(case, rows)
        assert_matches(b.truncate_below(bound), at_or_above(model_of(rows), case.nkeys, bound))

    check()


# -- examples and edge cases -----------------------------------------------------------------

INT = CASES["int64"].schema
KEYS_ONLY = CASES["int64_novalue"].schema
COMP = CASES["composite"].schema


def test_empty_batch_operations() -> None:
    e = Batch.empty(INT)
    assert len(e) == 0 and e.to_dict() == {}
    assert e.first_key() is None and e.last_key() is None
    assert len(e.merge()) == 0 and len(e.merge(e, e)) == 0
    assert len(e.negate()) == 0
    assert len(e.seek([1, 2])) == 0 and len(e.seek([])) == 0
    assert len(e.range((0,), (9,))) == 0 and len(e.truncate_below((3,))) == 0
    full = Batch.from_tuples(INT, [((1,), (1,), 2)])
    assert e.merge(full).to_dict() == {(1, 1): 2}
    assert full.merge(e).to_dict() == {(1, 1): 2}
    assert Batch.from_tuples(INT, []).to_dict() == {}
    assert e.data.schema == INT.arrow


def test_seek_with_no_probes_and_absent_probes() -> None:
    b = Batch.from_tuples(INT, [((k,), (0,), 1) for k in range(0, 100, 2)])
    assert len(b.seek([])) == 0
    assert len(b.seek([1, 3, 99, -5, 1000])) == 0
    assert b.seek([98, 0, 0, 51, 98]).to_dict() == {(0, 0): 1, (98, 0): 1}


def test_single_row() -> None:
    b = Batch.from_tuples(COMP, [(("a", 1), (5,), -4)])
    assert b.to_dict() == {("a", 1, 5): -4}
    assert b.first_key() == ("a", 1) == b.last_key()
    assert b.seek([("a", 1)]).to_dict() == {("a", 1, 5): -4}
    assert len(b.seek([("a", 2)])) == 0
    assert b.range(("a",), ("b",)).to_dict() == {("a", 1, 5): -4}
    assert len(b.range(("a", 2), None)) == 0
    assert b.truncate_below(("a", 1)).to_dict() == b.to_dict()
    assert len(b.truncate_below(("a", 2))) == 0


def test_all_cancelling_rows_give_an_empty_batch() -> None:
    rows = [((k,), (), w) for k in range(50) for w in (3, -1, -2)]
    b = Batch.from_tuples(KEYS_ONLY, rows)
    assert len(b) == 0
    pos = Batch.from_tuples(KEYS_ONLY, [((k,), (), 1) for k in range(50)])
    assert len(pos.merge(pos.negate())) == 0
    assert len(pos.merge(pos, pos.negate(), pos.negate())) == 0
    assert Batch.from_tuples(KEYS_ONLY, [((1,), (), 0)]).to_dict() == {}


def test_duplicates_summed_and_sorted_by_key_then_value() -> None:
    b = Batch.from_tuples(
        INT, [((2,), (1,), 1), ((1,), (9,), 1), ((2,), (0,), 1), ((2,), (1,), 4), ((1,), (9,), -1)]
    )
    assert ordered_rows(b) == [((2, 0), 1), ((2, 1), 5)]
    assert b.first_key() == (2,) and b.last_key() == (2,)


def test_keys_sort_before_values_not_lexicographic_strings() -> None:
    s = CASES["string"].schema
    b = Batch.from_tuples(s, [(("b",), ("a",), 1), (("a",), ("z",), 1), (("ab",), ("",), 1)])
    assert [r for r, _ in ordered_rows(b)] == [("a", "z"), ("ab", ""), ("b", "a")]


def test_nulls_sort_first_in_keys_and_values() -> None:
    s = CASES["nullable_int"].schema
    b = Batch.from_tuples(
        s,
        [
            ((3,), ("p",), 1),
            ((None,), ("q",), 1),
            ((-1,), (None,), 1),
            ((None,), (None,), 2),
            ((-1,), ("p",), 1),
            ((None,), ("q",), 1),
        ],
    )
    assert ordered_rows(b) == [
        ((None, None), 2),
        ((None, "q"), 2),
        ((-1, None), 1),
        ((-1, "p"), 1),
        ((3, "p"), 1),
    ]
    assert b.first_key() == (None,)
    assert b.seek([3, -1]).to_dict() == {(-1, None): 1, (-1, "p"): 1, (3, "p"): 1}
    assert b.range((-1,), (3,)).to_dict() == {(-1, None): 1, (-1, "p"): 1}
    assert b.range(None, (0,)).to_dict() == {
        (None, None): 2,
        (None, "q"): 2,
        (-1, None): 1,
        (
            -1,
            "p",
        ): 1,
    }
    assert b.truncate_below((0,)).to_dict() == {(3, "p"): 1}


def test_seek_null_probe_finds_rows_with_null_key() -> None:
    """A null key is a key like any other: the dict model finds it, so must seek."""
    for name, present in (("nullable_int", 4), ("nullable_string", "a")):
        case = CASES[name]
        b = Batch.from_tuples(case.schema, [((None,), (None,), 3), ((present,), (None,), 1)])
        assert b.seek([None]).to_dict() == {(None, None): 3}, name
        assert b.seek([present, None]).to_dict() == b.to_dict(), name


def test_range_and_truncate_with_null_bound() -> None:
    """Nulls sort first, so a (None,) lower bound excludes nothing."""
    s = CASES["nullable_int"].schema
    b = Batch.from_tuples(s, [((None,), ("p",), 1), ((2,), ("p",), 1)])
    assert b.range((None,), None).to_dict() == b.to_dict()
    assert b.truncate_below((None,)).to_dict() == b.to_dict()
    assert len(b.range(None, (None,))) == 0


def test_composite_prefix_bounds() -> None:
    rows = [((s, i), (0,), 1) for s in "abc" for i in range(-2, 3)]
    b = Batch.from_tuples(COMP, rows)
    assert {r[:2] for r in b.range(("b",), ("c",)).to_dict()} == {("b", i) for i in range(-2, 3)}
    assert {r[:2] for r in b.range(("a", 1), ("b", 0)).to_dict()} == {
        ("a", 1),
        ("a", 2),
        ("b", -2),
        ("b", -1),
    }
    assert {r[0] for r in b.truncate_below(("c",)).to_dict()} == {"c"}
    assert b.seek([("b", 0), ("z", 0), ("b", 0), ("a", 9)]).to_dict() == {("b", 0, 0): 1}


def test_timestamp_keys() -> None:
    s = CASES["timestamp"].schema
    t0 = dt.datetime(2024, 5, 1, 12)
    rows = [((t0 + dt.timedelta(minutes=m),), (m % 2,), 1) for m in range(20)]
    b = Batch.from_tuples(s, rows)
    assert_invariant(b)
    assert b.first_key() == (t0,)
    hit = b.seek([t0 + dt.timedelta(minutes=3), t0 - dt.timedelta(days=1)])
    assert hit.to_dict() == {(t0 + dt.timedelta(minutes=3), 1): 1}
    cut = b.truncate_below((t0 + dt.timedelta(minutes=15),))
    assert len(cut) == 5
    assert len(b.range((t0,), (t0 + dt.timedelta(minutes=10),))) == 10


def test_from_arrow_weights() -> None:
    rb = pa.record_batch({"k": [3, 1, 3], "v": [0, 0, 0]})
    assert Batch.from_arrow(INT, rb).to_dict() == {(1, 0): 1, (3, 0): 2}
    assert Batch.from_arrow(INT, rb, weights=[1, 2, -1]).to_dict() == {(1, 0): 2}
    with_w = pa.record_batch({"k": [3, 1, 3], "v": [0, 0, 0], WEIGHT: pa.array([5, 1, -5])})
    assert Batch.from_arrow(INT, with_w).to_dict() == {(1, 0): 1}
    table = pa.Table.from_batches([rb, rb])
    assert Batch.from_arrow(INT, table).to_dict() == {(1, 0): 2, (3, 0): 4}
    assert len(Batch.from_arrow(INT, table.slice(0, 0))) == 0


def test_from_columns_numpy() -> None:
    k = np.array([5, 5, 1, 2], dtype=np.int64)
    v = np.array([1, 1, 1, 1], dtype=np.int64)
    b = Batch.from_columns(INT, {"k": k, "v": v}, np.array([1, 1, -1, 0]))
    assert ordered_rows(b) == [((1, 1), -1), ((5, 1), 2)]


def test_merge_rejects_another_schema() -> None:
    a = Batch.from_tuples(INT, [((1,), (1,), 1)])
    other = ZSetSchema.of([("k", pa.int64())], [("w", pa.int64())])
    b = Batch.from_tuples(other, [((1,), (1,), 1)])
    with pytest.raises(ValueError):
        a.merge(b)


def test_operations_return_new_batches() -> None:
    a = Batch.from_tuples(INT, [((1,), (1,), 1), ((2,), (1,), 1)])
    before = a.to_dict()
    a.merge(a.negate())
    a.negate()
    a.truncate_below((2,))
    a.range((2,), None)
    a.seek([1])
    assert a.to_dict() == before


def test_large_numeric_merges_repair_interleaved_runs() -> None:
    """Many sorted runs that interleave in later columns (the NumPy merge's repair path)."""
    s = CASES["numeric_composite"].schema
    rng = np.random.default_rng(7)
    model: dict[tuple[Any, ...], int] = {}
    batches = []
    for _ in range(8):
        n = 3000
        a = rng.integers(0, 40, n).astype(np.int32)
        bb = rng.integers(0, 2, n).astype(bool)
        c = rng.integers(-50, 50, n).astype(np.int16)
        w = rng.integers(-2, 3, n)
        for row in zip(a.tolist(), bb.tolist(), c.tolist(), w.tolist(), strict=True):
            r = row[:3]
            model[r] = model.get(r, 0) + row[3]
        batches.append(Batch.from_columns(s, {"a": a, "b": bb, "c": c}, w))
    model = {r: w for r, w in model.items() if w}
    merged = batches[0].merge(*batches[1:])
    assert_matches(merged, model)
    probes = [
        (int(x), bool(y))
        for x, y in zip(rng.integers(-5, 45, 60), rng.integers(0, 2, 60), strict=False)
    ]
    assert_matches(merged.seek(probes), restrict_keys(model, 2, probes))
    assert sorted(model, key=sort_key) == [r for r, _ in ordered_rows(merged)]


_AFFIXES = st.sampled_from(["", "a", "ab", "abc", "abd", "x" * 11, "y" * 19, "é"])


@pytest.mark.parametrize(
    "keys",
    [
        [("s", pa.string())],
        [("s", pa.string()), ("i", pa.int32())],
        [("i", pa.int32()), ("s", pa.string())],
    ],
    ids=["string", "string_int", "int_string"],
)
def test_merge_reuses_key_encodings_of_its_inputs(keys: list[tuple[str, pa.DataType]]) -> None:
    """Inputs whose key encodings share prefixes but not chunk counts (or not prefixes)
    merge into the same rows, and the output's carried encoding answers seeks."""
    schema = ZSetSchema.of(keys, [("v", pa.int64())])

    def key(prefix: str) -> st.SearchStrategy[tuple[Any, ...]]:
        def prefixed(a: str) -> str:
            return prefix + a

        parts: list[st.SearchStrategy[Any]] = [
            _AFFIXES.map(prefixed) if pa.types.is_string(t) else st.integers(-2, 2) for _, t in keys
        ]
        return st.tuples(*parts)

    @settings(max_examples=trials(60, 15), deadline=None)
    @given(
        groups=st.lists(
            st.sampled_from(["user-1", "user-2", "user-"]).flatmap(
                lambda p: st.lists(
                    st.tuples(key(p), st.tuples(st.integers(0, 2)), st.integers(-2, 2)),
                    min_size=1,
                    max_size=12,
                )
            ),
            min_size=2,
            max_size=4,
        ),
        probes=st.lists(key("user-"), max_size=6),
    )
    def check(groups: list[list[Any]], probes: list[Any]) -> None:
        batches = [Batch.from_tuples(schema, rows) for rows in groups]
        model = model_of([r for rows in groups for r in rows])
        merged = batches[0].merge(*batches[1:])
        assert_matches(merged, model)
        present = [k for rows in groups for k, _, _ in rows[:2]]
        for ks in (present, probes):
            assert_matches(merged.seek(ks), restrict_keys(model, len(keys), ks))

    check()
