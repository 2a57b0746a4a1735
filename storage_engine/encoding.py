"""Order-preserving NumPy encodings of Arrow columns, so every kernel can use NumPy.

A row of columns becomes a tuple of NumPy arrays ("sort columns") whose lexicographic
order equals the rows' order:
- integers, timestamps, dates and bools map to themselves (as int64/uint8 views);
- strings and binaries (no nulls) skip the bytes every row shares (the longest common
  prefix), then become big-endian uint64 chunks of 8 bytes, zero-padded, followed by the
  length: zero padding plus the length tie-break gives exactly byte-wise (UTF-8) order.
  This is the "normalized key" technique of DuckDB and Umbra, vectorised.
Columns with nulls, other types, or strings needing more than `MAX_CHUNKS` chunks after the
common prefix have no encoding; callers then fall back to Arrow compute.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

MAX_CHUNKS = 4

Array = npt.NDArray[Any]


@dataclass(frozen=True)
class StringLayout:
    """How one string column was encoded: the shared prefix and the chunk count."""

    prefix: bytes
    chunks: int


@dataclass(frozen=True)
class Encoding:
    cols: list[Array]
    layouts: list[StringLayout | None]  # one per source column; None for numeric columns

    def slice(self, start: int, stop: int | None = None) -> Encoding:
        """The encoding of rows [start, stop) (views, no copy)."""
        return Encoding([c[start:stop] for c in self.cols], self.layouts)


def is_numeric(t: pa.DataType) -> bool:
    """Types whose values map to NumPy integers in order: ints, timestamps, dates, bools."""
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_date(t)
        or pa.types.is_duration(t)
        or pa.types.is_boolean(t)
    )


def numeric(col: pa.Array) -> Array | None:
    """The column as an order-preserving NumPy array, or None if it is not numeric-like."""
    if not is_numeric(col.type):
        return None
    arr: Array = col.to_numpy(zero_copy_only=False)
    if arr.dtype.kind in "mM":
        return arr.view(np.int64)
    if arr.dtype.kind == "b":
        return arr.view(np.uint8)
    return arr


def leading(rb: pa.RecordBatch, name: str) -> Array | None:
    """An order-preserving (not necessarily strict) NumPy form of one column, for range
    checks: the column itself if numeric, else its first string chunk after the common
    prefix. None if the column has nulls or another type."""
    col = rb.column(name)
    if col.null_count:
        return None
    arr = numeric(col)
    if arr is not None or not is_stringish(col.type):
        return arr
    starts, lens, data = _buffers(col)
    cut = len(_common_prefix(col))
    return _chunk(starts + cut, lens - cut, data, 0, _stride(lens))


def is_plain_number(t: pa.DataType) -> bool:
    """Types whose `numeric` form is their Arrow buffer itself (integers, timestamps,
    durations), so `from_numeric` builds the column back from it."""
    return bool(pa.types.is_integer(t) or pa.types.is_timestamp(t) or pa.types.is_duration(t))


def from_numeric(arr: Array, t: pa.DataType) -> pa.Array:
    """The column of plain-number type `t` (`is_plain_number`) whose `numeric` form is
    `arr`."""
    data = np.ascontiguousarray(arr)
    return pa.Array.from_buffers(t, len(data), [None, pa.py_buffer(data)])


def decode_strings(cols: Sequence[Array], layout: StringLayout, t: pa.DataType) -> pa.Array:
    """The string or binary column of type `t` whose encoding with `layout` is `cols` (its
    chunks, then the lengths): the inverse of the encoding, which keeps every byte.

    Each value is assembled in a record of the prefix and the big-endian chunks, which
    NumPy fills field by field (a byte-strided copy is many times slower)."""
    *chunks, lens = cols
    n, cut = len(lens), len(layout.prefix)
    width = cut + 8 * len(chunks)
    names = [f"c{i}" for i in range(len(chunks))]
    formats = [">u8"] * len(chunks)
    offsets = [cut + 8 * i for i in range(len(chunks))]
    if cut:
        names, formats, offsets = [*names, "p"], [*formats, f"V{cut}"], [*offsets, 0]
    record = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": width})
    rows: Any = np.empty(n, dtype=record)  # Any: NumPy's stubs do not type record fields
    if cut:
        rows["p"] = np.void(layout.prefix)
    for i, c in enumerate(chunks):
        rows[f"c{i}"] = c
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    shortest, longest = (int(lens.min()), int(lens.max())) if n else (0, 0)
    if shortest == longest:  # one length (ids, codes): each record's first bytes
        head = np.dtype(
            {"names": ["v"], "formats": [f"V{shortest}"], "offsets": [0], "itemsize": width}
        )
        data = np.ascontiguousarray(rows.view(head)["v"]).view(np.uint8) if shortest else b""
        ends = np.arange(n + 1) * shortest
    else:
        raw = rows.view(np.uint8).reshape(n, width)
        data = raw[np.arange(width) < lens[:, None]]
        ends = np.concatenate(([0], np.cumsum(lens)))
    ends = ends.astype(np.int64 if large else np.int32)
    return pa.Array.from_buffers(t, n, [None, pa.py_buffer(ends), pa.py_buffer(data)])


def is_stringish(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_string(t)
        or pa.types.is_large_binary(t)
    )


def _buffers(col: pa.Array) -> tuple[Array, Array, Array]:
    """(starts, lengths, data bytes) of a string/binary array, zero-copy."""
    bufs = col.buffers()
    odt = (
        np.int64
        if (pa.types.is_large_string(col.type) or pa.types.is_large_binary(col.type))
        else np.int32
    )
    raw = np.frombuffer(bufs[1], dtype=odt)[col.offset : col.offset + len(col) + 1]
    offsets: npt.NDArray[np.int64] = raw.astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(1, np.uint8)
    if len(data) == 0:
        data = np.zeros(1, np.uint8)
    return offsets[:-1], offsets[1:] - offsets[:-1], data


# _KEEP_BYTES[k] keeps the first k bytes of a big-endian chunk (zeroes what lies past a
# string's end).
_KEEP_BYTES = np.array(
    [0] + [((1 << 64) - 1) ^ ((1 << (8 * (8 - k))) - 1) for k in range(1, 9)], dtype=np.uint64
)


def _chunk(starts: Array, lens: Array, data: Array, at: int, stride: int | None = None) -> Array:
    """Bytes [at, at+8) of every string, zero-padded, as uint64 in big-endian order.

    Reads 8 bytes per row in one gather, even past a string's end, and masks what lies
    beyond it: one pass instead of one gather per byte. `stride`: the fixed step between
    the strings' starts, if known (`_stride`).
    """
    n = len(starts)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    shortest, longest = int(lens.min()), int(lens.max())
    out = _load8(data, starts + at, stride)
    if shortest < at + 8:
        if longest == shortest:
            out &= _KEEP_BYTES[min(max(shortest - at, 0), 8)]
        else:
            out &= _KEEP_BYTES[np.clip(lens - at, 0, 8)]
    return out


def _windows(data: Array, pos: Array) -> Array:
    """The 8 bytes at each position (all <= len(data) - 8), as an (n, 8) array."""
    win = np.lib.stride_tricks.as_strided(
        data, shape=(len(data) - 7, 8), strides=(data.strides[0], 1), writeable=False
    )
    out: Array = win[pos]
    return out


def _stride(lens: Array) -> int | None:
    """The fixed step between the starts of a whole string column's values (`_buffers` of
    it), when they all have one length: Arrow lays them back to back."""
    if len(lens) < 2:
        return None
    shortest = int(lens.min())
    return shortest if shortest == int(lens.max()) else None


def _load8(data: Array, pos: Array, stride: int | None = None) -> Array:
    """The 8 bytes at each position (zeros past the end of `data`) read big-endian, as
    uint64. `stride`: the positions' fixed step, if the caller knows it."""
    n = len(pos)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    limit = len(data) - 8
    if stride is not None:
        step = stride if n > 1 else 0
    else:
        step = int(pos[1] - pos[0]) if n > 1 else 0
        if step > 0 and not bool(np.all(np.diff(pos) == step)):
            step = 0
    if step > 0:
        # values back to back at a fixed width (ids, codes): a strided copy, no gather
        first = int(pos[0])
        m = n if int(pos[-1]) <= limit else max(0, min(n, (limit - first) // step + 1))
        if step >= 8:
            # a record of `step` bytes per value, its first 8 a big-endian field: NumPy
            # copies and byte-swaps them in one pass (a byte-strided copy is much slower)
            rec = np.dtype({"names": ["v"], "formats": [">u8"], "offsets": [0], "itemsize": step})
            m = max(0, min(m, (len(data) - first) // step))  # whole records only
            out: Array = np.empty(n, dtype=np.uint64)
            if m:
                out[:m] = np.ndarray((m,), dtype=rec, buffer=data, offset=first)["v"]
        else:
            head = np.lib.stride_tricks.as_strided(
                data[first:], shape=(m, 8), strides=(step, 1), writeable=False
            )
            out = np.empty(n, dtype=np.uint64)
            out[:m] = np.ascontiguousarray(head).view(">u8").ravel()
        if m < n:
            out[m:] = _tail(data, pos[m:]).view(">u8").ravel()
        return out
    return _load8_words(_words(data, int(pos.max())), pos)


def _words(data: Array, last: int) -> Array:
    """`data` as little-endian uint64 words, zero-padded past its end so that the 8 bytes
    at every position up to `last` can be read (a position may lie past the end: a string
    shorter than a chunk's offset)."""
    words = np.zeros(max(len(data), last) // 8 + 2, dtype="<u8")
    words.view(np.uint8)[: len(data)] = data
    return words


def _load8_words(words: Array, pos: Array) -> Array:
    """`_load8` at any positions: two aligned word gathers per value, joined by shifts
    (a gather of 8 single bytes per value costs several times as much on short strings)."""
    at = pos >> 3
    shift = (pos & 7).astype(np.uint64)
    shift <<= np.uint64(3)  # bits of the first word below the position
    lo = words[at].astype(np.uint64)
    lo >>= shift
    hi = words[1:][at].astype(np.uint64)
    # << (64 - shift) in two steps: a shift by 64 is undefined, and shift may be 0
    hi <<= np.uint64(1)
    np.subtract(np.uint64(63), shift, out=shift)
    hi <<= shift
    lo |= hi  # the 8 bytes from `pos` on, little-endian
    out: Array = lo.byteswap()
    return out


def _tail(data: Array, pos: Array) -> Array:
    """The 8 bytes at positions within 8 bytes of the end, as an (n, 8) array: a
    zero-padded copy of only the last bytes, not of the whole buffer."""
    s0 = min(int(pos.min()), len(data))
    small = np.zeros(len(data) - s0 + 8, dtype=np.uint8)
    small[: len(data) - s0] = data[s0:]
    return _windows(small, np.minimum(pos - s0, len(small) - 8))


def _starts_with(starts: Array, lens: Array, data: Array, prefix: bytes) -> Array:
    """Which strings start with `prefix`: 8 bytes of each compared at a time."""
    ok: Array = lens >= len(prefix)
    stride = _stride(lens)
    for at in range(0, len(prefix), 8):
        piece = prefix[at : at + 8]
        want = np.uint64(int.from_bytes(piece.ljust(8, b"\0"), "big"))
        ok &= (_load8(data, starts + at, stride) & _KEEP_BYTES[len(piece)]) == want
    return ok


def string_hash(col: pa.Array) -> npt.NDArray[np.uint64]:
    """A 64-bit hash of every value's bytes (nulls get a fixed value), vectorised."""
    starts, lens, data = _buffers(col)
    h = np.zeros(len(col), dtype=np.uint64)
    longest = int(lens.max()) if len(lens) else 0
    shortest = int(lens.min()) if len(lens) else 0
    stride = _stride(lens)
    with np.errstate(over="ignore"):
        for at in range(0, longest, 8):
            if at < shortest:  # every value reaches this chunk: no masks
                h = mix64(h * np.uint64(31) + _chunk(starts, lens, data, at, stride))
                continue
            live = lens > at
            c = _chunk(starts[live], lens[live], data, at)
            h[live] = mix64(h[live] * np.uint64(31) + c)
        h = mix64(h ^ lens.astype(np.uint64))
    if col.null_count:
        h[np.asarray(pc.is_null(col).to_numpy(zero_copy_only=False))] = NULL_HASH
    return h


NULL_HASH = np.uint64(0x9E3779B97F4A7C15)


def mix64(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """splitmix64 finaliser: a fast, well-distributed, deterministic 64-bit mixer."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _common_prefix(col: pa.Array) -> bytes:
    """Bytes every value (no nulls) starts with, 8 at a time: over a window of bytes every
    value has, what the smallest and largest value's windows share, all of them share."""
    starts, lens, data = _buffers(col)
    if not len(lens):
        return b""
    shortest, stride = int(lens.min()), _stride(lens)
    n = 0
    while n < shortest:
        width = min(8, shortest - n)
        words = _load8(data, starts + n, stride) & _KEEP_BYTES[width]
        lo, hi = int(words.min()), int(words.max())
        same = width if lo == hi else (64 - (lo ^ hi).bit_length()) // 8
        n += same
        if same < width:
            break
    first = int(starts[0])
    return bytes(data[first : first + n])


def runs_prefix(runs: Sequence[pa.Array]) -> bytes | None:
    """The bytes every value of some sorted string columns starts with (None: not strings,
    or nulls). In byte order, what the smallest first value and the largest last value
    share, everything between them shares."""
    if not runs or not is_stringish(runs[0].type):
        return None
    ends = [r.slice(i, 1) for r in runs if len(r) for i in (0, len(r) - 1)]
    if not ends:
        return None
    bounds = pa.concat_arrays(ends)
    return None if bounds.null_count else _common_prefix(bounds)


def shared_prefix(lo: str | bytes | None, hi: str | bytes | None) -> bytes:
    """The bytes two values start with (b"" if one is missing)."""
    if lo is None or hi is None:
        return b""
    a = lo.encode() if isinstance(lo, str) else bytes(lo)
    b = hi.encode() if isinstance(hi, str) else bytes(hi)
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return a[:n]


def cut_of(enc: Encoding) -> tuple[bytes | None, ...]:
    """An encoding's prefix cut: each string column's prefix, None for numeric columns."""
    return tuple(None if lay is None else lay.prefix for lay in enc.layouts)


def _encode_strings(
    col: pa.Array, like: StringLayout | None, prefix: bytes | None = None, checked: bool = False
) -> tuple[list[Array], StringLayout, Array | None] | None:
    """`checked`: every value is known to start with `like`'s prefix (no check, no mask)."""
    starts, lens, data = _buffers(col)
    valid: Array | None = None
    if like is None:
        prefix = _common_prefix(col) if prefix is None else prefix
        cut = len(prefix)
        longest = int(lens.max()) if len(lens) else 0
        chunks = max(1, -(-(longest - cut) // 8))
        if chunks > MAX_CHUNKS:
            return None
        layout = StringLayout(prefix, chunks)
    else:
        layout, cut = like, len(like.prefix)
        valid = lens <= cut + 8 * like.chunks
        if cut and not checked:
            valid &= _starts_with(starts, lens, data, like.prefix)
    stride = _stride(lens)
    out = [_chunk(starts + cut, lens - cut, data, 8 * i, stride) for i in range(layout.chunks)]
    out.append(lens.astype(np.int64))
    return out, layout, valid


def encode(
    rb: pa.RecordBatch,
    names: Sequence[str],
    like: Encoding | None = None,
    first_prefix: bytes | None = None,
) -> tuple[Encoding, Array | None] | None:
    """Encode columns `names` of `rb`; None if some column cannot be encoded.

    With `like` (the encoding of a sorted batch), encodes probe rows comparably and also
    returns a mask of the rows that can match at all (string prefix shared, length fits).
    `first_prefix`: the bytes every value of the first column starts with, when the caller
    knows them (rows that are sorted runs on it: `runs_prefix`), sparing a pass over them.
    """
    cols: list[Array] = []
    layouts: list[StringLayout | None] = []
    valid: Array | None = None
    for i, name in enumerate(names):
        col = rb.column(name)
        if col.null_count:
            return None
        arr = numeric(col)
        if arr is not None:
            cols.append(arr)
            layouts.append(None)
            continue
        if not is_stringish(col.type):
            return None
        ref = like.layouts[i] if like is not None else None
        if like is not None and ref is None:
            return None
        enc = _encode_strings(col, ref, first_prefix if i == 0 else None)
        if enc is None:
            return None
        parts, layout, ok = enc
        cols.extend(parts)
        layouts.append(layout)
        if ok is not None:
            valid = ok if valid is None else valid & ok
    return Encoding(cols, layouts), valid


def encode_prefixed(
    rb: pa.RecordBatch,
    names: Sequence[str],
    prefixes: Sequence[bytes | None],
    checked: bool = False,
) -> tuple[Encoding, Array] | None:
    """Encode columns `names` with a given prefix cut per string column (None for numeric
    columns), each with as many chunks as its longest value needs (at most `MAX_CHUNKS`).

    Rows of two batches encoded with the same prefixes compare exactly on the first
    min(chunks) chunks of each string column plus its length (`align`), so one encoding of
    the probes serves every block of a file. Also returns the mask of rows that start with
    their prefixes (the others cannot equal a row that does). None if a column has nulls or
    no encoding, or a value needs more than `MAX_CHUNKS` chunks after its prefix.
    `checked`: the caller knows that every row starts with its prefixes (rows between two
    values that share them), sparing the check.
    """
    cols: list[Array] = []
    layouts: list[StringLayout | None] = []
    valid = np.ones(rb.num_rows, dtype=bool)
    for name, prefix in zip(names, prefixes, strict=True):
        col = rb.column(name)
        if col.null_count:
            return None
        if prefix is None:
            arr = numeric(col)
            if arr is None:
                return None
            cols.append(arr)
            layouts.append(None)
            continue
        if not is_stringish(col.type):
            return None
        lens = _buffers(col)[1]
        longest = int(lens.max()) if len(lens) else 0
        chunks = max(1, -(-(longest - len(prefix)) // 8))
        if chunks > MAX_CHUNKS:
            return None
        enc = _encode_strings(col, StringLayout(prefix, chunks), checked=checked)
        if enc is None:
            return None
        parts, layout, ok = enc
        cols.extend(parts)
        layouts.append(layout)
        if ok is not None:
            valid &= ok
    return Encoding(cols, layouts), valid


def align(a: Encoding, b: Encoding) -> tuple[list[Array], list[Array]]:
    """The columns of two `encode_prefixed` encodings (same prefixes) that compare exactly:
    per string column the chunks both have, then the lengths (equal lengths that fit the
    shorter layout leave the other's extra chunks zero)."""
    if all(
        x is None or y is None or x.chunks == y.chunks
        for x, y in zip(a.layouts, b.layouts, strict=True)
    ):
        return a.cols, b.cols
    out_a: list[Array] = []
    out_b: list[Array] = []
    i = j = 0
    for la, lb in zip(a.layouts, b.layouts, strict=True):
        if la is None or lb is None:
            out_a.append(a.cols[i])
            out_b.append(b.cols[j])
            i += 1
            j += 1
            continue
        both = min(la.chunks, lb.chunks)
        out_a += [*a.cols[i : i + both], a.cols[i + la.chunks]]
        out_b += [*b.cols[j : j + both], b.cols[j + lb.chunks]]
        i += la.chunks + 1
        j += lb.chunks + 1
    return out_a, out_b


def concat(encs: Sequence[Encoding]) -> Encoding | None:
    """The encoding of the concatenated rows of batches encoded as `encs`, or None if their
    string prefixes differ. Fewer chunks are padded with zero chunks: a layout with more
    chunks encodes the same (shorter) values that way."""
    first = encs[0]
    layouts: list[StringLayout | None] = []
    for j, lay in enumerate(first.layouts):
        mine = [e.layouts[j] for e in encs]
        if lay is None:
            if any(o is not None for o in mine):
                return None
            layouts.append(None)
        elif any(o is None or o.prefix != lay.prefix for o in mine):
            return None
        else:
            layouts.append(StringLayout(lay.prefix, max(o.chunks for o in mine if o)))
    cols: list[Array] = []
    at = [0] * len(encs)  # each input's next column
    for j, lay in enumerate(layouts):
        if lay is None:
            cols.append(np.concatenate([e.cols[a] for e, a in zip(encs, at, strict=True)]))
            at = [a + 1 for a in at]
            continue
        own = [o.chunks if o is not None else 0 for o in (e.layouts[j] for e in encs)]
        for c in range(lay.chunks):
            cols.append(
                np.concatenate(
                    [
                        e.cols[a + c] if c < k else np.zeros(len(e.cols[a]), np.uint64)
                        for e, a, k in zip(encs, at, own, strict=True)
                    ]
                )
            )
        cols.append(np.concatenate([e.cols[a + k] for e, a, k in zip(encs, at, own, strict=True)]))
        at = [a + k + 1 for a, k in zip(at, own, strict=True)]
    return Encoding(cols, layouts)
