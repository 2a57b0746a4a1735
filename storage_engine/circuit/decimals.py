"""The result types of sum and avg, and exact decimal sums and averages as Spark 4 computes
them in ANSI mode (measured on PySpark 4.0.5: docs/sql.md, "Types"):

- sum of decimal(p, s) is decimal(min(38, p + 10), s); a sum that does not fit is an error,
  never a wrong or NULL value (`DecimalOverflow`). Sums are taken on 256-bit decimals (76
  digits), so only the result has to fit: a group's state is its exact sum.
- avg of decimal(p, s) is decimal(min(38, p + 4), min(38, s + 4)): the exact sum divided by
  the count, rounded HALF_UP (ties away from zero) to that scale; an average that does not
  fit is an error too (Spark's avg of decimal(38, 0) fails from 10^34 up).
- sum of integers is bigint, of floats double; avg of either is double.

Decimals are carried as their unscaled integers (`unscaled`, `from_unscaled`) where Arrow
has no kernel: per-row window sums and the rounding division of an average.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .operator import CircuitError

MAX_PRECISION = 38
WIDE = pa.decimal256(76, 0)  # what a sum is taken in (scale set per column)


class DecimalOverflow(ArithmeticError):
    """A decimal sum or average does not fit its result type: Spark's ANSI overflow error
    (NUMERIC_VALUE_OUT_OF_RANGE), raised from the step that made it so."""


def sum_type(t: pa.DataType) -> pa.DataType:
    """Spark's type of sum over a column of type `t` (integers, floats, decimals)."""
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return pa.int64()
    if pa.types.is_floating(t):
        return pa.float64()
    if pa.types.is_decimal(t):
        return pa.decimal128(min(t.precision + 10, MAX_PRECISION), t.scale)
    raise CircuitError(f"cannot sum or average a column of type {t}")


def avg_type(t: pa.DataType) -> pa.DataType:
    """Spark's type of avg over a column of type `t`."""
    sum_type(t)  # the same columns can be averaged
    if pa.types.is_decimal(t):
        return pa.decimal128(min(t.precision + 4, MAX_PRECISION), min(t.scale + 4, MAX_PRECISION))
    return pa.float64()


def widened(x: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A decimal column on 76 digits, its scale kept: room for any sum of 38-digit values."""
    return pc.cast(x, pa.decimal256(WIDE.precision, x.type.scale))


def narrowed(x: pa.Array | pa.ChunkedArray, t: pa.DataType, what: str) -> Any:
    """Decimal `x` as decimal `t` of the same scale; DecimalOverflow naming `what` if a
    value does not fit."""
    try:
        return pc.cast(x, t)
    except pa.ArrowInvalid:
        raise _overflow(what, t, _largest(x)) from None


def times(x: pa.Array | pa.ChunkedArray, w: Any, t: pa.DataType, what: str) -> Any:
    """x * w (weights) in type t. Decimals multiply on 76 digits, then narrow to t: an
    overflow is an error rather than a wrapped value."""
    if pa.types.is_decimal(t):
        wide = pa.decimal256(t.precision, t.scale)
        product = pc.multiply(pc.cast(x, wide), pc.cast(w, pa.decimal256(19, 0)))
        return narrowed(product, t, what)
    return pc.multiply(x, pc.cast(w, t))


def unscaled(x: pa.Array | pa.ChunkedArray) -> np.ndarray[Any, Any]:
    """A decimal128 column's unscaled values as Python integers (object array; NULLs: 0)."""
    arr = x.combine_chunks() if isinstance(x, pa.ChunkedArray) else x
    if arr.null_count:
        arr = pc.fill_null(arr, pa.scalar(0, arr.type))
    words = np.frombuffer(arr.buffers()[1], dtype=np.uint64)
    words = words[2 * arr.offset : 2 * (arr.offset + len(arr))]
    low = words[0::2].astype(object)
    high = words[1::2].view(np.int64).astype(object)
    return high * (1 << 64) + low  # type: ignore[no-any-return]


def from_unscaled(
    values: Sequence[int] | np.ndarray[Any, Any],
    empty: np.ndarray[Any, Any],
    t: pa.DataType,
    what: str,
) -> pa.Array:
    """Decimal128 `t` from unscaled Python integers, NULL where `empty`; DecimalOverflow
    naming `what` if a value needs more than t's precision."""
    ints = np.asarray(values, dtype=object)
    live = ints[~empty] if len(ints) else ints
    if len(live):
        top = max(abs(int(v)) for v in live)
        if top >= 10**t.precision:
            raise _overflow(what, t, _as_text(top, t.scale))
    ints = np.where(empty, 0, ints) if len(ints) else ints
    words = np.empty(2 * len(ints), dtype=np.uint64)
    words[0::2] = np.array([int(v) & 0xFFFFFFFFFFFFFFFF for v in ints], dtype=np.uint64)
    words[1::2] = np.array([(int(v) >> 64) & 0xFFFFFFFFFFFFFFFF for v in ints], dtype=np.uint64)
    valid = pa.array(~np.asarray(empty, dtype=bool)).buffers()[1] if np.any(empty) else None
    return pa.Array.from_buffers(t, len(ints), [valid, pa.py_buffer(words.tobytes())])


def average(
    sums: np.ndarray[Any, Any], counts: np.ndarray[Any, Any], scale: int, t: pa.DataType, what: str
) -> pa.Array:
    """avg as Spark's: unscaled sums (at `scale`) over counts, HALF_UP at t's scale; NULL
    where the count is 0."""
    counts = np.asarray(counts, dtype=np.int64)
    empty = counts == 0
    up = 10 ** (t.scale - scale)
    out = []
    for s, n in zip(sums, counts.tolist(), strict=True):
        if n == 0:
            out.append(0)
            continue
        q, r = divmod(abs(int(s)) * up, n)
        q += 2 * r >= n  # HALF_UP: a tie goes away from zero
        out.append(q if s >= 0 else -q)
    return from_unscaled(out, empty, t, what)


def decimal_average(s: Any, n: Any, t: pa.DataType, what: str) -> pa.Array:
    """avg of decimal sums `s` (an Arrow column) over non-null counts `n` as type `t`."""
    sums = unscaled(s)
    counts = np.asarray(pc.fill_null(n, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
    return average(sums, counts, s.type.scale, t, what)


def _largest(x: pa.Array | pa.ChunkedArray) -> str:
    wide = pc.cast(x, pa.decimal256(WIDE.precision, x.type.scale))
    top = pc.max(pc.abs(wide)).as_py()
    return "a value" if top is None else str(top)


def _as_text(unscaled_value: int, scale: int) -> str:
    digits = str(unscaled_value).rjust(scale + 1, "0")
    return digits if scale == 0 else f"{digits[:-scale]}.{digits[-scale:]}"


def _overflow(what: str, t: pa.DataType, value: str) -> DecimalOverflow:
    return DecimalOverflow(
        f"{what}: {value} cannot be represented as decimal({t.precision},{t.scale}) "
        f"(numeric value out of range, as Spark's ANSI mode reports it)"
    )


__all__ = [
    "DecimalOverflow",
    "average",
    "avg_type",
    "decimal_average",
    "from_unscaled",
    "narrowed",
    "sum_type",
    "times",
    "unscaled",
    "widened",
]
