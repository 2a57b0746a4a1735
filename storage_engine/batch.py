"""Immutable in-memory Z-set batches.

A `Batch` is an Arrow record batch whose rows are sorted by (keys, values), unique, and
carry non-zero int64 weights. Every public constructor consolidates; every operation
returns a new batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from . import kernels, lookup
from .lookup.probes import ProbeEncodings, key_table
from .lookup.seek import key_encoding, seek_keyed
from .schema import WEIGHT, ZSetSchema


class Batch:
    __slots__ = ("_key_enc", "data", "schema")

    def __init__(
        self,
        schema: ZSetSchema,
        data: pa.RecordBatch,
        key_encoding: kernels.KeyEncoding | None = None,
    ) -> None:
        """Wrap rows that are already sorted and consolidated (internal; see constructors).

        `key_encoding`, when the kernel that made `data` had it, saves re-encoding the keys
        at the first seek.
        """
        self.schema = schema
        self.data = data
        # False: not computed yet; None: the keys have no NumPy encoding (Arrow fallback)
        self._key_enc: kernels.KeyEncoding | bool | None = (
            key_encoding if key_encoding is not None else False
        )

    # -- constructors --------------------------------------------------------------------

    @classmethod
    def empty(cls, schema: ZSetSchema) -> Batch:
        return cls(schema, kernels.empty(schema))

    @classmethod
    def from_arrow(
        cls, schema: ZSetSchema, rows: pa.RecordBatch | pa.Table, weights: Any = None
    ) -> Batch:
        """Consolidate arbitrary rows. Without `weights`, uses a `__weight` column or +1."""
        if isinstance(rows, pa.Table):
            rows = (
                rows.combine_chunks().to_batches()[0]
                if rows.num_rows
                else pa.RecordBatch.from_pylist([], schema=rows.schema)
            )
        cols = [rows.column(n) for n in schema.row_names]
        if weights is not None:
            w = pa.array(np.asarray(weights, dtype=np.int64), pa.int64())
        elif WEIGHT in rows.schema.names:
            w = rows.column(WEIGHT).cast(pa.int64())
        else:
            w = pa.array(np.ones(rows.num_rows, dtype=np.int64))
        rb = pa.RecordBatch.from_arrays([*cols, w], schema=schema.arrow)
        return cls(schema, *kernels.consolidate_keyed(rb, schema))

    @classmethod
    def from_columns(
        cls, schema: ZSetSchema, columns: Mapping[str, Any], weights: Any = None
    ) -> Batch:
        n = len(next(iter(columns.values())))
        rb = pa.record_batch(
            [pa.array(columns[f.name], type=f.type) for f in (*schema.keys, *schema.values)]
            + [pa.array(np.ones(n, np.int64) if weights is None else weights, pa.int64())],
            schema=schema.arrow,
        )
        return cls(schema, *kernels.consolidate_keyed(rb, schema))

    @classmethod
    def from_tuples(
        cls, schema: ZSetSchema, rows: Iterable[tuple[tuple[Any, ...], tuple[Any, ...], int]]
    ) -> Batch:
        """Rows as ((key...), (value...), weight) — convenient for tests and tools."""
        rows = list(rows)
        names = schema.row_names
        cols: dict[str, list[Any]] = {n: [] for n in names}
        w: list[int] = []
        for k, v, weight in rows:
            for n, x in zip(names, (*k, *v), strict=True):
                cols[n].append(x)
            w.append(weight)
        return cls.from_columns(schema, cols, np.asarray(w, dtype=np.int64))

    # -- facts ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.data.num_rows)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    @property
    def weights(self) -> kernels.IntArray:
        return kernels.weights(self.data)

    def first_key(self) -> tuple[Any, ...] | None:
        return kernels.row_tuple(self.data, self.schema.key_names, 0) if len(self) else None

    def last_key(self) -> tuple[Any, ...] | None:
        n = len(self)
        return kernels.row_tuple(self.data, self.schema.key_names, n - 1) if n else None

    # -- operations ----------------------------------------------------------------------

    def merge(self, *others: Batch) -> Batch:
        """Sum of Z-sets: weights of equal rows add up, zero weights disappear."""
        for o in others:
            if o.schema != self.schema:
                raise ValueError("cannot merge batches of different schemas")
        parts = [self, *others]
        return Batch(
            self.schema,
            *kernels.merge_keyed(
                [b.data for b in parts], self.schema, [b.known_key_encoding for b in parts]
            ),
        )

    def negate(self) -> Batch:
        return Batch(self.schema, kernels._with_weights(self.data, -self.weights))

    def seek(self, keys: Any) -> Batch:
        """Rows whose key is one of `keys` (vectorised over all probes at once)."""
        probes = key_table(keys, self.schema)
        return Batch(self.schema, self.seek_probes(probes))

    @property
    def known_key_encoding(self) -> kernels.KeyEncoding | None:
        """The keys' encoding if it is at hand (never computes it)."""
        enc = self._key_enc
        return enc if isinstance(enc, kernels.KeyEncoding) else None

    def seek_probes(self, probes: pa.RecordBatch) -> pa.RecordBatch:
        """`seek` for probes already in `probes.key_table` form; caches the key encoding."""
        return self.seek_probes_keyed(probes)[0]

    def seek_probes_keyed(
        self, probes: pa.RecordBatch, probe_encodings: ProbeEncodings | None = None
    ) -> kernels.Keyed:
        """`seek_probes`, with the found rows' key encoding (`seek.seek_keyed`)."""
        if self._key_enc is False:
            self._key_enc = key_encoding(self.data, self.schema)
        enc = self._key_enc if isinstance(self._key_enc, kernels.KeyEncoding) else None
        return seek_keyed(self.data, probes, self.schema, enc, probe_encodings)

    def find(self, probes: lookup.Probes) -> lookup.Found | None:
        """The rows whose key is one of `probes`, as a lookup gathers them (`lookup`); None
        when the keys have no encoding or a value column has nulls."""
        if self._key_enc is False:
            self._key_enc = key_encoding(self.data, self.schema)
        enc = self._key_enc
        if not isinstance(enc, kernels.KeyEncoding):
            return None
        cols = lookup.columns(self.data, self.schema)
        got = probes.matches(enc) if cols is not None else None
        if cols is None or got is None:
            return None
        rows, owners = got
        return lookup.Found(owners, [c[rows] for c in cols])

    def range(self, lo: Sequence[Any] | None = None, hi: Sequence[Any] | None = None) -> Batch:
        """Rows with lo <= key < hi, comparing on a prefix of the key columns."""
        names = self.schema.key_names
        start = kernels.count_below(self.data, names, lo) if lo is not None else 0
        stop = kernels.count_below(self.data, names, hi) if hi is not None else len(self)
        return Batch(self.schema, self.data.slice(start, max(stop - start, 0)))

    def truncate_below(self, bound: Sequence[Any]) -> Batch:
        """Drop rows whose key is below `bound` (state that fell behind a watermark)."""
        cut = kernels.count_below(self.data, self.schema.key_names, bound)
        return Batch(self.schema, self.data.slice(cut))

    # -- views ---------------------------------------------------------------------------

    def to_dict(self) -> dict[tuple[Any, ...], int]:
        """{(key..., value...): weight} — for tests and small tools."""
        names = self.schema.row_names
        cols = [self.data.column(n).to_pylist() for n in names]
        w = self.weights.tolist()
        return {tuple(c[i] for c in cols): w[i] for i in range(len(self))}

    def to_table(self) -> pa.Table:
        return pa.Table.from_batches([self.data])

    def __repr__(self) -> str:
        return f"Batch({len(self)} rows, {self.nbytes} bytes)"
