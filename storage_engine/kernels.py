"""Vectorised kernels over Arrow record batches: sort, consolidate, merge, seek, bounds.

Two paths with one ordering:
- NumPy, when every row column is fixed-width integral (ints, timestamps, dates, bools) and
  null-free: `lexsort`, `searchsorted`, and a run-aware merge (timsort on the first column,
  then a local repair of the few groups whose later columns interleave);
- Arrow compute for everything else (strings, nulls): `sort_indices`, semi-joins.
Nulls sort first. Both paths produce rows sorted by (keys, values) with weights summed and
zero weights dropped: the batch invariant.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .schema import WEIGHT, ZSetSchema

IntArray = npt.NDArray[np.int64]


def _np(col: pa.Array) -> npt.NDArray[Any]:
    arr: npt.NDArray[Any] = col.to_numpy(zero_copy_only=False)
    if arr.dtype.kind in "mM":
        return arr.view(np.int64)
    if arr.dtype.kind == "b":
        return arr.view(np.uint8)
    return arr


def _numpy_path(rb: pa.RecordBatch, schema: ZSetSchema) -> bool:
    if not schema.numpy_sortable:
        return False
    return all(rb.column(n).null_count == 0 for n in schema.row_names)


def weights(rb: pa.RecordBatch) -> IntArray:
    return np.asarray(rb.column(WEIGHT).to_numpy(zero_copy_only=False), dtype=np.int64)


def _with_weights(rb: pa.RecordBatch, w: IntArray) -> pa.RecordBatch:
    i = rb.schema.get_field_index(WEIGHT)
    return rb.set_column(i, rb.schema.field(i), pa.array(w, pa.int64()))


def _ascending(names: Sequence[str]) -> list[tuple[str, str, str]]:
    return [(n, "ascending", "at_start") for n in names]


def sort_order(rb: pa.RecordBatch, schema: ZSetSchema, runs: bool = False) -> IntArray:
    """Indices that sort `rb` by (keys, values).

    `runs=True` says `rb` is a concatenation of sorted runs (a merge): the NumPy path then
    uses timsort, which finds the runs, instead of SIMD quicksort, which is faster on
    unordered rows.
    """
    names = schema.row_names
    if _numpy_path(rb, schema):
        return _numpy_order([_np(rb.column(n)) for n in names], runs)
    idx = pc.sort_indices(rb, sort_keys=_ascending(names))
    return np.asarray(idx.to_numpy(), dtype=np.int64)


def _numpy_order(cols: list[npt.NDArray[Any]], runs: bool) -> IntArray:
    """Sort by the first column, then re-sort only the groups of equal first-column values
    whose later columns are out of order (rare for keys with few values each)."""
    order = np.asarray(np.argsort(cols[0], kind="stable" if runs else "quicksort"), np.int64)
    if len(cols) == 1 or len(order) < 2:
        return order
    first = cols[0][order]
    same = first[1:] == first[:-1]
    if not same.any():
        return order
    tie = np.flatnonzero(same)
    rest = [c[order[tie]] for c in cols[1:]]
    nxt = [c[order[tie + 1]] for c in cols[1:]]
    lt = np.zeros(len(tie), dtype=bool)
    eq = np.ones(len(tie), dtype=bool)
    for cur, after in zip(rest, nxt, strict=True):
        lt |= eq & (after < cur)
        eq &= after == cur
    if not lt.any():
        return order
    bad = np.unique(first[tie[lt]])
    lo = np.searchsorted(first, bad, side="left")
    hi = np.searchsorted(first, bad, side="right")
    rows = ranges_to_indices(lo, hi)
    group = np.repeat(np.arange(len(bad)), hi - lo)
    sub = np.lexsort([c[order[rows]] for c in cols[:0:-1]] + [group])
    order[rows] = order[rows][sub]
    return order


def _row_changes(rb: pa.RecordBatch, schema: ZSetSchema) -> npt.NDArray[np.bool_]:
    """changes[i] is True when row i+1 differs from row i in some row column."""
    n = rb.num_rows
    changed = np.zeros(max(n - 1, 0), dtype=bool)
    if n < 2:
        return changed
    for name in schema.row_names:
        col = rb.column(name)
        cur, prev = col.slice(1), col.slice(0, n - 1)
        ne = pc.not_equal(cur, prev)
        nulls_differ = pc.not_equal(pc.is_null(cur), pc.is_null(prev))
        changed |= pc.fill_null(ne, nulls_differ).to_numpy(zero_copy_only=False)
    return changed


def _consolidate_order(
    rb: pa.RecordBatch, schema: ZSetSchema, order: IntArray | None
) -> pa.RecordBatch:
    """Rows of `rb` taken in `order` (None: already sorted), equal rows summed, zeros dropped.

    Works on the permuted columns directly so the (expensive) gather of the whole batch
    happens once, for the surviving rows only.
    """
    n = rb.num_rows
    if _numpy_path(rb, schema):
        changes = np.zeros(max(n - 1, 0), dtype=bool)
        for name in schema.row_names:
            c = _np(rb.column(name))
            if order is not None:
                c = c[order]
            changes |= c[1:] != c[:-1]
    else:
        if order is not None:
            rb = rb.take(pa.array(order))
            order = None
        changes = _row_changes(rb, schema)
    w = weights(rb) if order is None else weights(rb)[order]
    if changes.all():
        keep = w != 0
        if keep.all():
            return rb if order is None else rb.take(pa.array(order))
        idx = np.flatnonzero(keep) if order is None else order[keep]
        return rb.take(pa.array(idx))
    starts = np.flatnonzero(np.concatenate(([True], changes)))
    summed = np.add.reduceat(w, starts)
    keep = summed != 0
    idx = starts[keep] if order is None else order[starts[keep]]
    return _with_weights(rb.take(pa.array(idx)), summed[keep])


def consolidate_sorted(rb: pa.RecordBatch, schema: ZSetSchema) -> pa.RecordBatch:
    """Sum the weights of equal adjacent rows and drop zero weights."""
    if rb.num_rows == 0:
        return rb
    return _consolidate_order(rb, schema, None)


def consolidate(rb: pa.RecordBatch, schema: ZSetSchema) -> pa.RecordBatch:
    """Sort and consolidate arbitrary rows."""
    if rb.num_rows == 0:
        return rb
    return _consolidate_order(rb, schema, sort_order(rb, schema))


def merge_sorted(batches: Sequence[pa.RecordBatch], schema: ZSetSchema) -> pa.RecordBatch:
    """Merge consolidated, sorted batches into one consolidated, sorted batch."""
    nonempty = [b for b in batches if b.num_rows]
    if len(nonempty) <= 1:
        return nonempty[0] if nonempty else empty(schema)
    rb = pa.concat_batches(nonempty)
    return _consolidate_order(rb, schema, sort_order(rb, schema, runs=True))


def empty(schema: ZSetSchema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=schema.arrow)


def key_table(keys: Any, schema: ZSetSchema) -> pa.RecordBatch:
    """Probe keys as a record batch of the key columns, sorted and unique.

    Accepts a record batch or table with the key columns, a dict of columns, a NumPy array
    or a list (single key column), or a list of tuples (composite keys).
    """
    ks = schema.key_schema
    if isinstance(keys, pa.Table):
        keys = keys.combine_chunks().to_batches()[0] if keys.num_rows else ks.empty_table()
    if isinstance(keys, pa.Table):
        rb = pa.RecordBatch.from_pylist([], schema=ks)
    elif isinstance(keys, pa.RecordBatch):
        rb = keys.select(schema.key_names).cast(ks)
    elif isinstance(keys, dict):
        rb = pa.record_batch({n: keys[n] for n in schema.key_names}, schema=ks)
    elif len(schema.keys) == 1 and not (len(keys) and isinstance(keys[0], tuple)):
        rb = pa.record_batch([pa.array(keys, type=schema.keys[0].type)], schema=ks)
    else:
        cols: list[Any] = list(zip(*keys, strict=True)) if len(keys) else [[] for _ in schema.keys]
        rb = pa.record_batch(
            [pa.array(c, type=f.type) for c, f in zip(cols, schema.keys, strict=True)], schema=ks
        )
    return _unique_sorted_keys(rb, schema)


def _unique_sorted_keys(rb: pa.RecordBatch, schema: ZSetSchema) -> pa.RecordBatch:
    if rb.num_rows < 2:
        return rb
    names = schema.key_names
    if len(names) == 1 and schema.numpy_sortable and rb.column(0).null_count == 0:
        a = _np(rb.column(0))
        if np.all(a[1:] > a[:-1]):
            return rb
        order = np.argsort(a)
        s = a[order]
        keep = np.concatenate(([True], s[1:] != s[:-1]))
        return rb.take(pa.array(order[keep]))
    idx = pc.sort_indices(rb, sort_keys=_ascending(names))
    rb = rb.take(idx)
    t = pa.Table.from_batches([rb]).group_by(names, use_threads=False).aggregate([])
    t = pa.Table.from_batches(
        [t.select(names).combine_chunks().to_batches()[0]] if t.num_rows else [], schema=rb.schema
    )
    t = t.take(pc.sort_indices(t, sort_keys=_ascending(names)))
    return t.combine_chunks().to_batches()[0] if t.num_rows else rb.slice(0, 0)


def seek(rb: pa.RecordBatch, probes: pa.RecordBatch, schema: ZSetSchema) -> pa.RecordBatch:
    """Rows of sorted `rb` whose key equals one of the sorted, unique `probes` keys."""
    if rb.num_rows == 0 or probes.num_rows == 0:
        return rb.slice(0, 0)
    names = schema.key_names
    if (
        len(names) == 1
        and schema.numpy_sortable
        and rb.column(names[0]).null_count == 0
        and probes.column(0).null_count == 0
    ):
        k = _np(rb.column(names[0]))
        p = _np(probes.column(0))
        lo = np.searchsorted(k, p, side="left")
        n = len(k)
        found = k[np.minimum(lo, n - 1)] == p
        lo = lo[found]
        if len(schema.values) == 0:
            return rb.take(pa.array(lo))  # keys are unique: one row per found key
        hi = lo + 1
        more = hi < n
        more[more] = k[hi[more]] == p[found][more]
        if more.any():
            hi[more] = np.searchsorted(k, p[found][more], side="right")
        return rb.take(pa.array(ranges_to_indices(lo, hi)))
    joined = pa.Table.from_batches([rb]).join(
        pa.Table.from_batches([probes]), keys=names, join_type="left semi", use_threads=False
    )
    if joined.num_rows == 0:
        return rb.slice(0, 0)
    out = joined.combine_chunks().to_batches()[0].select(rb.schema.names)
    return out.take(pa.array(sort_order(out, schema)))


def ranges_to_indices(lo: IntArray, hi: IntArray) -> IntArray:
    """Concatenate the index ranges [lo[i], hi[i])."""
    lengths = hi - lo
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    keep = lengths > 0
    lo, lengths = lo[keep], lengths[keep]
    starts = np.cumsum(lengths) - lengths
    return np.asarray(np.arange(total) - np.repeat(starts - lo, lengths), dtype=np.int64)


def count_below(rb: pa.RecordBatch, names: Sequence[str], bound: Sequence[Any]) -> int:
    """Number of leading rows of sorted `rb` whose `names` columns are < `bound`."""
    if rb.num_rows == 0:
        return 0
    n = rb.num_rows
    lt = np.zeros(n, dtype=bool)
    eq = np.ones(n, dtype=bool)
    for name, b in zip(names, bound, strict=False):
        col = rb.column(name)
        scalar = pa.scalar(b, type=col.type)
        lt |= eq & pc.fill_null(pc.less(col, scalar), True).to_numpy(zero_copy_only=False)
        eq &= pc.fill_null(pc.equal(col, scalar), False).to_numpy(zero_copy_only=False)
    return int(lt.sum())


def row_tuple(rb: pa.RecordBatch, names: Sequence[str], i: int) -> tuple[Any, ...]:
    return tuple(rb.column(n)[i].as_py() for n in names)


def compare_rows(a: tuple[Any, ...], b: tuple[Any, ...]) -> int:
    """Compare row tuples in batch order (None first)."""
    for x, y in zip(a, b, strict=True):
        if x == y:
            continue
        if x is None:
            return -1
        if y is None:
            return 1
        return -1 if x < y else 1
    return 0
