"""Vectorised kernels over Arrow record batches: sort, consolidate, merge, bounds.

Two paths with one ordering:
- NumPy, when every column has an order-preserving NumPy encoding (`encoding.py`: integers,
  temporals, bools, and strings/binaries as normalized-key chunks) and no nulls: sort on the
  first column (SIMD quicksort, or timsort for merges of sorted runs), then re-sort only the
  groups whose later columns are out of order;
- Arrow compute for everything else (nulls, long strings): `sort_indices`.
Nulls sort first. Both paths produce rows sorted by (keys, values) with weights summed and
zero weights dropped: the batch invariant.

Seeks (rows equal to probe keys) are the lookup package's (`lookup/seek.py`); the bounds
here (`count_below`, `count_at_most`, `compare_rows`) serve ranges, truncation and the
cuts of a streamed merge.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from . import encoding
from .schema import WEIGHT, ZSetSchema

IntArray = npt.NDArray[np.int64]


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
    enc = encoding.encode(rb, schema.row_names)
    if enc is not None:
        return _numpy_order(enc[0].cols, runs)
    return arrow_order(rb, schema.row_names)


def arrow_order(rb: pa.RecordBatch, names: Sequence[str]) -> IntArray:
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
    bad = sorted_unique(first[tie[lt]])
    lo = np.searchsorted(first, bad, side="left")
    hi = np.searchsorted(first, bad, side="right")
    rows = ranges_to_indices(lo, hi)
    group = np.repeat(np.arange(len(bad)), hi - lo)
    sub = np.lexsort([c[order[rows]] for c in cols[:0:-1]] + [group])
    order[rows] = order[rows][sub]
    return order


def sorted_unique(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """`np.unique` by sorting: NumPy 2's hash-based `unique` is many times slower here."""
    s = np.sort(a)
    return s[np.concatenate(([True], s[1:] != s[:-1]))] if len(s) else s


def arrow_changes(rb: pa.RecordBatch, names: Sequence[str]) -> npt.NDArray[np.bool_]:
    """changes[i] is True when row i+1 differs from row i in some column (nulls equal)."""
    n = rb.num_rows
    changed = np.zeros(max(n - 1, 0), dtype=bool)
    if n < 2:
        return changed
    for name in names:
        col = rb.column(name)
        if pa.types.is_null(col.type):  # all NULL (a view's `NULL AS x`): no row differs
            continue
        cur, prev = col.slice(1), col.slice(0, n - 1)
        ne = pc.not_equal(cur, prev)
        nulls_differ = pc.not_equal(pc.is_null(cur), pc.is_null(prev))
        changed |= pc.fill_null(ne, nulls_differ).to_numpy(zero_copy_only=False)
    return changed


def _numpy_changes(
    cols: Sequence[npt.NDArray[Any]], order: IntArray | None
) -> npt.NDArray[np.bool_]:
    n = len(cols[0]) if cols else 0
    changed = np.zeros(max(n - 1, 0), dtype=bool)
    for c in cols:
        cp = c if order is None else c[order]
        changed |= cp[1:] != cp[:-1]
    return changed


def _sum_equal_rows(
    rb: pa.RecordBatch, order: IntArray | None, changes: npt.NDArray[np.bool_]
) -> tuple[pa.RecordBatch, IntArray | None]:
    """Rows of `rb` in `order` (None: as they are) with equal neighbours summed, zeros dropped.

    Gathers the batch once, for the surviving rows only. Also returns which input rows
    survived (None when the output is `rb` itself).
    """
    idx, summed = _survivors(weights(rb), order, changes)
    if idx is None:
        return rb, None
    out = rb.take(pa.array(idx))
    return (out if summed is None else _with_weights(out, summed)), idx


def _survivors(
    w: IntArray, order: IntArray | None, changes: npt.NDArray[np.bool_]
) -> tuple[IntArray | None, IntArray | None]:
    """(rows, weights) after summing equal neighbours of the rows in `order` (None: as they
    are) whose weights are `w`, and dropping zero sums: the surviving rows' indices in
    output order (None: all rows, as they are) and their summed weights (None: their own)."""
    if order is not None:
        w = w[order]
    if changes.all():
        keep = w != 0
        if keep.all():
            return order, None
        return (np.flatnonzero(keep) if order is None else order[keep]), None
    starts = np.flatnonzero(np.concatenate(([True], changes)))
    summed = np.add.reduceat(w, starts)
    keep = summed != 0
    return (starts[keep] if order is None else order[starts[keep]]), summed[keep]


def consolidate_columns(
    cols: Sequence[npt.NDArray[Any]], w: IntArray, runs: bool
) -> tuple[IntArray, IntArray]:
    """Sort and consolidate rows given as encoded columns `cols` (keys, then values) with
    weights `w`: the indices of the surviving rows in order, and their weights. `runs`: the
    rows are a concatenation of sorted runs (see `sort_order`)."""
    order, changes = _sorted_changes(cols, runs)
    idx, summed = _survivors(w, order, changes)
    assert idx is not None  # an order was given
    return idx, w[idx] if summed is None else summed


def _sorted_changes(
    cols: Sequence[npt.NDArray[Any]], runs: bool
) -> tuple[IntArray, npt.NDArray[np.bool_]]:
    """The order that sorts encoded rows `cols`, and where the sorted rows change
    (`_numpy_changes`). Rows that pack into one uint64 (`packed`) sort on it alone."""
    key = packed(cols)
    if key is None:
        order = _numpy_order(list(cols), runs)
        return order, _numpy_changes(cols, order)
    order = np.asarray(np.argsort(key, kind="stable" if runs else "quicksort"), np.int64)
    key = key[order]
    return order, key[1:] != key[:-1]


def packed(cols: Sequence[npt.NDArray[Any]]) -> npt.NDArray[np.uint64] | None:
    """One uint64 column whose order and equality are those of the rows of integer columns
    `cols` (compared left to right), when their ranges fit in 64 bits together (a probe
    number and a small value, say); else None. One sort key instead of a sort with ties
    resolved column by column."""
    if not len(cols) or not len(cols[0]):
        return None
    ranges = []
    for c in cols:
        if c.dtype.kind not in "iu":
            return None
        lo, hi = int(c.min()), int(c.max())
        ranges.append((lo, (hi - lo).bit_length()))
    if sum(bits for _, bits in ranges) > 64:
        return None
    out = np.zeros(len(cols[0]), dtype=np.uint64)
    shift = 0
    for c, (lo, bits) in zip(reversed(cols), reversed(ranges), strict=True):
        part = c.astype(np.uint64) - np.uint64(lo % (1 << 64))  # c - lo, modulo 2**64
        part <<= np.uint64(shift)
        out |= part
        shift += bits
    return out


Keyed = tuple[pa.RecordBatch, "KeyEncoding | None"]


def _consolidate(
    rb: pa.RecordBatch,
    schema: ZSetSchema,
    sort: bool,
    runs: bool,
    row_encoding: encoding.Encoding | None = None,
    first_prefix: bytes | None = None,
) -> Keyed:
    """Consolidate, and hand back the output's key encoding when it was worth computing.

    The row encoding made for sorting starts with the key columns' encoding, so gathering
    it for the surviving rows is much cheaper than encoding the output again at its first
    seek. Purely numeric keys are views of the columns: nothing to carry. `row_encoding`:
    the rows' encoding, if the caller has it already; else `first_prefix`, the first key
    column's common string prefix, if the caller knows it (`encoding.encode`).
    """
    if rb.num_rows == 0:
        return rb, None
    names = schema.row_names
    enc = (
        (row_encoding, None)
        if row_encoding is not None
        else encoding.encode(rb, names, first_prefix=first_prefix)
    )
    if enc is not None:
        cols = enc[0].cols
        order, changes = _sorted_changes(cols, runs) if sort else (None, _numpy_changes(cols, None))
        out, idx = _sum_equal_rows(rb, order, changes)
        layouts = enc[0].layouts[: len(schema.keys)]
        if all(lay is None for lay in layouts):
            return out, None
        width = sum(1 if lay is None else lay.chunks + 1 for lay in layouts)
        kcols = [c if idx is None else c[idx] for c in cols[:width]]
        return out, encoding.Encoding(kcols, layouts)
    if sort:
        rb = rb.take(pa.array(arrow_order(rb, names)))
    return _sum_equal_rows(rb, None, arrow_changes(rb, names))[0], None


def consolidate_sorted(rb: pa.RecordBatch, schema: ZSetSchema) -> pa.RecordBatch:
    """Sum the weights of equal adjacent rows and drop zero weights."""
    return _consolidate(rb, schema, sort=False, runs=False)[0]


def consolidate(rb: pa.RecordBatch, schema: ZSetSchema) -> pa.RecordBatch:
    """Sort and consolidate arbitrary rows."""
    return consolidate_keyed(rb, schema)[0]


def consolidate_keyed(rb: pa.RecordBatch, schema: ZSetSchema) -> Keyed:
    return _consolidate(rb, schema, sort=True, runs=False)


def merge_sorted(batches: Sequence[pa.RecordBatch], schema: ZSetSchema) -> pa.RecordBatch:
    """Merge consolidated, sorted batches into one consolidated, sorted batch."""
    return merge_keyed(batches, schema)[0]


def merge_keyed(
    batches: Sequence[pa.RecordBatch],
    schema: ZSetSchema,
    key_encodings: Sequence[KeyEncoding | None] | None = None,
) -> Keyed:
    """`merge_sorted`, also returning the output's key encoding (see `_consolidate`).

    `key_encodings`, one per batch (None: not known), spare encoding the inputs' keys again
    when every input has one with the same string prefixes.
    """
    encs = list(key_encodings) if key_encodings is not None else [None] * len(batches)
    pairs = [(b, e) for b, e in zip(batches, encs, strict=True) if b.num_rows]
    if len(pairs) <= 1:
        return pairs[0] if pairs else (empty(schema), None)
    rb = pa.concat_batches([b for b, _ in pairs])
    rows = _concat_encodings(rb, schema, [e for _, e in pairs])
    # sorted runs: their ends give the first key column's string prefix
    first = encoding.runs_prefix([b.column(0) for b, _ in pairs]) if rows is None else None
    return _consolidate(rb, schema, sort=True, runs=True, row_encoding=rows, first_prefix=first)


def _concat_encodings(
    rb: pa.RecordBatch, schema: ZSetSchema, encs: Sequence[KeyEncoding | None]
) -> encoding.Encoding | None:
    """The row encoding of `rb`, the concatenation of batches whose key encodings are
    `encs`, built from those (no new gather of string bytes), or None."""
    known = [e for e in encs if e is not None]
    if len(known) < len(encs) or any(len(e.layouts) != len(schema.keys) for e in known):
        return None
    if sum(len(e.cols[0]) for e in known) != rb.num_rows:
        return None
    keys = encoding.concat(known)
    values = encoding.encode(rb, schema.value_names) if keys is not None else None
    if keys is None or values is None:
        return None
    return encoding.Encoding(keys.cols + values[0].cols, keys.layouts + values[0].layouts)


def empty(schema: ZSetSchema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=schema.arrow)


def unique_order(cols: list[npt.NDArray[Any]]) -> IntArray | None:
    """Indices that sort encoded rows `cols` and keep the first of equal ones; None when
    they are sorted and unique already (e.g. the keys of a batch: no sort, no take)."""
    if len(cols[0]) < 2 or _strictly_increasing(cols):
        return None
    order = _numpy_order(cols, runs=False)
    return order[np.concatenate(([True], _numpy_changes(cols, order)))]


def _strictly_increasing(cols: Sequence[npt.NDArray[Any]]) -> bool:
    """Whether the rows of encoded columns `cols` are sorted and unique."""
    greater = np.zeros(len(cols[0]) - 1, dtype=bool)
    equal = np.ones(len(cols[0]) - 1, dtype=bool)
    for c in cols:
        greater |= equal & (c[1:] > c[:-1])
        if greater.all():
            return True
        equal &= c[1:] == c[:-1]
    return bool(greater.all())


KeyEncoding = encoding.Encoding


def filler(t: pa.DataType) -> Any:
    """A non-null value of type `t` (stands in for nulls where a value is required)."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return ""
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return b""
    if pa.types.is_boolean(t):
        return False
    if pa.types.is_date32(t):  # Arrow casts to date32 from 32-bit integers only
        return pa.scalar(0, pa.int32()).cast(t).as_py()
    if pa.types.is_decimal(t):  # a 64-bit integer does not fit every decimal's precision
        return Decimal(0)
    return pa.scalar(0, pa.int64()).cast(t).as_py()


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


# From about this many rows a binary search over Python values beats comparing every row.
_BISECT_ROWS = 1024


def count_below(rb: pa.RecordBatch, names: Sequence[str], bound: Sequence[Any]) -> int:
    """Number of leading rows of sorted `rb` whose `names` columns are < `bound`."""
    if rb.num_rows == 0:
        return 0
    if rb.num_rows >= _BISECT_ROWS:
        cols = [rb.column(n) for n in names[: len(bound)]]
        if all(_python_ordered(c.type) for c in cols):
            return _bisect(cols, tuple(bound), rb.num_rows, right=False)
    n = rb.num_rows
    lt = np.zeros(n, dtype=bool)
    eq = np.ones(n, dtype=bool)
    for name, b in zip(names, bound, strict=False):
        col = rb.column(name)
        if b is None:  # nothing sorts below null; only nulls equal it
            eq &= pc.is_null(col).to_numpy(zero_copy_only=False)
            continue
        scalar = pa.scalar(b, type=col.type)
        lt |= eq & pc.fill_null(pc.less(col, scalar), True).to_numpy(zero_copy_only=False)
        eq &= pc.fill_null(pc.equal(col, scalar), False).to_numpy(zero_copy_only=False)
    return int(lt.sum())


def _python_ordered(t: pa.DataType) -> bool:
    """Types whose Python values (`as_py`) compare exactly as the batch orders them
    (nanosecond temporals lose precision in Python; floats have NaN)."""
    if pa.types.is_timestamp(t) or pa.types.is_duration(t):
        return bool(t.unit != "ns")
    return encoding.is_numeric(t) or encoding.is_stringish(t)


def count_at_most(rb: pa.RecordBatch, names: Sequence[str], bound: Sequence[Any]) -> int:
    """Number of leading rows of sorted `rb` whose `names` columns are <= `bound`."""
    cols = [rb.column(n) for n in names[: len(bound)]]
    if all(_python_ordered(c.type) for c in cols):
        return _bisect(cols, tuple(bound), rb.num_rows, right=True)
    n = count_below(rb, names, bound)
    cut = names[: len(bound)]
    while n < rb.num_rows and compare_rows(row_tuple(rb, cut, n), tuple(bound)) == 0:
        n += 1
    return n


def _bisect(cols: Sequence[pa.Array], bound: tuple[Any, ...], n: int, right: bool) -> int:
    """The rows below `bound` (`right`: at or below) by a binary search over Python values,
    whose order is the batch order for `_python_ordered` types: a few dozen scalar reads
    instead of comparing every row in Arrow."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        c = compare_rows(tuple(col[mid].as_py() for col in cols), bound)
        if c < 0 or (right and c == 0):
            lo = mid + 1
        else:
            hi = mid
    return lo


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
