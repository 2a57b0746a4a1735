"""Key groups: which shard of a partitioned operator a row belongs to (issue 50).

A row's key group is a pure function of its key values as the operators compare them, the
same in every process and release: `K` groups (`DEFAULT_KEY_GROUPS` unless a pipeline
records another), fixed for the life of the state, since the state of a shard is the state
of its groups. Shard `s` of `P` owns the groups `[s*K//P, (s+1)*K//P)` (Flink's rule), so a
change of `P` moves whole groups, never splits one.

The hash is the batch files' key hash (`file_format.bloom.key_hashes`, version 3: integers,
timestamps, dates and booleans as int64 through splitmix64, strings by their bytes, other
types by pandas' hash of their Python values), taken after the values are normalised as the
engine's operators see them (`spindle_sql.engine_columns`: -0.0 as 0.0, a column of NULL's
type as NULLs of a typed column), then mixed once more before `% K`:

- equal values of different integer widths (a join's int32 side and int64 side) and of one
  decimal type hash alike, so equal keys meet whatever the side;
- NULL hashes to one value per kind of type, and every NaN alike;
- the bloom filters use the low and high halves of the same hash: without the last mix, the
  keys of one shard would share bits that its files' filters probe.

Changing any of this moves rows between groups, which would strand checkpointed state in
the wrong shard: `tests/storage_engine/test_key_groups.py` pins values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from . import encoding
from .file_format.bloom import key_hashes
from .schema import ZSetSchema

DEFAULT_KEY_GROUPS = 128
_SALT = np.uint64(0x5851F42D4C957F2D)  # keeps group bits apart from the bloom filters' bits
_NO_KEY = np.uint64(0)  # the hash of the empty key (no columns): one group for every row


def key_groups(
    table: pa.Table | pa.RecordBatch, columns: Sequence[str], groups: int
) -> npt.NDArray[np.uint32]:
    """Each row's key group in `[0, groups)` by the values of `columns` (none: every row in
    the empty key's group)."""
    if groups < 1:
        raise ValueError(f"key groups must be at least 1, not {groups}")
    n = table.num_rows
    if not columns:
        h = np.full(n, _NO_KEY, np.uint64)
    else:
        cols = [_normalised(_column(table, c)) for c in columns]
        names = [f"k{i}" for i in range(len(cols))]
        keys = pa.RecordBatch.from_arrays(cols, names=names)
        schema = ZSetSchema(tuple(keys.schema), ())
        h = key_hashes(keys, schema, version=3)
    with np.errstate(over="ignore"):
        mixed = encoding.mix64(h ^ _SALT)
    return (mixed % np.uint64(groups)).astype(np.uint32)


def _column(table: pa.Table | pa.RecordBatch, name: str) -> pa.Array:
    col = table.column(name)
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def _normalised(col: pa.Array) -> pa.Array:
    """The column as the engine's operators compare it (`spindle_sql.engine_columns`)."""
    t = col.type
    if pa.types.is_null(t):
        return pa.nulls(len(col), pa.bool_())
    if pa.types.is_floating(t):
        col = pc.add(col, pa.scalar(0.0, t))  # -0.0 as 0.0
        # One NaN: the hash reads a double's Python value, which prints every NaN alike,
        # but a canonical one leaves nothing to chance.
        return pc.if_else(pc.is_nan(col), pa.scalar(float("nan"), t), col)
    if pa.types.is_dictionary(t):
        return _normalised(col.dictionary_decode())
    return col


def group_starts(shards: int, groups: int) -> npt.NDArray[np.int64]:
    """The first key group of each shard: shard `s` owns `[s*K//P, (s+1)*K//P)`."""
    if not 1 <= shards <= groups:
        raise ValueError(f"shards must be in [1, {groups}] (the key groups), not {shards}")
    return np.asarray([s * groups // shards for s in range(shards)], np.int64)


def owned_groups(shard: int, shards: int, groups: int) -> range:
    """The key groups shard `shard` of `shards` owns."""
    if not 0 <= shard < shards:
        raise ValueError(f"shard {shard} is not one of {shards}")
    return range(shard * groups // shards, (shard + 1) * groups // shards)


def shard_of_groups(
    group: npt.NDArray[np.uint32], shards: int, groups: int
) -> npt.NDArray[np.int64]:
    """The shard owning each key group."""
    starts = group_starts(shards, groups)
    return np.searchsorted(starts, group.astype(np.int64), side="right") - 1


def shards_of(
    table: pa.Table | pa.RecordBatch, columns: Sequence[str], shards: int, groups: int
) -> npt.NDArray[np.int64]:
    """The shard each row belongs to."""
    return shard_of_groups(key_groups(table, columns, groups), shards, groups)


def split_by_shard(
    table: pa.Table, columns: Sequence[str], shards: int, groups: int
) -> dict[int, pa.Table]:
    """The rows of `table` per owning shard (shards without rows left out), each part in
    the table's order."""
    if table.num_rows == 0:
        return {}
    if shards == 1:
        return {0: table}
    owner = shards_of(table, columns, shards, groups)
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(shards + 1))
    taken = table.take(pa.array(order))
    return {
        s: taken.slice(int(bounds[s]), int(bounds[s + 1] - bounds[s]))
        for s in range(shards)
        if bounds[s + 1] > bounds[s]
    }


__all__ = [
    "DEFAULT_KEY_GROUPS",
    "group_starts",
    "key_groups",
    "owned_groups",
    "shard_of_groups",
    "shards_of",
    "split_by_shard",
]
