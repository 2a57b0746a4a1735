"""A spine's late-materialized lookup (`storage_engine.lookup`) and the kernels under it:
the same rows as the general path and as a dict, for in-memory batches and files (searched
whole or block by block), and each kernel against a plain reference."""

from __future__ import annotations

import tempfile
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_engine import (
    Batch,
    EngineSettings,
    StorageLocation,
    ZSetSchema,
    encoding,
    kernels,
    lookup,
)
from storage_engine.lookup.seek import seek_matches, single_value
from storage_engine.spine import Spine, _lead_range
from tests.conftest import trials

from .strategies import CASES, Model, Row, add_rows, assert_matches, batch_of, restrict_keys

LATE = [n for n in sorted(CASES) if lookup.applies(CASES[n].schema)]


def test_the_late_path_covers_plain_numbers_and_encodable_keys() -> None:
    """Which of the shared schemas take the late path (the rest take the general one)."""
    assert LATE == ["composite", "composite_novalue", "int64", "int64_novalue",
                    "nullable_numeric", "nullable_string", "timestamp"]  # fmt: skip


def _settings(block_rows: int) -> EngineSettings:
    # files of many small blocks, so that seeks search whole files and single blocks
    return EngineSettings(
        memory_budget_bytes=1024,
        max_memory_batch_bytes=512,
        cache_budget_bytes=1 << 20,
        block_rows=block_rows,
        merge_base_rows=8,
        merge_fanout=2,
        max_batches_per_spine=16,
    )


def _late(spine: Spine, keys: Any) -> pa.RecordBatch | None:
    entries = spine.snapshot()
    return spine._find(entries, keys, _lead_range(entries))


def _general(spine: Spine, keys: Any) -> Any:
    entries = spine.snapshot()
    return spine._seek_batches(entries, keys, _lead_range(entries))


@pytest.mark.parametrize("name", sorted(CASES))
def test_seeks_match_the_general_path_and_the_model(name: str) -> None:
    """Many batches (in memory and in files of several blocks), probes present, absent,
    repeated, few or many: the late path, the general path and a dict agree, and the late
    path is taken wherever the schema and the data allow it."""
    case = CASES[name]
    rows_st = st.lists(st.tuples(case.key, case.value, st.integers(-2, 3)), max_size=80)

    @settings(
        max_examples=trials(10, 3), deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    @given(parts=st.lists(rows_st, min_size=1, max_size=8), data=st.data())
    def check(parts: list[list[tuple[Row, Row, int]]], data: st.DataObject) -> None:
        block_rows = data.draw(st.sampled_from([4, 16]))
        with tempfile.TemporaryDirectory() as d:
            loc = StorageLocation.open(d, fingerprint="fp", settings=_settings(block_rows))
            try:
                sp = loc.spine("op", case.schema)
                model: Model = {}
                for rows in parts:
                    sp.insert(batch_of(case, rows))
                    add_rows(model, rows)
                present = [r[0] for p in parts for r in p if None not in r[0]]
                pool = st.sampled_from(present) | case.key if present else case.key
                probe_st = pool.filter(lambda k: None not in k)
                for _ in range(2):  # before and after the merges finish
                    for size in (3, 40):
                        probes = data.draw(st.lists(probe_st, max_size=size))
                        keys = [p[0] for p in probes] if case.nkeys == 1 else probes
                        want = restrict_keys(model, case.nkeys, probes)
                        assert_matches(sp.seek(keys), want)
                        assert_matches(_general(sp, keys), want)
                        late = _late(sp, keys) if name in LATE else None
                        if late is not None:
                            assert late.equals(sp.seek(keys).data)
                        elif name in LATE and not name.startswith("nullable") and model:
                            raise AssertionError("the late path was not taken")
                    loc.wait_idle()
            finally:
                loc.close()

    check()


def test_a_seek_below_the_lower_bound_finds_nothing() -> None:
    case = CASES["int64"]
    with tempfile.TemporaryDirectory() as d:
        loc = StorageLocation.open(d, fingerprint="fp", settings=_settings(4))
        try:
            sp = loc.spine("op", case.schema)
            rows = [((k,), (k % 3,), 1) for k in range(200)]
            sp.insert(batch_of(case, rows))
            sp.truncate_below((120,))
            got = sp.seek(list(range(0, 200, 7)))
            assert got.to_dict() == {(k, k % 3): 1 for k in range(126, 200, 7)}
        finally:
            loc.close()


def test_null_values_send_a_seek_to_the_general_path() -> None:
    schema = ZSetSchema.of([("k", pa.int64())], [("v", pa.int64())])
    with tempfile.TemporaryDirectory() as d:
        loc = StorageLocation.open(d, fingerprint="fp", settings=_settings(4))
        try:
            sp = loc.spine("op", schema)
            sp.insert(Batch.from_tuples(schema, [((1,), (None,), 1), ((2,), (5,), 2)]))
            assert _late(sp, [1, 2]) is None
            assert sp.seek([1, 2, 3]).to_dict() == {(1, None): 1, (2, 5): 2}
        finally:
            loc.close()


def test_keys_too_long_to_encode_send_a_seek_to_the_general_path() -> None:
    """A probe (or key) longer than the encoding's chunks after the shared prefix: the late
    path declines and the general one answers."""
    schema = ZSetSchema.of([("k", pa.string())], [("v", pa.int64())])
    long_key = "k" + "x" * 60 + "!"
    with tempfile.TemporaryDirectory() as d:
        loc = StorageLocation.open(d, fingerprint="fp", settings=_settings(4))
        try:
            sp = loc.spine("op", schema)
            rows = [((f"a{i}",), (i,), 1) for i in range(30)] + [((long_key,), (7,), 2)]
            sp.insert(Batch.from_tuples(schema, rows))
            assert _late(sp, ["a3", long_key]) is None
            assert sp.seek(["a3", long_key, "zz"]).to_dict() == {("a3", 3): 1, (long_key, 7): 2}
        finally:
            loc.close()


# -- the kernels ------------------------------------------------------------------------------

_BYTES = st.binary(max_size=30) | st.sampled_from([b"", b"\x00", b"a\x00", b"ab", b"abc" * 9])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_BYTES, max_size=30),
    st.sampled_from([b"", b"a", b"user-000"]),
    st.sampled_from([pa.binary(), pa.large_binary(), pa.string(), pa.large_string()]),
)
def test_decoding_strings_inverts_their_encoding(
    tails: list[bytes], prefix: bytes, t: pa.DataType
) -> None:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        tails = [x.decode("utf-8", "ignore").encode() for x in tails]
        values: list[Any] = [(prefix + x).decode() for x in tails]
    else:
        values = [prefix + x for x in tails]
    col = pa.array(values, t)
    got = encoding.encode_prefixed(pa.record_batch({"k": col}), ["k"], [prefix])
    assert got is not None and got[1].all()
    enc = got[0]
    back = encoding.decode_strings(enc.cols, enc.layouts[0], t)
    back.validate(full=True)
    assert back.equals(col)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 24), st.integers(0, 12), st.integers(1, 60), st.integers(0, 2**32))
def test_fixed_width_strings_encode_as_their_bytes_after_any_cut(
    width: int, cut: int, n: int, seed: int
) -> None:
    """Values of one length lie at a fixed stride: the strided loads read each value's
    bytes after the cut, and the prefix check sees each value's own first bytes."""
    rng = np.random.default_rng(seed)
    cut = min(cut, width)
    prefix = bytes(rng.integers(97, 100, cut, dtype=np.uint8))
    vals = [
        (prefix if rng.random() < 0.8 else bytes(rng.integers(97, 100, cut, dtype=np.uint8)))
        + bytes(rng.integers(0, 256, width - cut, dtype=np.uint8))
        for _ in range(n)
    ]
    rb = pa.record_batch({"k": pa.array(vals, pa.binary())})
    got = encoding.encode_prefixed(rb, ["k"], [prefix])
    assert got is not None
    enc, valid = got
    assert valid.tolist() == [v.startswith(prefix) for v in vals]
    chunks = enc.layouts[0].chunks
    for i, v in enumerate(vals):
        if not valid[i]:
            continue
        tail = v[cut:].ljust(8 * chunks, b"\0")
        want = [int.from_bytes(tail[8 * j : 8 * j + 8], "big") for j in range(chunks)]
        assert [int(enc.cols[j][i]) for j in range(chunks)] == want
        assert int(enc.cols[chunks][i]) == len(v)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_packed_columns_order_and_compare_as_their_rows(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 40))
    kinds = data.draw(
        st.lists(st.sampled_from(["small", "wide", "u64", "i32"]), min_size=1, max_size=3)
    )
    ranges = {"small": (-5, 5), "wide": (-(2**62), 2**62), "u64": (0, 2**64 - 1), "i32": (-3, 3)}
    dtypes = {"small": np.int64, "wide": np.int64, "u64": np.uint64, "i32": np.int32}
    cols = [
        np.array(data.draw(st.lists(st.integers(*ranges[k]), min_size=n, max_size=n)), dtypes[k])
        for k in kinds
    ]
    rows = list(zip(*[c.tolist() for c in cols], strict=True))
    key = kernels.packed(cols)
    if key is None:
        return
    ks = key.tolist()
    for a in range(n):
        for b in range(n):
            assert (rows[a] < rows[b]) == (ks[a] < ks[b])
    w = np.array(data.draw(st.lists(st.integers(-2, 2), min_size=n, max_size=n)), np.int64)
    idx, summed = kernels.consolidate_columns(cols, w, runs=False)
    model: dict[tuple[int, ...], int] = {}
    for r, x in zip(rows, w.tolist(), strict=True):
        model[r] = model.get(r, 0) + x
    assert [(rows[i], x) for i, x in zip(idx.tolist(), summed.tolist(), strict=True)] == sorted(
        (r, x) for r, x in model.items() if x
    )


def test_packing_gives_up_past_64_bits_and_on_other_types() -> None:
    wide = np.array([-(2**62), 2**62])
    assert kernels.packed([wide, wide]) is None
    assert kernels.packed([np.array([0.5, 1.5])]) is None
    assert kernels.packed([np.array([3, 3]), np.array([1, 2])]) is not None


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 1)), max_size=120),
    st.lists(st.tuples(st.integers(0, 32), st.integers(0, 1)), max_size=40),
    st.booleans(),
)
def test_seek_matches_with_fixed_columns_finds_every_equal_row(
    keys: list[tuple[int, int]], probes: list[tuple[int, int]], one_length: bool
) -> None:
    """Rows of a two-column key (a value and a 'length' column, repeated keys), probes
    sorted and unique: every row equal to a probe, with that probe, with and without the
    fixed columns left out."""
    if one_length:
        keys, probes = [(a, 7) for a, _ in keys], [(a, 7) for a, _ in probes]
    rows_in, probes_in = sorted(keys), sorted(set(probes))
    k0 = np.array([a for a, _ in rows_in], dtype=np.uint64)
    k1 = np.array([b for _, b in rows_in], dtype=np.int64)
    p0 = np.array([a for a, _ in probes_in], dtype=np.uint64)
    p1 = np.array([b for _, b in probes_in], dtype=np.int64)
    want = [(i, probes_in.index(r)) for i, r in enumerate(rows_in) if r in probes_in]
    fixed = [single_value(k0), single_value(k1)]
    for args in (None, fixed):
        rows, owners = seek_matches([k0, k1], [p0, p1], args)
        assert list(zip(rows.tolist(), owners.tolist(), strict=True)) == want


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 1), st.integers(0, 40), st.integers(0, 3)),
        min_size=100,
        max_size=400,
    ),
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 42), st.integers(0, 4)), max_size=120),
)
def test_seek_matches_narrows_long_runs_of_the_first_column(
    keys: list[tuple[int, int, int]], probes: list[tuple[int, int, int]]
) -> None:
    """A key led by a column of few values (a window's start before the group): each
    probe's run of that value is narrowed by the next columns, not expanded, and every
    equal row is still found with its probe."""
    rows_in, probes_in = sorted(keys), sorted(set(probes))
    cols = [np.array([r[j] for r in rows_in], dtype=np.uint64) for j in range(3)]
    pcols = [np.array([p[j] for p in probes_in], dtype=np.uint64) for j in range(3)]
    want = [(i, probes_in.index(r)) for i, r in enumerate(rows_in) if r in probes_in]
    rows, owners = seek_matches(cols, pcols)
    assert list(zip(rows.tolist(), owners.tolist(), strict=True)) == want
