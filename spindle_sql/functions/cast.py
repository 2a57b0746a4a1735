"""CAST as Spark runs it in ANSI mode: which casts exist (`cast_type_ok`) and their
evaluation (`cast_array`), with EvaluationError where Spark raises (overflow, invalid
input). Casts from strings are in `parsing.py`, decimal conversions in `decimals.py`.

Left out (cast_type_ok refuses them): float/double to string (Spark prints Java's
Double.toString, whose digits for some doubles depend on the Java version), and casts
between numbers and dates, timestamps to decimals and floating point to timestamps.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import decimals as dec
from . import parsing as parse
from .base import (
    TIMESTAMP,
    EvaluationError,
    Val,
    is_decimal,
    is_floating,
    is_integral,
    is_null,
    is_numeric,
    is_string,
    spark_name,
)

_MICROS = 1_000_000
_INT_RANGE = {
    pa.int8(): (-(2**7), 2**7 - 1),
    pa.int16(): (-(2**15), 2**15 - 1),
    pa.int32(): (-(2**31), 2**31 - 1),
    pa.int64(): (-(2**63), 2**63 - 1),
}


def cast_type_ok(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether CAST(src AS dst) is supported (a subset of what Spark's ANSI mode allows)."""
    if src == dst or is_null(src):
        return True
    if is_null(dst):
        return False
    if src == pa.bool_():
        return is_numeric(dst) or is_string(dst)
    if is_integral(src):
        return is_numeric(dst) or is_string(dst) or dst in (pa.bool_(), TIMESTAMP)
    if is_floating(src):
        return is_numeric(dst) or dst == pa.bool_()
    if is_decimal(src):
        return is_numeric(dst) or is_string(dst) or dst == pa.bool_()
    if is_string(src):
        return is_numeric(dst) or dst in (pa.bool_(), pa.string(), pa.date32(), TIMESTAMP)
    if src == pa.date32():
        return is_string(dst) or dst == TIMESTAMP
    if src == TIMESTAMP:
        return is_string(dst) or is_integral(dst) or dst == pa.date32() or is_floating(dst)
    return False


def _overflow(src: pa.DataType, dst: pa.DataType) -> EvaluationError:
    return EvaluationError(
        f"cast overflow: a {spark_name(src)} value does not fit {spark_name(dst)}"
    )


def cast_array(arr: pa.Array, to: pa.DataType) -> pa.Array:
    """CAST(arr AS to) with Spark's ANSI semantics (`cast_type_ok(arr.type, to)` must
    hold)."""
    src = arr.type
    if src == to:
        return arr
    if is_null(src):
        return pa.nulls(len(arr), to)
    if not cast_type_ok(src, to):
        raise EvaluationError(f"cannot cast {spark_name(src)} to {spark_name(to)}")
    if is_string(src):
        return _from_string(arr, to)
    if to == pa.bool_():
        return pc.not_equal(arr, pa.scalar(Decimal(0) if is_decimal(src) else 0, src))
    if src == pa.bool_():
        return arr.cast(to) if is_string(to) else _from_integral(arr.cast(pa.int8()), to)
    if is_integral(src):
        return _from_integral(arr, to)
    if is_floating(src):
        return _from_floating(arr, to)
    if is_decimal(src):
        return _from_decimal(arr, to)
    if src == pa.date32():
        return _signed_years(arr.cast(to)) if is_string(to) else arr.cast(to)
    return _from_timestamp(arr, to)


def cast_value(v: Val, to: pa.DataType) -> Val:
    """`cast_array` for an array or a scalar (a scalar stays a scalar)."""
    if v.type == to:
        return v
    if isinstance(v, pa.Scalar):
        return cast_array(pa.repeat(v, 1), to)[0]
    return cast_array(v, to)


def _from_string(arr: pa.Array, to: pa.DataType) -> pa.Array:
    if is_string(to):
        return arr.cast(to)
    if to == pa.bool_():
        return parse.to_boolean(arr)
    if is_integral(to):
        return parse.to_integral(arr, to)
    if is_floating(to):
        return parse.to_floating(arr, to)
    if is_decimal(to):
        return parse.to_decimal(arr, to)
    if to == pa.date32():
        return parse.to_date(arr)
    return parse.to_timestamp(arr)


def _from_integral(arr: pa.Array, to: pa.DataType) -> pa.Array:
    src = arr.type
    if is_floating(to) or is_string(to):
        return arr.cast(to, safe=False)  # nearest float, as Java's conversion
    if to == TIMESTAMP:
        # Seconds to microseconds, saturating as Java's TimeUnit.toMicros.
        sec = np.asarray(pc.fill_null(arr, 0).cast(pa.int64()).to_numpy(), dtype=np.int64)
        limit = (2**63 - 1) // _MICROS
        micros = np.clip(sec, -limit, limit) * _MICROS
        micros = np.where(sec > limit, 2**63 - 1, np.where(sec < -limit, -(2**63), micros))
        return dec.from_numpy(micros, dec.valid_mask(arr), pa.int64()).cast(TIMESTAMP)
    if is_decimal(to):
        # Arrow wants a precision that holds any value of the source type, then the target
        # checks the actual values.
        digits = {8: 3, 16: 5, 32: 10, 64: 19}[src.bit_width] + to.scale
        wide = pa.decimal128(digits, to.scale) if digits <= 38 else pa.decimal256(digits, to.scale)
        return dec.rescale(arr.cast(wide), to, "cast")
    try:
        return arr.cast(to)  # Arrow checks the range
    except pa.ArrowInvalid as e:
        raise _overflow(src, to) from e


def _from_floating(arr: pa.Array, to: pa.DataType) -> pa.Array:
    src = arr.type
    if is_floating(to):
        return arr.cast(to, safe=False)  # overflow to a float gives infinity, as in Java
    if is_decimal(to):
        return dec.from_double(arr, to, "cast")
    # To an integral type: truncate; NaN, infinities and values out of range raise (ANSI:
    # Spark checks floor(x) <= max and ceil(x) >= min, the same as trunc(x) in range).
    x = np.asarray(pc.fill_null(arr.cast(pa.float64()), 0.0).to_numpy(), dtype=np.float64)
    valid = dec.valid_mask(arr)
    t = np.trunc(x)
    lo, hi = _INT_RANGE[to]
    top = 2.0**63 if to == pa.int64() else float(hi)  # Java's (long) saturates at 2^63
    with np.errstate(invalid="ignore"):
        ok = (t >= lo) & (t <= top)
    if np.any(valid & ~ok):
        raise _overflow(src, to)
    t = np.where(ok, t, 0.0)
    out = np.minimum(t, 2.0**63 - 1024).astype(np.int64)  # the largest double below 2^63
    out = np.where(t >= 2.0**63, np.int64(2**63 - 1), out)
    return dec.from_numpy(out, valid, pa.int64()).cast(to)


def _from_decimal(arr: pa.Array, to: pa.DataType) -> pa.Array:
    src = arr.type
    if is_decimal(to):
        return dec.rescale(arr, to, "cast")
    if is_string(to):
        return dec.to_plain_string(arr)
    if is_floating(to):
        # Java's BigDecimal.doubleValue / floatValue: correctly rounded, as Arrow parses.
        return dec.to_plain_string(arr).cast(to)
    if to != pa.int64() and src.precision > 18:
        # Spark converts a decimal held as a BigDecimal to int/short/byte through a double.
        x = _from_decimal(arr, pa.float64())
        return _from_floating(x, to)
    whole = arr.cast(pa.decimal128(src.precision, 0), safe=False)  # truncates
    try:
        return whole.cast(to)
    except pa.ArrowInvalid as e:
        raise _overflow(src, to) from e


def _signed_years(text: pa.Array) -> pa.Array:
    """Spark prints years past 9999 with a sign (ISO 8601), Arrow without."""
    return pc.replace_substring_regex(text, r"^([0-9]{5,})", r"+\1")


def _from_timestamp(arr: pa.Array, to: pa.DataType) -> pa.Array:
    src = arr.type
    if to == pa.date32():
        return pc.floor_temporal(arr, unit="day").cast(pa.date32())
    if is_string(to):
        # 'yyyy-MM-dd HH:mm:ss' and the fraction without trailing zeros (Arrow's %S prints
        # all six digits).
        text = pc.strftime(arr, format="%Y-%m-%d %H:%M:%S")
        text = pc.replace_substring_regex(text, r"0+$", "")
        return _signed_years(pc.replace_substring_regex(text, r"\.$", ""))
    micros = arr.cast(pa.int64())
    if is_floating(to):
        seconds = pc.divide(micros.cast(pa.float64(), safe=False), float(_MICROS))
        return seconds.cast(to, safe=False)
    seconds = np.floor_divide(
        np.asarray(pc.fill_null(micros, 0).to_numpy(), dtype=np.int64), _MICROS
    )
    lo, hi = _INT_RANGE[to]
    valid = dec.valid_mask(arr)
    if np.any(valid & ((seconds < lo) | (seconds > hi))):
        raise _overflow(src, to)
    return dec.from_numpy(seconds, valid, pa.int64()).cast(to)


__all__ = ["cast_array", "cast_type_ok", "cast_value"]
