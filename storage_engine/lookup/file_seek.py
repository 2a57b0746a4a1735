"""A batch file's seek paths, mixed into `file_format.reader.BatchFile`.

Three paths find the rows whose key is among sorted, unique probes:

- `seek_keyed`, `find`: the probes and the file's keys encoded with the file's prefix cut
  (the bytes its first and last key share), so one encoding of the probes serves every
  block. A seek that touches most blocks searches all the file's keys at once
  (`_whole_keys`, one binary search); otherwise each touched block is
  searched for its probes, skipped if its bloom filter rules them all out;
- `_seek_blocks`: keys without a file-wide encoding (nulls, long strings, other types): each
  block encodes its own keys (`seek.seek`), after the block index and the bloom filters
  narrowed the blocks down (`candidate_blocks`).

`find` gathers numbers for a lookup materialized late (`late.py`); `seek_keyed` takes rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from .. import encoding, kernels
from ..cache import BufferCache
from ..file_format.bloom import bloom_may_contain, key_hashes
from ..schema import ZSetSchema
from . import seek as seek_kernels
from .late import Found, Probes, columns
from .probes import ProbeEncodings

_WHOLE_MIN_BLOCKS = 4  # files of fewer blocks are searched block by block


@dataclass(frozen=True)
class _WholeKeys:
    """A file's keys in its seek encoding, all blocks together (`FileSeeks._whole_keys`)."""

    keys: encoding.Encoding
    starts: npt.NDArray[np.int64]  # each block's first row
    fixed: list[int | None]  # per column of `keys`, the one value it holds (None: several)


class FileSeeks:
    """The seek paths of a batch file over its block index (first and last keys), bloom
    filters and blocks; `BatchFile` provides those and the per-file state below."""

    schema: ZSetSchema
    num_blocks: int
    rows: int
    has_bloom: bool
    format_version: int
    bloom_probes: int
    _id: int
    _cache: BufferCache
    _firsts: pa.RecordBatch
    _lasts: pa.RecordBatch
    _block_rows: npt.NDArray[np.int64]
    # computed at the first seek (False: not yet; None: the keys have no such encoding)
    _prefixes: list[bytes | None] | bool | None
    _fences: tuple[Any, Any] | bool | None

    if TYPE_CHECKING:  # BatchFile's

        def block(self, i: int) -> pa.RecordBatch: ...
        def _bloom(self, i: int) -> memoryview: ...

    def candidate_blocks(
        self, probes: pa.RecordBatch
    ) -> tuple[pa.RecordBatch, list[tuple[int, int, int]]]:
        """(probes, [(block, probe start, probe stop)]): the blocks whose key range may hold
        some of the sorted `probes`. A superset is fine: the block seek is exact."""
        nb = self.num_blocks
        if nb == 0 or probes.num_rows == 0:
            return probes, []
        names = self.schema.key_names
        # Bounds and probes encoded together so they share one common-prefix cut.
        both = pa.concat_batches([self._firsts, self._lasts, probes.select(names)])
        lead = encoding.leading(both, names[0])
        if lead is not None:
            first, last, p = lead[:nb], lead[nb : 2 * nb], lead[2 * nb :]
            lo = np.searchsorted(p, first, side="left")
            hi = np.searchsorted(p, last, side="right")
        else:
            lo = np.array(
                [
                    kernels.count_below(probes, names, kernels.row_tuple(self._firsts, names, i))
                    for i in range(nb)
                ]
            )
            hi = np.array(
                [
                    kernels.count_at_most(probes, names, kernels.row_tuple(self._lasts, names, i))
                    for i in range(nb)
                ]
            )
        return probes, [(int(i), int(lo[i]), int(hi[i])) for i in np.flatnonzero(hi > lo)]

    def _block_encoding(self, i: int) -> kernels.KeyEncoding | None:
        def load() -> tuple[kernels.KeyEncoding | None, int]:
            enc = seek_kernels.key_encoding(self.block(i), self.schema)
            return enc, sum(c.nbytes for c in enc.cols) if enc is not None else 0

        enc: kernels.KeyEncoding | None = self._cache.get((self._id, i, "keys"), load)
        return enc

    def _seek_prefixes(self) -> list[bytes | None] | None:
        """Per key column, the prefix cut of this file's seek encoding (None: numeric): the
        first column's is the prefix its smallest and largest value share (the file is
        sorted by it, so every value shares it), the others' none. None overall if a key
        column has no encoding."""
        if self._prefixes is False:
            self._prefixes = self._compute_prefixes()
        return self._prefixes if isinstance(self._prefixes, list) else None

    def _compute_prefixes(self) -> list[bytes | None] | None:
        out: list[bytes | None] = []
        for j, f in enumerate(self.schema.keys):
            if encoding.is_numeric(f.type):
                out.append(None)
            elif not encoding.is_stringish(f.type):
                return None
            elif j == 0 and self.num_blocks:
                lo = self._firsts.column(0)[0].as_py()
                hi = self._lasts.column(0)[self.num_blocks - 1].as_py()
                out.append(encoding.shared_prefix(lo, hi))
            else:
                out.append(b"")
        return out

    def _fence_leads(self, prefixes: list[bytes | None]) -> tuple[Any, Any] | None:
        """The first encoded key column of every block's first and last key."""
        if self._fences is False:
            name = self.schema.key_names[0]
            both = pa.concat_batches([self._firsts, self._lasts])
            enc = encoding.encode_prefixed(both, [name], prefixes[:1])
            nb = self.num_blocks
            ok = enc is not None and bool(enc[1].all())
            self._fences = (enc[0].cols[0][:nb], enc[0].cols[0][nb:]) if enc and ok else None
        return self._fences if isinstance(self._fences, tuple) else None

    def _seek_encoding(self, i: int, prefixes: list[bytes | None]) -> encoding.Encoding | None:
        """Block `i`'s keys in the file's seek encoding (cached with the block)."""

        def load() -> tuple[encoding.Encoding | None, int]:
            enc = encoding.encode_prefixed(self.block(i), self.schema.key_names, prefixes)
            if enc is None or not enc[1].all():  # values too long for the chunks
                return None, 0
            return enc[0], sum(c.nbytes for c in enc[0].cols)

        enc: encoding.Encoding | None = self._cache.get((self._id, i, "seek-keys"), load)
        return enc

    def seek(self, probes: pa.RecordBatch) -> pa.RecordBatch:
        """Rows whose key is among the sorted, unique `probes` (skips blocks via index/bloom)."""
        return self.seek_keyed(probes)[0]

    def seek_keyed(
        self, probes: pa.RecordBatch, probe_encodings: ProbeEncodings | None = None
    ) -> kernels.Keyed:
        """`seek`, with the found rows' key encoding when the file's keys have one (else
        None).

        The probes are encoded once, with the file's prefix cut, and every block's keys with
        the same cut: the blocks then need no encoding of their probe subsets.
        `probe_encodings`: the lookup's encodings of the probes, shared with its other
        batches (one with this file's cut is used, one made here is added).
        """
        if self.num_blocks == 0 or probes.num_rows == 0:
            return kernels.empty(self.schema), None
        prefixes = self._seek_prefixes()
        fences = self._fence_leads(prefixes) if prefixes is not None else None
        if prefixes is None or fences is None:
            return self._seek_blocks(probes), None
        cut = tuple(prefixes)
        shared = probe_encodings.by_cut.get(cut) if probe_encodings is not None else None
        if shared is None:
            penc = encoding.encode_prefixed(probes, self.schema.key_names, prefixes)
            if penc is None:
                return self._seek_blocks(probes), None
            enc, valid = penc
            if valid.all():
                shared = (enc, None)
            else:
                sel = np.flatnonzero(valid)
                shared = (encoding.Encoding([c[sel] for c in enc.cols], enc.layouts), valid)
            if probe_encodings is not None:
                probe_encodings.by_cut[cut] = shared
        enc, mask = shared
        if mask is not None:
            probes = probes.filter(pa.array(mask))
        found = self._matches(enc, lambda a, b: probes.slice(a, b - a), prefixes, fences)
        if found is None:
            return self._seek_blocks(probes), None
        spans, owners = found
        parts = [self.block(i).take(pa.array(rows)) for i, rows in spans]
        if not parts:
            return kernels.empty(self.schema), None
        rb = parts[0] if len(parts) == 1 else pa.concat_batches(parts)
        # the found rows' keys are the probes they equal
        return rb, encoding.Encoding([c[owners] for c in enc.cols], enc.layouts)

    def find(self, probes: Probes) -> Found | None:
        """The rows whose key is one of `probes`, as a lookup gathers them (`lookup`); None
        when the file's keys have no seek encoding or a value column has nulls."""
        prefixes = self._seek_prefixes()
        fences = self._fence_leads(prefixes) if prefixes is not None else None
        if prefixes is None or fences is None:
            return None
        got = probes.in_cut(tuple(prefixes))
        if got is None:
            return None
        penc, sel = got

        def probe_rows(a: int, b: int) -> pa.RecordBatch:
            return probes.table.slice(a, b - a) if sel is None else probes.table.take(sel[a:b])

        found = self._matches(penc, probe_rows, prefixes, fences)
        if found is None:
            return None
        spans, owners = found
        parts: list[list[npt.NDArray[Any]]] = []
        for i, rows in spans:
            cols = columns(self.block(i), self.schema)
            if cols is None:
                return None
            parts.append([c[rows] for c in cols])
        gathered = [np.concatenate(cs) for cs in zip(*parts, strict=True)]
        return Found(owners if sel is None else sel[owners], gathered)

    def _matches(
        self,
        penc: encoding.Encoding,
        probe_rows: Callable[[int, int], pa.RecordBatch],
        prefixes: list[bytes | None],
        fences: tuple[Any, Any],
    ) -> tuple[list[tuple[int, npt.NDArray[np.int64]]], npt.NDArray[np.int64]] | None:
        """The rows whose key equals one of the sorted, unique probes encoded with the
        file's cut (`penc`): per block, its ascending matching rows, in block order; and the
        probe each row equals. `probe_rows(a, b)`: the probes [a, b) as a record batch (for
        bloom filters). None if a block's keys have no seek encoding.

        A seek that touches most blocks searches all the file's keys at once
        (`_whole_keys`); otherwise each touched block is searched for its probes, skipped if
        its bloom filter rules them all out (which saves reading it: once it is cached,
        searching is cheaper)."""
        first = penc.cols[0]
        lo = np.searchsorted(first, fences[0], side="left")
        hi = np.searchsorted(first, fences[1], side="right")
        touched = np.flatnonzero(hi > lo).tolist()
        whole = self._whole_keys(prefixes, len(touched), len(penc.cols))
        if whole is not None:
            enc, starts = whole.keys, whole.starts
            bcols, pcols = encoding.align(enc, penc)
            fixed = whole.fixed if bcols is enc.cols else None
            rows, owners = seek_kernels.seek_matches(bcols, pcols, fixed)
            cuts = [*np.searchsorted(rows, starts, side="left").tolist(), len(rows)]
            spans = [
                (i, rows[cuts[i] : cuts[i + 1]] - starts[i])
                for i in range(self.num_blocks)
                if cuts[i + 1] > cuts[i]
            ]
            return spans, owners
        spans, owned = [], []
        for i in touched:
            a, b = int(lo[i]), int(hi[i])
            which = np.arange(a, b)
            if self.has_bloom and not self._cache.contains((self._id, i)):
                hashes = key_hashes(probe_rows(a, b), self.schema, self.format_version)
                maybe = bloom_may_contain(
                    self._bloom(i), hashes, self.format_version, self.bloom_probes
                )
                if not maybe.any():
                    continue
                which = which[maybe]
            benc = self._seek_encoding(i, prefixes)
            if benc is None:
                return None
            mine = encoding.Encoding([c[which] for c in penc.cols], penc.layouts)
            rows, owners = seek_kernels.seek_matches(*encoding.align(benc, mine))
            if len(rows):
                spans.append((i, rows))
                owned.append(which[owners])
        return spans, np.concatenate(owned) if owned else np.empty(0, dtype=np.int64)

    def _whole_keys(
        self, prefixes: list[bytes | None], touched: int, width: int
    ) -> _WholeKeys | None:
        """All the file's keys in its seek encoding, one array per column, with each block's
        first row: one binary search then serves every block. Built (from every block) only
        when a seek touches most blocks and the arrays fit half the cache budget; a seek of a
        few keys reads only their blocks."""
        key = (self._id, "whole-keys")
        if not self._cache.contains(key):
            if self.num_blocks < _WHOLE_MIN_BLOCKS or 2 * touched < self.num_blocks:
                return None
            if 2 * self.rows * 8 * width > self._cache.budget_bytes:
                return None

        def load() -> tuple[_WholeKeys | None, int]:
            encs = []
            for i in range(self.num_blocks):
                got = encoding.encode_prefixed(self.block(i), self.schema.key_names, prefixes)
                if got is None or not got[1].all():
                    return None, 0
                encs.append(got[0])
            whole = encoding.concat(encs)
            if whole is None:
                return None, 0
            starts = np.concatenate(([0], np.cumsum(self._block_rows)[:-1])).astype(np.int64)
            fixed = [seek_kernels.single_value(c) for c in whole.cols]
            return _WholeKeys(whole, starts, fixed), sum(c.nbytes for c in whole.cols)

        found: _WholeKeys | None = self._cache.get(key, load)
        return found

    def _seek_blocks(self, probes: pa.RecordBatch) -> pa.RecordBatch:
        """`seek` for keys without a file-wide encoding: each block encodes its own."""
        parts: list[pa.RecordBatch] = []
        probes, blocks = self.candidate_blocks(probes)
        for i, a, b in blocks:
            sub = probes.slice(a, b - a)
            if self.has_bloom and not self._cache.contains((self._id, i)):
                hashes = key_hashes(sub, self.schema, self.format_version)
                maybe = bloom_may_contain(
                    self._bloom(i), hashes, self.format_version, self.bloom_probes
                )
                if not maybe.any():
                    continue
                if not maybe.all():
                    sub = sub.filter(pa.array(maybe))
            found = seek_kernels.seek(self.block(i), sub, self.schema, self._block_encoding(i))
            if found.num_rows:
                parts.append(found)
        if not parts:
            return kernels.empty(self.schema)
        return parts[0] if len(parts) == 1 else pa.concat_batches(parts)
