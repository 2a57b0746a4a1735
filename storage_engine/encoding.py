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
_BYTES = np.arange(8, dtype=np.int64)

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
    return _chunk(starts + cut, lens - cut, data, 0)


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


def _chunk(starts: Array, lens: Array, data: Array, at: int) -> Array:
    """Bytes [at, at+8) of every string, zero-padded, as uint64 in big-endian order."""
    n = len(starts)
    if n and int(lens.min()) >= at + 8:
        step = int(starts[1] - starts[0]) if n > 1 else 8
        if step > 0 and (n == 1 or bool(np.all(np.diff(starts) == step))):
            # values laid out back to back at a fixed width: a strided view, no gather
            view = np.lib.stride_tricks.as_strided(
                data[int(starts[0]) + at :], shape=(n, 8), strides=(step, 1), writeable=False
            )
            return np.ascontiguousarray(view).view(">u8").ravel().astype(np.uint64)
    out = np.zeros(n, dtype=np.uint64)
    last = len(data) - 1
    for j in range(8):
        b = data[np.minimum(starts + (at + j), last)].astype(np.uint64)
        b[lens <= at + j] = 0
        out |= b << np.uint64(8 * (7 - j))
    return out


def string_hash(col: pa.Array) -> npt.NDArray[np.uint64]:
    """A 64-bit hash of every value's bytes (nulls get a fixed value), vectorised."""
    starts, lens, data = _buffers(col)
    h = np.zeros(len(col), dtype=np.uint64)
    longest = int(lens.max()) if len(lens) else 0
    with np.errstate(over="ignore"):
        for at in range(0, longest, 8):
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
    """Bytes every value starts with: in byte order, the common prefix of the smallest and
    largest value is shared by everything between them."""
    mm = pc.min_max(col)
    lo, hi = mm["min"].as_py(), mm["max"].as_py()
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


def _encode_strings(
    col: pa.Array, like: StringLayout | None
) -> tuple[list[Array], StringLayout, Array | None] | None:
    starts, lens, data = _buffers(col)
    valid: Array | None = None
    if like is None:
        prefix = _common_prefix(col)
        cut = len(prefix)
        longest = int(lens.max()) if len(lens) else 0
        chunks = max(1, -(-(longest - cut) // 8))
        if chunks > MAX_CHUNKS:
            return None
        layout = StringLayout(prefix, chunks)
    else:
        layout, cut = like, len(like.prefix)
        valid = lens <= cut + 8 * like.chunks
        if cut:
            raw = col if pa.types.is_binary(col.type) else col.cast(pa.binary())
            starts_ok = pc.starts_with(raw, pattern=like.prefix)
            valid &= np.asarray(starts_ok.to_numpy(zero_copy_only=False), dtype=bool)
    out = [_chunk(starts + cut, lens - cut, data, 8 * i) for i in range(layout.chunks)]
    out.append(lens.astype(np.int64))
    return out, layout, valid


def encode(
    rb: pa.RecordBatch, names: Sequence[str], like: Encoding | None = None
) -> tuple[Encoding, Array | None] | None:
    """Encode columns `names` of `rb`; None if some column cannot be encoded.

    With `like` (the encoding of a sorted batch), encodes probe rows comparably and also
    returns a mask of the rows that can match at all (string prefix shared, length fits).
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
        enc = _encode_strings(col, ref)
        if enc is None:
            return None
        parts, layout, ok = enc
        cols.extend(parts)
        layouts.append(layout)
        if ok is not None:
            valid = ok if valid is None else valid & ok
    return Encoding(cols, layouts), valid
