"""Seeks in one sorted batch: the rows whose key equals one of sorted, unique probes.

Binary search on the first encoded key column finds each probe's
candidate rows; the other encoded key columns confirm exact equality (`seek_matches`), or,
where the first column's runs are long (a key led by a window's start), narrow each probe's
run column by column with a bisection of their own. Keys
without an encoding (nulls, long strings) are matched by an Arrow semi-join instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .. import encoding
from ..kernels import IntArray, Keyed, KeyEncoding, filler, ranges_to_indices
from ..schema import ZSetSchema
from .probes import ProbeEncodings

Array = npt.NDArray[Any]


def key_encoding(rb: pa.RecordBatch, schema: ZSetSchema) -> KeyEncoding | None:
    """Encoding of a sorted batch's key columns, for repeated seeks (cache it with the batch)."""
    enc = encoding.encode(rb, schema.key_names)
    return enc[0] if enc is not None else None


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


_STEPS = 4  # keys past a run's known end that `run_ends` compares one by one


def run_ends(keys: Array, ends: IntArray, values: Array) -> IntArray:
    """Each `ends[i]`, a position just past a key equal to `values[i]` in sorted `keys`,
    moved past the keys after it that equal `values[i]` too: the end of that run.

    A key has few rows (one per value) in most state, so the next keys are compared one at
    a time, for fewer runs each time; runs longer than `_STEPS` get a binary search (a
    search per probe costs as much as a lookup's first, cache-cold one)."""
    n = len(keys)
    hi = ends.copy()
    at = np.flatnonzero(hi < n)
    for _ in range(_STEPS):
        at = at[keys[hi[at]] == values[at]]
        if not len(at):
            return hi
        hi[at] += 1
        at = at[hi[at] < n]
    if len(at):
        hi[at] = np.searchsorted(keys, values[at], side="right")
    return hi


def seek_rows(bcols: Sequence[npt.NDArray[Any]], pcols: Sequence[npt.NDArray[Any]]) -> IntArray:
    """Indices of the rows whose encoded key (`bcols`, sorted) equals one of the sorted,
    unique encoded probes (`pcols`, the same columns)."""
    return seek_matches(bcols, pcols)[0]


def seek_matches(
    bcols: Sequence[npt.NDArray[Any]],
    pcols: Sequence[npt.NDArray[Any]],
    fixed: Sequence[int | None] | None = None,
) -> tuple[IntArray, IntArray]:
    """(rows, owners): the ascending indices of the rows whose encoded key (`bcols`, sorted)
    equals one of the sorted, unique encoded probes (`pcols`, the same columns), and for
    each row the index of the probe it equals. `fixed`, if known: per column of `bcols`,
    the one value it holds (`single_value`); a later column that holds the same one value in
    the probes is not compared (a string key's lengths, when all keys have one length)."""
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
    lo = np.searchsorted(k, p, side="left")
    found = k[np.minimum(lo, n - 1)] == p
    lo, pidx = lo[found], np.flatnonzero(found)
    hi = run_ends(k, lo + 1, p[pidx])
    if len(bcols) > 1 and int((hi - lo).sum()) > _WIDE * len(p):
        # Expanding every candidate row would cost rows x probes: narrow the runs instead.
        for bc, pcol in zip(bcols[1:], pcols[1:], strict=True):
            v = pcol[pidx]
            lo, hi = _narrow(bc, lo, hi, v, right=False), _narrow(bc, lo, hi, v, right=True)
            keep = np.flatnonzero(lo < hi)
            lo, hi, pidx = lo[keep], hi[keep], pidx[keep]
        return ranges_to_indices(lo, hi), np.repeat(pidx, hi - lo) + a
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


# Candidate rows per probe (on average) above which runs are narrowed rather than expanded.
_WIDE = 8


# Distinct ranges up to which `_narrow` searches each range at once rather than bisecting.
_RANGES = 64


def _narrow(col: Array, lo: IntArray, hi: IntArray, v: Array, right: bool) -> IntArray:
    """`_bisect`, but where the probes share few ranges (the first column's runs: a
    window's start), one `searchsorted` per range. Probes are in key order, so those of a
    range are contiguous."""
    cuts = np.flatnonzero(lo[1:] != lo[:-1]) + 1
    if len(cuts) >= _RANGES or not len(lo):
        return _bisect(col, lo, hi, v, right)
    side: Literal["left", "right"] = "right" if right else "left"
    out = np.empty_like(lo)
    for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(lo)], strict=True):
        start, end = int(lo[a]), int(hi[a])
        out[a:b] = start + np.searchsorted(col[start:end], v[a:b], side=side)
    return out


def _bisect(col: Array, lo: IntArray, hi: IntArray, v: Array, right: bool) -> IntArray:
    """Per probe i, where `v[i]` goes in `col[lo[i]:hi[i]]` (sorted within each range): the
    first position whose value is not below it (`right`: not at or below it). Every probe's
    search runs in step, a halving of all ranges per round."""
    lo, hi = lo.copy(), hi.copy()
    active = np.flatnonzero(lo < hi)
    while len(active):
        mid = (lo[active] + hi[active]) // 2
        val = col[mid]
        go_right = val <= v[active] if right else val < v[active]
        lo[active[go_right]] = mid[go_right] + 1
        hi[active[~go_right]] = mid[~go_right]
        active = active[lo[active] < hi[active]]
    return lo


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


def _seek_arrow(rb: pa.RecordBatch, probes: pa.RecordBatch, schema: ZSetSchema) -> IntArray:
    names = schema.key_names
    left = _null_safe_keys(rb, names).append_column("row", pa.array(np.arange(rb.num_rows)))
    right = _null_safe_keys(probes, names)
    joined = left.join(right, keys=right.column_names, join_type="left semi", use_threads=False)
    return np.sort(np.asarray(joined.column("row").to_numpy(), dtype=np.int64))
