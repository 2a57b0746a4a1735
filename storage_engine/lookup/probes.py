"""A lookup's probe keys: the forms a caller may give them in, as one sorted, unique record
batch of the key columns (`key_table`), filtered to the key range of the batches they are
looked up in and encoded once for all of those batches (`probe_table`, `ProbeEncodings`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .. import encoding
from ..kernels import arrow_changes, arrow_order, unique_order
from ..schema import ZSetSchema

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
    rb = rb.take(pa.array(arrow_order(rb, names)))
    keep = np.concatenate(([True], arrow_changes(rb, names)))
    return rb.filter(pa.array(keep))


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
