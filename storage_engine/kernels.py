"""Vectorised kernels over Arrow record batches: sort, consolidate, merge, seek, bounds.

Two paths with one ordering:
- NumPy, when every column has an order-preserving NumPy encoding (`encoding.py`: integers,
  temporals, bools, and strings/binaries as normalized-key chunks) and no nulls: sort on the
  first column (SIMD quicksort, or timsort for merges of sorted runs), then re-sort only the
  groups whose later columns are out of order; `searchsorted` for seeks;
- Arrow compute for everything else (nulls, long strings): `sort_indices`, semi-joins.
Nulls sort first. Both paths produce rows sorted by (keys, values) with weights summed and
zero weights dropped: the batch invariant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from . import encoding
from .schema import WEIGHT, ZSetSchema
from .search import SearchTree, run_ends

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
    return _arrow_order(rb, schema.row_names)


def _arrow_order(rb: pa.RecordBatch, names: Sequence[str]) -> IntArray:
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


def _arrow_changes(rb: pa.RecordBatch, names: Sequence[str]) -> npt.NDArray[np.bool_]:
    """changes[i] is True when row i+1 differs from row i in some column (nulls equal)."""
    n = rb.num_rows
    changed = np.zeros(max(n - 1, 0), dtype=bool)
    if n < 2:
        return changed
    for name in names:
        col = rb.column(name)
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
        rb = rb.take(pa.array(_arrow_order(rb, names)))
    return _sum_equal_rows(rb, None, _arrow_changes(rb, names))[0], None


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


Cut = tuple[bytes | None, ...]  # a prefix per string key column, None for numeric ones


def key_table(
    keys: Any, schema: ZSetSchema, lead_range: tuple[Any, Any] | None = None
) -> pa.RecordBatch:
    """Probe keys as a record batch of the key columns, sorted and unique.

    Accepts a record batch or table with the key columns, a dict of columns, a NumPy array
    or a list (single key column), or a list of tuples (composite keys). `lead_range`: the
    inclusive (min, max) of the first key column over the data to be probed; probes outside
    it cannot match and are dropped before the sort, which is most of a lookup's own work
    when many probed keys are absent.
    """
    rb = key_batch(keys, schema)
    if lead_range is not None:
        rb = _within(rb, *lead_range)
    return _unique_sorted_keys(rb, schema)


def probe_table(
    keys: Any, schema: ZSetSchema, lead_range: tuple[Any, Any] | None
) -> tuple[pa.RecordBatch, ProbeEncodings]:
    """`key_table(keys, schema, lead_range)`, and the encoding of the probes made on the
    way, for the batches of the lookup to share.

    Keys whose first column is a string: every key in `lead_range` starts with the bytes
    its two ends share, so the probes left in the range are encoded with that prefix cut
    (no pass to find their own prefix, no check that they have it) and sorted on it. A
    batch or file whose keys have the same cut (the usual case: it spans most of the range)
    then compares with those columns directly, without encoding the probes again.
    """
    encodings = ProbeEncodings()
    rb = key_batch(keys, schema)
    if lead_range is not None:
        rb = _within(rb, *lead_range)
    cut = range_cut(schema, lead_range)
    if cut is not None and cut[0] is None:
        cut = None  # a numeric first column: its probes are sorted as they are
    got = encoding.encode_prefixed(rb, schema.key_names, cut, checked=True) if cut else None
    if cut is None or got is None or rb.num_rows == 0:
        return _unique_sorted_keys(rb, schema), encodings
    enc = got[0]
    order = unique_order(enc.cols)
    if order is not None:
        enc = encoding.Encoding([c[order] for c in enc.cols], enc.layouts)
        rb = rb.take(pa.array(order))
    encodings.by_cut[cut] = (enc, None)
    return rb, encodings


def key_batch(keys: Any, schema: ZSetSchema) -> pa.RecordBatch:
    """`key_table`'s accepted forms of probe keys as one record batch of the key columns."""
    ks = schema.key_schema
    if isinstance(keys, pa.Table):
        keys = keys.combine_chunks().to_batches()[0] if keys.num_rows else ks.empty_table()
    if isinstance(keys, pa.Table):
        return pa.RecordBatch.from_pylist([], schema=ks)
    if isinstance(keys, pa.RecordBatch):
        return keys.select(schema.key_names).cast(ks)
    if isinstance(keys, dict):
        return pa.record_batch({n: keys[n] for n in schema.key_names}, schema=ks)
    if len(schema.keys) == 1 and not (len(keys) and isinstance(keys[0], tuple)):
        return pa.record_batch([pa.array(keys, type=schema.keys[0].type)], schema=ks)
    cols: list[Any] = list(zip(*keys, strict=True)) if len(keys) else [[] for _ in schema.keys]
    return pa.record_batch(
        [pa.array(c, type=f.type) for c, f in zip(cols, schema.keys, strict=True)], schema=ks
    )


def range_cut(schema: ZSetSchema, lead_range: tuple[Any, Any] | None) -> Cut | None:
    """The prefix cut shared by every key whose first column lies in `lead_range`: for a
    string first column its ends' common prefix, none for the other string columns, None
    for numeric ones; None when there is no such cut (no range, a column with no
    encoding)."""
    if lead_range is None or lead_range[0] is None or lead_range[1] is None:
        return None
    cut: list[bytes | None] = []
    for j, f in enumerate(schema.keys):
        if encoding.is_numeric(f.type):
            cut.append(None)
        elif encoding.is_stringish(f.type):
            cut.append(encoding.shared_prefix(*lead_range) if j == 0 else b"")
        else:
            return None
    return tuple(cut)


def _within(rb: pa.RecordBatch, lo: Any, hi: Any) -> pa.RecordBatch:
    """The rows of `rb` whose first column lies in [lo, hi] (null keys are kept: where
    they sort is not this function's business). Types whose order Arrow's comparisons
    may not share with the sort (floats: NaN) are left alone."""
    col, typ = rb.column(0), rb.schema.field(0).type
    if rb.num_rows == 0 or lo is None or hi is None:
        return rb
    if pa.types.is_integer(typ) and not col.null_count:
        v = col.to_numpy()
        keep = (v >= lo) & (v <= hi)
    elif encoding.is_stringish(typ) or pa.types.is_temporal(typ):
        inside = pc.and_(
            pc.greater_equal(col, pa.scalar(lo, typ)), pc.less_equal(col, pa.scalar(hi, typ))
        )
        keep = pc.fill_null(inside, True).to_numpy(zero_copy_only=False)
    else:
        return rb
    return rb if keep.all() else rb.filter(pa.array(keep))


def _unique_sorted_keys(rb: pa.RecordBatch, schema: ZSetSchema) -> pa.RecordBatch:
    if rb.num_rows < 2:
        return rb
    names = schema.key_names
    if (
        len(names) == 1
        and pa.types.is_integer(rb.schema.field(0).type)
        and not rb.column(0).null_count
    ):
        # one integer key: sorting the values is several times cheaper than an argsort
        # followed by a take
        values = rb.column(0).to_numpy()
        if np.all(values[1:] > values[:-1]):
            return rb
        values = np.sort(values)
        values = values[np.concatenate(([True], values[1:] != values[:-1]))]
        return pa.record_batch([pa.array(values, rb.schema.field(0).type)], schema=rb.schema)
    enc = encoding.encode(rb, names)
    if enc is not None:
        order = unique_order(enc[0].cols)
        return rb if order is None else rb.take(pa.array(order))
    rb = rb.take(pa.array(_arrow_order(rb, names)))
    keep = np.concatenate(([True], _arrow_changes(rb, names)))
    return rb.filter(pa.array(keep))


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


def key_encoding(rb: pa.RecordBatch, schema: ZSetSchema) -> KeyEncoding | None:
    """Encoding of a sorted batch's key columns, for repeated seeks (cache it with the batch)."""
    enc = encoding.encode(rb, schema.key_names)
    return enc[0] if enc is not None else None


@dataclass
class ProbeEncodings:
    """The probes' encodings made during one lookup, for its batches to share.

    `by_cut`: per prefix cut (one prefix per string key column, None for numeric ones), the
    encoding of the probes that start with the prefixes (each string column with as many
    chunks as its longest probe needs), and which probes those are (None: all). Batches and
    files whose keys have that cut compare with it directly (`encoding.align`).
    `by_layout`: per exact key layout, the encoded columns of the probes that can match a
    batch of that layout (for probes too long for a complete encoding).
    """

    by_cut: dict[Cut, tuple[encoding.Encoding, npt.NDArray[np.bool_] | None]] = field(
        default_factory=dict
    )
    by_layout: dict[tuple[encoding.StringLayout | None, ...], list[npt.NDArray[Any]]] = field(
        default_factory=dict
    )


def seek(
    rb: pa.RecordBatch,
    probes: pa.RecordBatch,
    schema: ZSetSchema,
    enc: KeyEncoding | None = None,
) -> pa.RecordBatch:
    """Rows of sorted `rb` whose key equals one of the sorted, unique `probes` keys.

    Binary search on the first encoded key column finds each probe's candidate rows (all the
    rows of that key, or a few more sharing a string chunk); the other encoded columns then
    confirm exact equality. `enc` is `rb`'s cached key encoding, if the caller has one.
    """
    return seek_keyed(rb, probes, schema, enc)[0]


def seek_keyed(
    rb: pa.RecordBatch,
    probes: pa.RecordBatch,
    schema: ZSetSchema,
    enc: KeyEncoding | None = None,
    probe_encodings: ProbeEncodings | None = None,
) -> Keyed:
    """`seek`, also returning the found rows' key encoding (gathered from `rb`'s: a merge of
    several seeks' results then need not encode their strings again). `probe_encodings`
    keeps the probes' encodings across the batches of one lookup: batches whose keys share a
    layout (string prefix, chunk count) need them encoded once."""
    if rb.num_rows == 0 or probes.num_rows == 0:
        return rb.slice(0, 0), None
    benc = enc if enc is not None else key_encoding(rb, schema)
    rows = seek_positions(rb, probes, schema, benc, probe_encodings)
    found = rb.take(pa.array(rows))
    if benc is None or all(lay is None for lay in benc.layouts):
        return found, None  # no encoding, or numeric keys (views): nothing to carry
    return found, encoding.Encoding([c[rows] for c in benc.cols], benc.layouts)


def seek_positions(
    rb: pa.RecordBatch,
    probes: pa.RecordBatch,
    schema: ZSetSchema,
    enc: KeyEncoding | None = None,
    probe_encodings: ProbeEncodings | None = None,
) -> IntArray:
    """Ascending indices of the rows of sorted `rb` whose key is among the sorted, unique
    `probes` (`seek_keyed`'s rows, for callers that align rows rather than copy them)."""
    if rb.num_rows == 0 or probes.num_rows == 0:
        return np.empty(0, dtype=np.int64)
    benc = enc if enc is not None else key_encoding(rb, schema)
    if benc is None:
        return _seek_arrow(rb, probes, schema)
    if probe_encodings is not None:
        shared = probe_encodings.by_cut.get(encoding.cut_of(benc))
        if shared is not None:
            return seek_rows(*encoding.align(benc, shared[0]))
    layout = tuple(benc.layouts)
    pcols = probe_encodings.by_layout.get(layout) if probe_encodings is not None else None
    if pcols is None:
        penc = encoding.encode(probes, schema.key_names, like=benc)
        if penc is None:
            return _seek_arrow(rb, probes, schema)
        pcols, valid = penc[0].cols, penc[1]
        if valid is not None and not valid.all():
            sel = np.flatnonzero(valid)
            pcols = [c[sel] for c in pcols]
        if probe_encodings is not None:
            probe_encodings.by_layout[layout] = pcols
    return seek_rows(benc.cols, pcols)


def seek_rows(bcols: Sequence[npt.NDArray[Any]], pcols: Sequence[npt.NDArray[Any]]) -> IntArray:
    """Indices of the rows whose encoded key (`bcols`, sorted) equals one of the sorted,
    unique encoded probes (`pcols`, the same columns)."""
    return seek_matches(bcols, pcols)[0]


def seek_matches(
    bcols: Sequence[npt.NDArray[Any]],
    pcols: Sequence[npt.NDArray[Any]],
    fixed: Sequence[int | None] | None = None,
    tree: SearchTree | None = None,
) -> tuple[IntArray, IntArray]:
    """(rows, owners): the ascending indices of the rows whose encoded key (`bcols`, sorted)
    equals one of the sorted, unique encoded probes (`pcols`, the same columns), and for
    each row the index of the probe it equals. `fixed`, if known: per column of `bcols`,
    the one value it holds (`single_value`); a later column that holds the same one value in
    the probes is not compared (a string key's lengths, when all keys have one length).
    `tree`: a search tree over `bcols[0]`, to search it with."""
    if fixed is not None and len(bcols) > 1:
        same = [
            j > 0 and fixed[j] is not None and single_value(pcols[j]) == fixed[j]
            for j in range(len(bcols))
        ]
        bcols = [c for c, s in zip(bcols, same, strict=True) if not s]
        pcols = [c for c, s in zip(pcols, same, strict=True) if not s]
    k, p = bcols[0], pcols[0]
    n = len(k)
    none = np.empty(0, dtype=np.int64)
    if n == 0 or len(p) == 0:
        return none, none
    # Probes outside the batch's key range cannot match: two scalar searches spare them
    # the binary search over the batch (absent keys are often outside it).
    a = int(np.searchsorted(p, k[0], side="left"))
    b = int(np.searchsorted(p, k[-1], side="right"))
    if a > 0 or b < len(p):
        pcols = [c[a:b] for c in pcols]
        p = pcols[0]
        if len(p) == 0:
            return none, none
    if tree is None:
        lo = np.searchsorted(k, p, side="left")
        found = k[np.minimum(lo, n - 1)] == p
        lo, pidx = lo[found], np.flatnonzero(found)
        hi = run_ends(k, lo + 1, p[pidx])
    else:
        lo, hi = tree.equal_range(p)
        pidx = np.flatnonzero(hi > lo)
        lo, hi = lo[pidx], hi[pidx]
    if len(hi) and int((hi - lo).max()) > 1:
        rows = ranges_to_indices(lo, hi)
        owner = np.repeat(pidx, hi - lo)
    else:  # one row per found probe: no ranges to expand
        rows, owner = lo.astype(np.int64, copy=False), pidx
    if len(bcols) > 1 and len(rows):
        match = np.ones(len(rows), dtype=bool)
        for bc, pcol in zip(bcols[1:], pcols[1:], strict=True):
            match &= bc[rows] == pcol[owner]
        rows, owner = rows[match], owner[match]
    return rows, owner + a


def single_value(col: npt.NDArray[Any]) -> int | None:
    """The one value an encoded column holds (None: several, or none)."""
    if not len(col):
        return None
    lo, hi = int(col.min()), int(col.max())
    return lo if lo == hi else None


def _null_safe_keys(rb: pa.RecordBatch, names: Sequence[str]) -> pa.Table:
    """Key columns with nulls replaced by a filler plus an is-null flag per column, so a
    hash join matches null keys to null keys (SQL joins never would)."""
    cols: dict[str, pa.Array] = {}
    for i, n in enumerate(names):
        col = rb.column(n)
        cols[f"k{i}"] = pc.fill_null(col, pa.scalar(filler(col.type), col.type))
        cols[f"n{i}"] = pc.is_null(col)
    return pa.table(cols)


def filler(t: pa.DataType) -> Any:
    """A non-null value of type `t` (stands in for nulls where a value is required)."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return ""
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return b""
    if pa.types.is_boolean(t):
        return False
    return pa.scalar(0, pa.int64()).cast(t).as_py()


def _seek_arrow(rb: pa.RecordBatch, probes: pa.RecordBatch, schema: ZSetSchema) -> IntArray:
    names = schema.key_names
    left = _null_safe_keys(rb, names).append_column("row", pa.array(np.arange(rb.num_rows)))
    right = _null_safe_keys(probes, names)
    joined = left.join(right, keys=right.column_names, join_type="left semi", use_threads=False)
    return np.sort(np.asarray(joined.column("row").to_numpy(), dtype=np.int64))


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
        # A binary search over Python values (whose order is the batch order for these
        # types): a few dozen scalar reads instead of comparing every row in Arrow.
        b = tuple(bound)
        lo, hi = 0, rb.num_rows
        while lo < hi:
            mid = (lo + hi) // 2
            if compare_rows(tuple(c[mid].as_py() for c in cols), b) <= 0:
                lo = mid + 1
            else:
                hi = mid
        return lo
    n = count_below(rb, names, bound)
    while n < rb.num_rows and compare_rows(row_tuple(rb, names, n), tuple(bound)) == 0:
        n += 1
    return n


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
