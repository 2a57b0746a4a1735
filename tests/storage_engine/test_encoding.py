"""Normalized string keys (`storage_engine/encoding.py`) against plain Python: the chunk
of every value at every offset is its bytes there, big-endian, zero-padded; encoded rows
order as their bytes do; probe masks say which probes can match a batch's layout."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_engine import encoding
from tests.conftest import trials

values = st.lists(st.binary(max_size=40), min_size=1, max_size=60)


def reference_chunk(v: bytes, at: int) -> int:
    return int.from_bytes(v[at : at + 8].ljust(8, b"\0"), "big")


@settings(max_examples=200, deadline=None)
@given(values, st.integers(0, 48), st.booleans())
def test_chunks_are_the_bytes_at_each_offset(vals: list[bytes], at: int, sliced: bool) -> None:
    # sliced: an array that starts inside its buffers (offset != 0)
    col = pa.array([b"pad", *vals], pa.binary()).slice(1) if sliced else pa.array(vals, pa.binary())
    starts, lens, data = encoding._buffers(col)
    got = encoding._chunk(starts, lens, data, at).tolist()
    assert got == [reference_chunk(v, at) for v in vals]


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 30), st.integers(1, 200), st.integers(0, 2**32))
def test_fixed_and_variable_widths_agree(width: int, n: int, seed: int) -> None:
    """Back-to-back values of one width take the strided path, others the word loads:
    both give the reference chunks."""
    rng = np.random.default_rng(seed)
    fixed = [bytes(rng.integers(0, 256, width, dtype=np.uint8)) for _ in range(n)]
    ragged = [v[: int(rng.integers(0, width + 1))] for v in fixed]
    for vals in (fixed, ragged):
        starts, lens, data = encoding._buffers(pa.array(vals, pa.binary()))
        for at in (0, 8, 16):
            got = encoding._chunk(starts, lens, data, at).tolist()
            assert got == [reference_chunk(v, at) for v in vals]


@settings(max_examples=150, deadline=None)
@given(values)
def test_encoded_rows_order_as_their_bytes(vals: list[bytes]) -> None:
    rb = pa.record_batch([pa.array(vals, pa.binary())], names=["k"])
    enc = encoding.encode(rb, ["k"])
    if enc is None:  # longer than MAX_CHUNKS chunks after the shared prefix
        assert max(map(len, vals)) - len(encoding.shared_prefix(min(vals), max(vals))) > 32
        return
    cols = enc[0].cols
    order = np.lexsort(cols[::-1])
    assert [vals[i] for i in order] == sorted(vals)


@settings(max_examples=150, deadline=None)
@given(values, values)
def test_probes_encoded_like_a_batch_match_exactly_its_equal_values(
    batch: list[bytes], probes: list[bytes]
) -> None:
    """Probes may be shorter than the batch's shared prefix, or past the data's end at every
    chunk offset: the mask and the chunks must still say exactly which probes are equal."""
    rb = pa.record_batch([pa.array(sorted(set(batch)), pa.binary())], names=["k"])
    enc = encoding.encode(rb, ["k"])
    if enc is None:
        return
    pb = pa.record_batch([pa.array(probes, pa.binary())], names=["k"])
    penc = encoding.encode(pb, ["k"], like=enc[0])
    assert penc is not None
    valid = penc[1] if penc[1] is not None else np.ones(len(probes), bool)
    rows = {
        tuple(int(c[i]) for c in enc[0].cols): v for i, v in enumerate(rb.column(0).to_pylist())
    }
    for j, p in enumerate(probes):
        hit = rows.get(tuple(int(c[j]) for c in penc[0].cols)) if valid[j] else None
        assert (hit == p) if p in rows.values() else hit is None


@settings(max_examples=trials(100, 20), deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from(["", "a", "ab", "abc", "abd", "user-01", "user-02", "zz"])),
        max_size=4,
    )
)
def test_runs_prefix_is_the_common_prefix_of_sorted_runs(runs: list[list[str]]) -> None:
    """What the ends of sorted runs share is what all their values share; a merge encodes
    its concatenated runs with it and gets what encoding from scratch gives."""
    arrays = [pa.array(sorted(r), pa.string()) for r in runs]
    values = [v for r in runs for v in r]
    got = encoding.runs_prefix(arrays)
    if not values:
        assert got is None
        return
    raw = [v.encode() for v in values]
    n = 0
    while all(len(v) > n and v[n] == raw[0][n] for v in raw):
        n += 1
    want = raw[0][:n]
    assert got == want
    rb = pa.record_batch([pa.concat_arrays(arrays)], names=["k"])
    fresh, given_ = encoding.encode(rb, ["k"]), encoding.encode(rb, ["k"], first_prefix=got)
    assert fresh is not None and given_ is not None
    assert fresh[0].layouts == given_[0].layouts
    assert all((a == b).all() for a, b in zip(fresh[0].cols, given_[0].cols, strict=True))


def test_runs_prefix_is_none_without_strings_or_with_nulls() -> None:
    assert encoding.runs_prefix([pa.array([1, 2])]) is None
    assert encoding.runs_prefix([pa.array([None, "a"], pa.string())]) is None
    assert encoding.runs_prefix([]) is None


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.binary(max_size=20) | st.sampled_from([b"abcdefgh", b"abcdefghij"]),
        min_size=1,
        max_size=12,
    ),
    st.booleans(),
)
def test_common_prefix_is_what_the_smallest_and_largest_value_share(
    vals: list[bytes], sliced: bool
) -> None:
    col = pa.array([b"pad", *vals], pa.binary()).slice(1) if sliced else pa.array(vals, pa.binary())
    mm = pc.min_max(col)
    want = encoding.shared_prefix(mm["min"].as_py(), mm["max"].as_py())
    assert encoding._common_prefix(col) == want
