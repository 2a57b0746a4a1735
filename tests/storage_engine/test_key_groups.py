"""Key groups (storage_engine/key_groups.py): rows whose keys the operators take as equal
share a group whatever their column's width or sign of zero, groups are the same in every
process and release (pinned: checkpointed shards hold their groups' state), and shards own
contiguous ranges of groups (Flink's rule)."""

from __future__ import annotations

import os
import subprocess
import sys
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from storage_engine.key_groups import (
    DEFAULT_KEY_GROUPS,
    group_starts,
    key_groups,
    owned_groups,
    shard_of_groups,
    shards_of,
    split_by_shard,
)

K = DEFAULT_KEY_GROUPS


def groups(values: list[object], t: pa.DataType, k: int = K) -> list[int]:
    return key_groups(pa.table({"x": pa.array(values, t)}), ["x"], k).tolist()


@pytest.mark.parametrize("t", [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint32()])
def test_equal_integers_of_any_width_share_a_group(t: pa.DataType) -> None:
    values = [0, 1, 7, 100, None]
    assert groups(values, t) == groups(values, pa.int64())


def test_a_join_on_int32_and_int64_sides_meets() -> None:
    left = pa.table({"a": pa.array([1, 2, 3, None], pa.int32()), "s": ["x", "y", "z", "w"]})
    right = pa.table({"s": ["x", "y", "z", "w"], "b": pa.array([1, 2, 3, None], pa.int64())})
    assert key_groups(left, ["a", "s"], K).tolist() == key_groups(right, ["b", "s"], K).tolist()


def test_doubles_as_the_engine_compares_them() -> None:
    nan_bits = np.array([0x7FF8000000000001, 0xFFF8000000000000], np.uint64).view(np.float64)
    got = groups(
        [0.0, -0.0, float("nan"), float(nan_bits[0]), float(nan_bits[1]), None], pa.float64()
    )
    assert got[0] == got[1]  # -0.0 is 0.0
    assert got[2] == got[3] == got[4]  # one NaN
    assert groups([1.5, -0.0], pa.float32()) == groups([1.5, 0.0], pa.float32())


def test_decimals_of_one_type_and_strings_of_either_width() -> None:
    d = pa.decimal128(12, 2)
    assert groups([Decimal("1.50"), Decimal("1.5")], d) == groups([Decimal("1.5")] * 2, d)
    assert groups(["a", "bc", None], pa.string()) == groups(["a", "bc", None], pa.large_string())


def test_null_is_one_value_and_a_null_column_is_nulls() -> None:
    for t in (pa.int64(), pa.int32(), pa.string(), pa.timestamp("us", tz="UTC"), pa.bool_()):
        (a, b) = groups([None, None], t)
        assert a == b
    assert groups([None, None], pa.null()) == groups([None, None], pa.bool_())


def test_no_columns_is_one_group_for_every_row() -> None:
    t = pa.table({"x": [1, 2, 3]})
    assert key_groups(t, [], K).tolist() == [101] * 3  # pinned: keyless operators' shard


def test_groups_are_spread_and_in_range() -> None:
    t = pa.table({"x": pa.array(range(20_000), pa.int64())})
    g = key_groups(t, ["x"], K)
    assert g.dtype == np.uint32 and int(g.max()) < K
    counts = np.bincount(g, minlength=K)
    assert counts.min() > 0.7 * counts.mean() and counts.max() < 1.3 * counts.mean()


# Recorded with state: a change here strands every checkpointed shard's rows in the wrong
# shard. Never update these values; make a new rule (and a migration) instead.
PINNED = {
    "int64": (pa.int64(), [0, 1, -1, 42, 2**40, None], [101, 115, 39, 119, 48, 89]),
    "string": (pa.string(), ["", "a", "auction", "ünïcode", None], [101, 97, 30, 60, 89]),
    "double": (pa.float64(), [0.0, 1.5, -2.25, None], [48, 11, 11, 5]),
    "decimal": (pa.decimal128(10, 2), [Decimal("0.00"), Decimal("12.34"), None], [29, 9, 5]),
    "timestamp": (pa.timestamp("us", tz="UTC"), [0, 1_704_067_200_000_000, None], [101, 18, 89]),
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_groups_are_pinned(name: str) -> None:
    t, values, want = PINNED[name]
    assert groups(values, t) == want


def test_groups_are_the_same_in_another_process() -> None:
    code = (
        "import pyarrow as pa; from storage_engine.key_groups import key_groups;"
        "t = pa.table({'s': ['a', 'b', None, 'auction'], 'd': [0.5, -0.0, None, 3.0]});"
        "print(key_groups(t, ['s', 'd'], 128).tolist())"
    )
    t = pa.table({"s": ["a", "b", None, "auction"], "d": [0.5, -0.0, None, 3.0]})
    here = key_groups(t, ["s", "d"], 128).tolist()
    env = {"PYTHONHASHSEED": "12345"}  # Python's own string hashes differ: ours may not
    there = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    ).stdout
    assert there.strip() == str(here)


@pytest.mark.parametrize("shards", [1, 2, 3, 5, 7])
def test_shards_own_contiguous_ranges_that_cover_the_groups(shards: int) -> None:
    ranges = [owned_groups(s, shards, K) for s in range(shards)]
    assert [g for r in ranges for g in r] == list(range(K))
    assert [r.start for r in ranges] == group_starts(shards, K).tolist()
    every = np.arange(K, dtype=np.uint32)
    owner = shard_of_groups(every, shards, K)
    for s, r in enumerate(ranges):
        assert set(np.flatnonzero(owner == s).tolist()) == set(r)


def test_rescaling_moves_whole_groups() -> None:
    t = pa.table({"x": pa.array(range(5_000), pa.int64())})
    g = key_groups(t, ["x"], K)
    at2, at3 = shards_of(t, ["x"], 2, K), shards_of(t, ["x"], 3, K)
    for group in range(K):
        rows = g == group
        assert len(set(at2[rows].tolist())) <= 1 and len(set(at3[rows].tolist())) <= 1


def test_split_by_shard_keeps_every_row_once_in_order() -> None:
    t = pa.table({"x": pa.array(range(1_000), pa.int64()), "y": pa.array(range(1_000))})
    parts = split_by_shard(t, ["x"], 3, K)
    assert sorted(v for p in parts.values() for v in p.column("x").to_pylist()) == list(range(1000))
    for s, p in parts.items():
        xs = p.column("x").to_pylist()
        assert xs == sorted(xs)
        assert set(shards_of(p, ["x"], 3, K).tolist()) == {s}
    assert split_by_shard(t.slice(0, 0), ["x"], 3, K) == {}


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        key_groups(pa.table({"x": [1]}), ["x"], 0)
    with pytest.raises(ValueError):
        group_starts(K + 1, K)
