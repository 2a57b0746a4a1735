"""A spine's batched point lookup, with its result built once (late materialization).

`Spine.seek(keys)` asks every batch of a spine for the rows of many keys at once. The general
path (`seek.seek_keyed` per batch, then `kernels.merge_keyed`) takes each batch's found
rows out as an Arrow record batch and merges those. When every key column has an encoding
and every value column is a plain number (`applies`), this module does the work on NumPy
arrays and builds one record batch at the end:

1. `Probes.of`: the probe keys encoded once, with the prefix cut that every key in the
   batches' key range shares; keys outside the range dropped on their encoding; sorted and
   made unique on it.
2. each batch's `find(probes)` (`Batch.find`, `BatchFile.find`): a binary search of the
   batch's key encoding gives the matching rows and the probe each one matches
   (`Probes.matches`); the rows' value and weight columns are gathered as NumPy arrays
   (`Found`). Their keys are the probes': nothing is taken out of the batch but numbers.
3. `result`: the batches' rows ordered by (key, value), equal rows' weights summed and zero
   sums dropped (`kernels.consolidate_columns`), then the record batch: string keys decoded
   from the probes' encoding (`encoding.decode_strings`, lossless), the rest from the arrays.

Any step may answer None (a null, a string too long for the encoding): the caller then takes
the general path, which handles every column type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from .. import encoding, kernels
from ..schema import ZSetSchema
from .probes import Cut, key_batch, range_cut
from .seek import seek_matches

IntArray = kernels.IntArray
Array = encoding.Array


def applies(schema: ZSetSchema) -> bool:
    """Whether lookups of `schema` can take this path, by column types (the data may still
    send one to the general path)."""
    return all(
        encoding.is_plain_number(f.type) or encoding.is_stringish(f.type) for f in schema.keys
    ) and all(encoding.is_plain_number(f.type) for f in schema.values)


class Probes:
    """A lookup's probe keys: within the batches' key range, sorted and unique, encoded with
    the cut that the range's keys share (`keys`), and in other cuts on demand (`in_cut`)."""

    def __init__(
        self,
        schema: ZSetSchema,
        keys: encoding.Encoding,
        table: pa.RecordBatch,
        unsorted: tuple[list[Array], IntArray | None],
    ) -> None:
        self.schema = schema
        self.keys = keys
        self._table = table  # the probes as given
        # the encoded probes in the key range, unsorted, and their rows of `_table` (None:
        # all): `table` sorts them again, should it be needed
        self._unsorted = unsorted
        self._sorted: pa.RecordBatch | None = None
        self._cuts: dict[Cut, tuple[encoding.Encoding, IntArray | None] | None] = {
            encoding.cut_of(keys): (keys, None)
        }

    @classmethod
    def of(cls, keys: Any, schema: ZSetSchema, lead_range: tuple[Any, Any]) -> Probes | None:
        """The probes of `keys` (any form `probes.key_table` takes) for batches whose first
        key column lies in `lead_range`. None if they have no encoding."""
        cut = range_cut(schema, lead_range)
        if cut is None:
            return None
        rb = key_batch(keys, schema)
        got = encoding.encode_prefixed(rb, schema.key_names, cut)
        ends = encoding.encode_prefixed(_ends(schema, lead_range), schema.key_names[:1], cut[:1])
        if got is None or ends is None:
            return None
        enc, keep = got
        lo, hi = ends[0].cols[0]
        first = enc.cols[0]
        keep &= (first >= lo) & (first <= hi)
        index: IntArray | None = None
        cols = enc.cols
        if not keep.all():
            index = np.flatnonzero(keep)
            cols = [c[index] for c in cols]
        return cls(schema, encoding.Encoding(_sorted_unique(cols), enc.layouts), rb, (cols, index))

    def __len__(self) -> int:
        return len(self.keys.cols[0])

    @property
    def table(self) -> pa.RecordBatch:
        """The probes as a record batch of the key columns, in `keys` order."""
        if self._sorted is None:
            cols, index = self._unsorted
            order = kernels.unique_order(cols) if len(cols[0]) else None
            if order is not None:
                index = order if index is None else index[order]
            self._sorted = self._table if index is None else self._table.take(pa.array(index))
        return self._sorted

    def in_cut(self, cut: Cut) -> tuple[encoding.Encoding, IntArray | None] | None:
        """The probes encoded with prefix cut `cut`, and which probes those are (None: all;
        the others lack a prefix, so cannot equal a key that has it). None: no encoding."""
        if cut not in self._cuts:
            got = encoding.encode_prefixed(self.table, self.schema.key_names, cut)
            if got is None:
                self._cuts[cut] = None
            else:
                enc, valid = got
                if valid.all():
                    self._cuts[cut] = (enc, None)
                else:
                    sel = np.flatnonzero(valid)
                    self._cuts[cut] = (
                        encoding.Encoding([c[sel] for c in enc.cols], enc.layouts),
                        sel,
                    )
        return self._cuts[cut]

    def matches(self, enc: encoding.Encoding) -> tuple[IntArray, IntArray] | None:
        """(rows, probes): the ascending rows of a sorted batch whose keys' encoding is `enc`
        that equal a probe, and the probe each equals. None: the probes have no encoding in
        the batch's cut."""
        got = self.in_cut(encoding.cut_of(enc))
        if got is None:
            return None
        penc, sel = got
        rows, owners = seek_matches(*encoding.align(enc, penc))
        return rows, owners if sel is None else sel[owners]


@dataclass(frozen=True)
class Found:
    """One batch's rows that match probes, in key order: the probe each row's key equals,
    and the rows' value columns then weights (`columns`)."""

    probes: IntArray
    columns: list[Array]


def columns(rb: pa.RecordBatch, schema: ZSetSchema) -> list[Array] | None:
    """The value columns then the weights of `rb` as NumPy arrays (views), or None if a
    value column has nulls."""
    out: list[Array] = []
    for name in schema.value_names:
        col = rb.column(name)
        arr = None if col.null_count else encoding.numeric(col)
        if arr is None:
            return None
        out.append(arr)
    out.append(kernels.weights(rb))
    return out


def result(probes: Probes, found: Sequence[Found]) -> pa.RecordBatch:
    """The consolidated rows of every batch's `found`, as one sorted record batch."""
    schema = probes.schema
    parts = [f for f in found if len(f.probes)]
    if not parts:
        return kernels.empty(schema)
    owners = parts[0].probes if len(parts) == 1 else np.concatenate([f.probes for f in parts])
    cols = [
        parts[0].columns[j] if len(parts) == 1 else np.concatenate([f.columns[j] for f in parts])
        for j in range(len(parts[0].columns))
    ]
    if len(parts) > 1:  # sorted runs, one per batch; equal rows in several batches add up
        # The probes are sorted and unique, so the probe a row matches orders it by key
        # as well as its key's encoding would, in one narrow column.
        idx, w = kernels.consolidate_columns([owners, *cols[:-1]], cols[-1], runs=True)
        owners = owners[idx]
        cols = [*(c[idx] for c in cols[:-1]), w]
    keys = [c[owners] for c in probes.keys.cols]
    arrays: list[pa.Array] = []
    at = 0
    for f, layout in zip(schema.keys, probes.keys.layouts, strict=True):
        if layout is None:
            arrays.append(encoding.from_numeric(keys[at], f.type))
            at += 1
        else:
            width = layout.chunks + 1
            arrays.append(encoding.decode_strings(keys[at : at + width], layout, f.type))
            at += width
    arrays += [
        encoding.from_numeric(c, f.type) for c, f in zip(cols[:-1], schema.values, strict=True)
    ]
    arrays.append(pa.array(cols[-1], pa.int64()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema.arrow)


def _sorted_unique(cols: list[Array]) -> list[Array]:
    """Encoded rows sorted, each once. Where the columns after the first are constant (one
    integer key; strings of one length), the first is sorted alone: a sort of values is
    cheaper than a sort of indices followed by gathers."""
    if not len(cols[0]) or any(int(c.min()) != int(c.max()) for c in cols[1:]):
        order = kernels.unique_order(cols) if len(cols[0]) else None
        return cols if order is None else [c[order] for c in cols]
    first = np.sort(cols[0])
    first = first[np.concatenate(([True], first[1:] != first[:-1]))]
    return [first, *(c[: len(first)] for c in cols[1:])]


def _ends(schema: ZSetSchema, lead_range: tuple[Any, Any]) -> pa.RecordBatch:
    first = schema.keys[0]
    return pa.record_batch([pa.array(list(lead_range), type=first.type)], names=[first.name])
