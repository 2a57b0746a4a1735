"""`KeyRange`, the view lookups' key ranges: `select` on a sorted batch (small ones compared
in Arrow, large ones by binary search) and `BatchFile.in_range` (reading only the blocks the
range may meet) both give exactly the rows a plain-Python filter keeps, for prefixes, open
and closed bounds, nulls and strings."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_engine import Batch, BatchFile, WriteOptions, ZSetSchema
from storage_engine.cache import BufferCache
from storage_engine.file_format import write_batch_file
from storage_engine.fileio import PosixFileLayer
from storage_engine.key_range import KeyRange
from tests.conftest import trials

SCHEMA = ZSetSchema((pa.field("a", pa.int64()), pa.field("b", pa.string())), ())
NAMES = ("a", "b")
A = st.one_of(st.none(), st.integers(0, 6))
B = st.one_of(st.none(), st.sampled_from(["", "a", "ab", "b", "zz", "é"]))


def _in(r: KeyRange, key: tuple[Any, ...]) -> bool:
    """The plain reference: the prefix equal, the next column within the bounds (a null
    is below every value)."""
    n = len(r.prefix)
    if key[:n] != r.prefix:
        return False
    if not r.bounded:
        return True
    v = key[n]
    if r.ge is not None and (v is None or v < r.ge):
        return False
    return r.lt is None or v is None or v < r.lt


def _order(key: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(
        (x is not None, x if x is not None else 0 if i == 0 else "") for i, x in enumerate(key)
    )


ranges = st.one_of(
    st.builds(lambda a: KeyRange((a,)), A),
    st.builds(
        lambda ge, lt: KeyRange((), ge, lt),
        st.one_of(st.none(), st.integers(0, 6)),
        st.one_of(st.none(), st.integers(0, 7)),
    ),
    st.builds(
        lambda a, ge, lt: KeyRange((a,), ge, lt),
        A,
        st.one_of(st.none(), st.sampled_from(["", "a", "b", "z"])),
        st.one_of(st.none(), st.sampled_from(["a", "ab", "c", "zzz"])),
    ),
    st.builds(lambda a, b: KeyRange((a, b)), A, B),
)


def _batch(keys: list[tuple[Any, ...]], repeat: int) -> Batch:
    """The keys, each string made `repeat` distinct ones (so a batch can pass the size at
    which `select` bisects), sorted as batches are."""
    grown = {(a, None if b is None else b + "x" * i) for a, b in keys for i in range(repeat)}
    return Batch.from_tuples(SCHEMA, [(k, (), 1) for k in sorted(grown, key=_order)])


@settings(max_examples=trials(200, 40), deadline=None)
@given(
    keys=st.lists(st.tuples(A, B), min_size=0, max_size=40),
    r=ranges,
    repeat=st.sampled_from([1, 60]),
)
def test_select_and_in_range_keep_what_the_reference_keeps(
    keys: list[tuple[Any, ...]], r: KeyRange, repeat: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    batch = _batch(keys, repeat)
    want = [k for k, _, _ in _rows(batch) if _in(r, k)]
    got = r.select(batch.data, NAMES)
    assert [k for k, _, _ in _rows(Batch(SCHEMA, got))] == want
    path = str(tmp_path_factory.mktemp("kr") / f"{os.urandom(8).hex()}.batch")
    write_batch_file(PosixFileLayer(), path, batch, WriteOptions(block_rows=16))
    cache = BufferCache(1 << 20)
    try:
        from_file = BatchFile(PosixFileLayer(), path, cache).in_range(r)
        assert [k for k, _, _ in _rows(Batch(SCHEMA, from_file))] == want
    finally:
        cache.close()


def _rows(b: Batch) -> list[tuple[tuple[Any, ...], tuple[Any, ...], int]]:
    a, s, w = (b.data.column(n).to_pylist() for n in ("a", "b", "__weight"))
    return [((x, y), (), z) for x, y, z in zip(a, s, w, strict=True)]


def test_text_values_are_cast_to_the_columns_types() -> None:
    assert KeyRange(("3",), "a", "b").typed(SCHEMA.keys) == KeyRange((3,), "a", "b")
    with pytest.raises(ValueError, match="column 'a'"):
        KeyRange(("x",)).typed(SCHEMA.keys)
    with pytest.raises(ValueError, match="2 columns; got 3"):
        KeyRange(("1", "a"), "b").typed(SCHEMA.keys)
    assert KeyRange((), "1").typed(SCHEMA.keys) == KeyRange((), 1)


def test_a_large_batch_cuts_by_binary_search_as_arrow_does(tmp_path: Path) -> None:
    """From `_BISECT_ROWS` rows the cut is a binary search: the same rows as the reference."""
    keys = [(a, f"{b:05d}") for a in range(5) for b in range(600)]
    batch = Batch.from_tuples(SCHEMA, [(k, (), 1) for k in keys])
    for r in (KeyRange((2,)), KeyRange((), 1, 3), KeyRange((4,), "00100", "00200"), KeyRange((9,))):
        got = r.select(batch.data, NAMES)
        assert [k for k, _, _ in _rows(Batch(SCHEMA, got))] == [k for k in keys if _in(r, k)]


def test_columns_compared_in_arrow_cut_by_a_prefix_too() -> None:
    """Doubles and decimals are not searched over Python values (NaN, scales): their cut
    compares in Arrow, and a prefix of a two-column key must stop after its own rows."""
    from decimal import Decimal

    for t, vals in (
        (pa.float64(), [0.5, 1.5, 2.5]),
        (pa.decimal128(10, 2), [Decimal("0.50"), Decimal("1.50"), Decimal("2.50")]),
    ):
        schema = ZSetSchema((pa.field("a", t), pa.field("b", pa.string())), ())
        keys = [(v, s) for v in vals for s in ("x", "y")]
        batch = Batch.from_tuples(schema, [(k, (), 1) for k in keys])
        got = KeyRange((vals[1],)).select(batch.data, NAMES)
        assert got.column("b").to_pylist() == ["x", "y"], t
        assert KeyRange((vals[1],), "y").select(batch.data, NAMES).num_rows == 1
