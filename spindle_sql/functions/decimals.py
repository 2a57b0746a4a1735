"""Decimal arithmetic and conversions with Spark's results: result types (`decimal_result`),
HALF_UP rounding to the result scale with an error on overflow (ANSI), and the
conversions whose Arrow counterparts differ from Spark's (to and from doubles and strings).

Arithmetic runs on Arrow's decimal256 (76 digits), exact before the final rounding. When
76 digits cannot hold what an operation needs (operands near 38 digits each), and for
remainders (Arrow has no decimal remainder), rows go through Python's `decimal` module
one by one: there is no vectorised alternative.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .base import (
    EvaluationError,
    Val,
    adjust_precision,
    as_decimal,
    to_array,
)

HALF_UP = "half_towards_infinity"  # Java's HALF_UP: ties away from zero
MAX_DIGITS_256 = 76


def decimal_result(op: str, a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """Spark's result type of decimal `op` (integral operands count as decimals)."""
    a, b = as_decimal(a), as_decimal(b)
    p1, s1, p2, s2 = a.precision, a.scale, b.precision, b.scale
    if op in ("+", "-"):
        scale = max(s1, s2)
        return adjust_precision(max(p1 - s1, p2 - s2) + scale + 1, scale)
    if op == "*":
        return adjust_precision(p1 + p2 + 1, s1 + s2)
    if op == "/":
        scale = max(6, s1 + p2 + 1)
        return adjust_precision(p1 - s1 + s2 + scale, scale)
    scale = max(s1, s2)  # % and pmod
    return adjust_precision(min(p1 - s1, p2 - s2) + scale, scale)


def _dec_type(precision: int, scale: int) -> pa.DataType:
    if precision <= 38:
        return pa.decimal128(precision, scale)
    return pa.decimal256(precision, scale)


def _as_decimal_array(v: Val, length: int) -> pa.Array:
    """An integral or decimal value as a decimal array (integrals as Spark sees them)."""
    arr = to_array(v, length)
    t = as_decimal(arr.type)
    return arr if arr.type == t else arr.cast(t)


def rescale(arr: pa.Array, to: pa.DataType, name: str) -> pa.Array:
    """`arr` (decimal) as decimal `to`: rounded HALF_UP to its scale, EvaluationError when a
    value does not fit its precision (Spark's ANSI overflow check)."""
    t = arr.type
    if t == to:
        return arr
    try:
        if to.scale < t.scale:
            # One more integral digit: rounding up may carry (9.99 -> 10.0).
            room = min(t.precision + 1, MAX_DIGITS_256)
            arr = pc.round(arr.cast(_dec_type(room, t.scale)), to.scale, round_mode=HALF_UP)
        return arr.cast(to)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise EvaluationError(
            f"numeric value out of range in `{name}`: cannot be represented as "
            f"decimal({to.precision},{to.scale})"
        ) from e


# --- per-row fallback ---------------------------------------------------------------------


def _quantize(d: Decimal, to: pa.DataType, name: str) -> Decimal:
    q = d.quantize(Decimal(1).scaleb(-to.scale), rounding=decimal.ROUND_HALF_UP)
    if q.adjusted() >= to.precision - to.scale and q != 0:
        raise EvaluationError(
            f"numeric value out of range in `{name}`: {d} cannot be represented as "
            f"decimal({to.precision},{to.scale})"
        )
    return q


def py_decimal(
    f: Callable[..., Decimal], args: list[pa.Array], to: pa.DataType, name: str
) -> pa.Array:
    """Row by row through Python's decimal (wide enough for any 38-digit operands): for the
    cases Arrow's 76 digits cannot do exactly. `f` gets the non-null operands."""
    ctx = decimal.Context(prec=400, rounding=decimal.ROUND_HALF_UP)
    ctx.traps[decimal.Inexact] = False
    out: list[Decimal | None] = []
    with decimal.localcontext(ctx):
        for row in zip(*(a.to_pylist() for a in args), strict=True):
            if any(v is None for v in row):
                out.append(None)
                continue
            try:
                out.append(_quantize(f(*row), to, name))
            except decimal.InvalidOperation as e:
                raise EvaluationError(
                    f"numeric value out of range in `{name}`: cannot be represented as "
                    f"decimal({to.precision},{to.scale})"
                ) from e
    return pa.array(out, to)


# --- arithmetic ---------------------------------------------------------------------------
#
# Spark (since SPARK-45786) computes a product to 39 significant digits and a quotient to
# scale 39, both truncated, then rounds HALF_UP to the result scale: as the result scale is
# at most 38, that is the exact result rounded once. So is a sum. Here: the exact result
# on decimal256, then `rescale`.


def _narrow(arr: pa.Array) -> pa.Array:
    """A decimal array as decimal256 with only the integral digits its values use: room
    for what arithmetic on it needs within Arrow's 76 digits."""
    s = arr.type.scale
    return arr.cast(pa.decimal256(min(arr.type.precision, _digits(arr) + s), s))


def _digits(arr: pa.Array) -> int:
    """How many integral digits the largest value of a decimal array has (at least 1)."""
    top = pc.max(pc.abs(arr)).as_py()
    if top is None or top < 1:
        return 1
    return int(top.adjusted()) + 1


def _int_digits(t: pa.DataType) -> int:
    return int(t.precision - t.scale)


def add_sub(op: str, a: Val, b: Val, to: pa.DataType, length: int, name: str) -> pa.Array:
    x, y = _narrow(_as_decimal_array(a, length)), _narrow(_as_decimal_array(b, length))
    scale = max(x.type.scale, y.type.scale)
    if max(_int_digits(x.type), _int_digits(y.type)) + scale + 1 > MAX_DIGITS_256:
        f = (lambda u, v: u + v) if op == "+" else (lambda u, v: u - v)
        return py_decimal(f, [x, y], to, name)
    exact = pc.add(x, y) if op == "+" else pc.subtract(x, y)
    return rescale(exact, to, name)


def multiply(a: Val, b: Val, to: pa.DataType, length: int, name: str) -> pa.Array:
    x, y = _narrow(_as_decimal_array(a, length)), _narrow(_as_decimal_array(b, length))
    if x.type.precision + y.type.precision + 1 > MAX_DIGITS_256:
        return py_decimal(lambda u, v: u * v, [x, y], to, name)
    return rescale(pc.multiply(x, y), to, name)


def divide(a: Val, b: Val, to: pa.DataType, length: int, name: str) -> pa.Array:
    """Arrow's decimal division truncates at scale max(4, s1 + p2 - s2 + 1); scaling the
    dividend up makes that at least one digit past the result scale, which is all HALF_UP
    rounding needs. Divisors must be non-zero (the caller checks)."""
    x, y = _narrow(_as_decimal_array(a, length)), _narrow(_as_decimal_array(b, length))
    s1, p2, s2 = x.type.scale, y.type.precision, y.type.scale
    s1w = max(s1, to.scale + s2 - p2)
    q_scale = max(4, s1w + p2 - s2 + 1)
    if _int_digits(x.type) + s2 + q_scale > MAX_DIGITS_256 - 1:
        return py_decimal(lambda u, v: u / v, [x, y], to, name)
    xw = x.cast(pa.decimal256(_int_digits(x.type) + s1w, s1w))
    return rescale(pc.divide(xw, y), to, name)


def _java_remainder(u: Decimal, v: Decimal) -> Decimal:
    """Java's BigDecimal.remainder with Spark's 39-digit MathContext (sign of the
    dividend; an error when the integral quotient needs more than 39 digits)."""
    ctx = decimal.Context(prec=39, traps=[decimal.InvalidOperation, decimal.DivisionByZero])
    try:
        return ctx.remainder(u, v)
    except decimal.InvalidOperation as e:
        raise EvaluationError("decimal remainder out of range") from e


def remainder(a: Val, b: Val, to: pa.DataType, length: int, name: str, pmod: bool) -> pa.Array:
    """Decimal % and pmod: Arrow has no decimal remainder, so row by row in Python.
    Divisors must be non-zero (the caller checks)."""
    x, y = _as_decimal_array(a, length), _as_decimal_array(b, length)

    def pos_mod(u: Decimal, v: Decimal) -> Decimal:
        r = _java_remainder(u, v)
        return _java_remainder(r + v, v) if r < 0 else r

    return py_decimal(pos_mod if pmod else _java_remainder, [x, y], to, name)


# --- conversions --------------------------------------------------------------------------


def unscaled_int64(arr: pa.Array) -> np.ndarray:
    """The unscaled values of a decimal128 array of precision <= 18 (nulls: 0)."""
    filled = pc.fill_null(arr, pa.scalar(Decimal(0), arr.type)).cast(arr.type)
    words = np.frombuffer(filled.buffers()[1], dtype=np.int64)
    return words[2 * filled.offset : 2 * (filled.offset + len(filled)) : 2].copy()


def valid_mask(arr: pa.Array) -> np.ndarray:
    return np.asarray(pc.is_valid(arr).to_numpy(zero_copy_only=False), dtype=bool)


def from_numpy(values: np.ndarray, valid: np.ndarray, t: pa.DataType) -> pa.Array:
    """A numeric Arrow array from numpy values and a validity mask."""
    return pa.array(values, type=t, mask=~valid)


def to_double(arr: pa.Array) -> pa.Array:
    """Spark's decimal -> double: for precision <= 18 (stored as a long) the unscaled
    long as a double divided by 10^scale; otherwise correctly rounded (via the exact
    decimal string, which Arrow parses correctly rounded)."""
    t = arr.type
    if t.precision <= 18:
        scaled = unscaled_int64(arr).astype(np.float64) / (10.0**t.scale)
        return from_numpy(scaled, valid_mask(arr), pa.float64())
    return to_plain_string(arr).cast(pa.float64())


def to_plain_string(arr: pa.Array) -> pa.Array:
    """Decimal to string as Spark prints it (Java's toPlainString: never an exponent,
    which Arrow uses for small values)."""
    t = arr.type
    unscaled_type = (pa.decimal128 if t.bit_width == 128 else pa.decimal256)(t.precision, 0)
    whole = pa.Array.from_buffers(unscaled_type, len(arr), arr.buffers(), offset=arr.offset)
    digits = pc.abs(whole).cast(pa.string())
    sign = pc.if_else(pc.less(whole, pa.scalar(Decimal(0), unscaled_type)), "-", "")
    if t.scale == 0:
        return pc.binary_join_element_wise(sign, digits, "")
    padded = pc.utf8_lpad(digits, t.scale + 1, "0")
    int_part = pc.utf8_slice_codeunits(padded, 0, -t.scale)
    frac = pc.utf8_slice_codeunits(padded, -t.scale)
    return pc.binary_join_element_wise(sign, int_part, ".", frac, "")


def from_double(arr: pa.Array, to: pa.DataType, name: str) -> pa.Array:
    """Spark's double -> decimal: the double's shortest decimal representation (Java's
    Double.toString) rounded HALF_UP to the scale; NaN and infinities give NULL (so Spark
    does, even in ANSI mode); EvaluationError on overflow.

    Java 17's Double.toString prints a digit or two more than the shortest representation
    for some doubles of 2^53 or more (Java 19+ prints the shortest). For those the digits
    beyond the 16th may differ from Spark on Java 17."""
    x = arr.cast(pa.float64())
    finite = pc.is_finite(x)
    x = pc.if_else(finite, x, pa.scalar(None, pa.float64()))
    limit = 10.0 ** (to.precision - to.scale)
    if pc.any(pc.greater_equal(pc.abs(x), limit)).as_py():
        raise EvaluationError(
            f"numeric value out of range in `{name}`: cannot be represented as "
            f"decimal({to.precision},{to.scale})"
        )
    # Below half a unit of the scale the value rounds to zero (compared on the double:
    # a double is at least the double nearest 0.5e-s iff its shortest digits are).
    tiny = pc.less(pc.abs(x), float(Decimal(5).scaleb(-(to.scale + 1))))
    x = pc.if_else(tiny, 0.0, x)
    text = x.cast(pa.string())  # Arrow prints the shortest representation
    wide = pa.decimal256(
        min(to.precision - to.scale + 1 + to.scale + 18, MAX_DIGITS_256), to.scale + 18
    )
    return rescale(text.cast(wide), to, name)


__all__ = [
    "HALF_UP",
    "add_sub",
    "decimal_result",
    "divide",
    "from_double",
    "from_numpy",
    "multiply",
    "py_decimal",
    "remainder",
    "rescale",
    "to_double",
    "to_plain_string",
    "unscaled_int64",
    "valid_mask",
]
