"""The batch file's per-block bloom filters over key hashes, in both versions' rules.

Versions 2 and 3 set bits by double hashing in uint32 over a power-of-two bit count, with
the probe count the header records (7 before version 3, 3 written now); version 1 hashed
some integer keys with pandas and took positions modulo the bit count. A reader applies the
rules of the file's version (`key_hashes`, `bloom_may_contain`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .. import encoding, kernels
from ..schema import ZSetSchema
from .layout import FORMAT_VERSION

BITS_PER_KEY = 10
PROBES = 3  # written by this build; at 10-20 bits per key, 0.3-1.7 % false positives
PROBES_V2 = 7  # versions 1 and 2

_mix64 = encoding.mix64


def key_hashes(
    keys: pa.RecordBatch, schema: ZSetSchema, version: int = FORMAT_VERSION
) -> npt.NDArray[np.uint64]:
    """Deterministic 64-bit hash per row of the key columns (same in every process).

    The hash of a column depends only on its type (never on the data, e.g. whether it has
    nulls), so the rows of a file and the probes always hash alike. `version` selects the
    rule of the file's format version.
    """
    if version == 1:
        return _key_hashes_v1(keys, schema)
    h: npt.NDArray[np.uint64] | None = None if version >= 3 else np.zeros(keys.num_rows, np.uint64)
    with np.errstate(over="ignore"):
        for f in schema.keys:
            col = keys.column(f.name)
            if encoding.is_numeric(f.type):
                nulls = col.null_count
                filled = pc.fill_null(col, kernels.filler(f.type)) if nulls else col
                values = encoding.numeric(filled)
                assert values is not None
                part = _mix64(values.astype(np.int64).view(np.uint64))
                if nulls:
                    isnull = np.asarray(pc.is_null(col).to_numpy(zero_copy_only=False))
                    part[isnull] = encoding.NULL_HASH
            elif encoding.is_stringish(f.type):
                part = encoding.string_hash(col)
            else:
                part = _object_hash(col)
            h = part if h is None else _mix64(h * np.uint64(31) + part)
    assert h is not None
    return h


def _object_hash(col: pa.Array) -> npt.NDArray[np.uint64]:
    """pandas' hash of the Python values: the rule for types without a NumPy form. (pandas
    loads here, not with the module: few schemas need it, and every driver's start-up would
    pay for its import.)"""
    import pandas as pd

    values = np.asarray(col.to_pylist(), dtype=object)
    return np.asarray(pd.util.hash_array(values, categorize=False), dtype=np.uint64)


def _key_hashes_v1(keys: pa.RecordBatch, schema: ZSetSchema) -> npt.NDArray[np.uint64]:
    h = np.zeros(keys.num_rows, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for name in schema.key_names:
            col = keys.column(name)
            values = encoding.numeric(col) if schema.numpy_sortable and not col.null_count else None
            if values is not None:
                part = _mix64(values.astype(np.int64).view(np.uint64))
            else:
                part = _object_hash(col)
            h = _mix64(h * np.uint64(31) + part)
    return h


def _bloom_positions(h: npt.NDArray[np.uint64], m: int, k: int) -> npt.NDArray[np.uint32]:
    """Probe bit positions, (k, n): double hashing in uint32, m a power of two."""
    h1 = (h & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    h2 = ((h >> np.uint64(32)) | np.uint64(1)).astype(np.uint32)
    i = np.arange(k, dtype=np.uint32)[:, None]
    with np.errstate(over="ignore"):
        return (h1[None, :] + i * h2[None, :]) & np.uint32(m - 1)


def _bloom_positions_v1(h: npt.NDArray[np.uint64], m: int) -> npt.NDArray[np.uint64]:
    h1 = h & np.uint64(0xFFFFFFFF)
    h2 = (h >> np.uint64(32)) | np.uint64(1)
    i = np.arange(PROBES_V2, dtype=np.uint64)[:, None]
    with np.errstate(over="ignore"):
        return (h1[None, :] + i * h2[None, :]) % np.uint64(m)


def build_bloom(h: npt.NDArray[np.uint64], k: int = PROBES) -> bytes:
    """A bloom filter of ~10-20 bits per key (m is the power of two >= 10 bits per key) with
    `k` probes per key.

    Sets the bits of `_bloom_positions` one hash at a time (h1 + i*h2 by repeated addition)
    instead of materialising the (k, n) position matrix: the same bits, in less time.
    """
    m = 1 << max(6, int(len(h) * BITS_PER_KEY - 1).bit_length())
    halves = np.ascontiguousarray(h).astype("<u8", copy=False).view("<u4").reshape(-1, 2)
    pos = halves[:, 0].astype(np.uint32)
    step = halves[:, 1].astype(np.uint32) | np.uint32(1)
    mask = np.uint32(m - 1)
    bits = np.zeros(m, dtype=bool)
    for _ in range(k):
        bits[pos & mask] = True
        pos += step  # wraps modulo 2**32, as in _bloom_positions
    return np.packbits(bits, bitorder="little").tobytes()


def bloom_may_contain(
    bloom: memoryview | bytes,
    h: npt.NDArray[np.uint64],
    version: int = FORMAT_VERSION,
    k: int = PROBES,
) -> npt.NDArray[np.bool_]:
    """Which keys (by `key_hashes`) the filter may hold: the rules of `version`, `k` probes."""
    packed = np.frombuffer(bloom, dtype=np.uint8)
    if version == 1:
        bits = np.unpackbits(packed, bitorder="little")
        return np.asarray(bits[_bloom_positions_v1(h, len(bits))].all(axis=0), dtype=bool)
    pos = _bloom_positions(h, len(packed) * 8, k)
    hit = (packed[pos >> np.uint32(3)] >> (pos & np.uint32(7)).astype(np.uint8)) & np.uint8(1)
    return np.asarray(hit.all(axis=0), dtype=bool)
