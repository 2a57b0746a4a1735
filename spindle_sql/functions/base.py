"""The function library's foundations: its two errors, the `Function` record, Spark's names
for Arrow types, and Spark's (ANSI mode) rules for finding the common type of several
arguments. `__init__.py` assembles the library from the modules that build on this one.

Values passed to and returned by a function's `impl` are `Val`s: a `pa.Array` (one value
per row) or, for a literal, a `pa.Scalar` (the same value on every row). An impl may return
a scalar only when all its arguments are scalars; the evaluator broadcasts it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

Val = Any  # pa.Array | pa.Scalar (pyarrow has no type hints mypy follows here)


class FunctionTypeError(ValueError):
    """A call with argument types the function does not take (a planning error)."""


class EvaluationError(ValueError):
    """A runtime error Spark raises in ANSI mode (overflow, division by zero, invalid cast).
    Defined here so functions can raise it; `evaluate` exports it."""


@dataclass(frozen=True)
class Function:
    """A SQL function or operator. `result_type` checks argument types (raising
    FunctionTypeError) and gives the result's; `impl` computes it from evaluated
    arguments (see the module docstring for the values it takes).

    `lazy`: how Spark evaluates the arguments, which decides which rows may raise errors
    (`evaluate` honours it for arguments that may raise):
    - "strict": all arguments on every row;
    - "nulls": left to right, an argument only on rows where the previous ones are not
      null (Spark's null-intolerant unary, binary and ternary expressions);
    - "right_first": binary, the right argument first and the left only where the right is
      not null (Spark's division and remainder);
    - "special": the evaluator knows the rule (and, or, coalesce, if, in, ...).
    `safe`: the function never raises at run time, whatever its arguments.
    `literal_type`: for the few functions whose result type depends on the value of a
    literal argument (round over a decimal), the result type given the argument types and
    the literal values (None for arguments that are not literals); `result_type` raises
    for those calls.
    `public`: a view may call it by name; the others are what the compiler turns a
    construct into (a timestamp plus an INTERVAL)."""

    name: str
    min_args: int
    max_args: int | None
    result_type: Callable[[list[pa.DataType]], pa.DataType]
    impl: Callable[[list[Val], int], Val]
    lazy: str = "strict"
    safe: bool = False
    literal_type: Callable[[list[pa.DataType], list[Any]], pa.DataType] | None = None
    public: bool = True


# --- type predicates and names ------------------------------------------------------------

INTEGRAL = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
TIMESTAMP = pa.timestamp("us", tz="UTC")
_INTEGRAL_DIGITS = {pa.int8(): 3, pa.int16(): 5, pa.int32(): 10, pa.int64(): 20}


def is_null(t: pa.DataType) -> bool:
    return bool(pa.types.is_null(t))


def is_integral(t: pa.DataType) -> bool:
    return bool(t in INTEGRAL)


def is_decimal(t: pa.DataType) -> bool:
    return bool(pa.types.is_decimal(t))


def is_floating(t: pa.DataType) -> bool:
    return bool(pa.types.is_floating(t))


def is_numeric(t: pa.DataType) -> bool:
    return is_integral(t) or is_decimal(t) or is_floating(t)


def is_string(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def is_datetime(t: pa.DataType) -> bool:
    return bool(t == pa.date32() or t == TIMESTAMP)


def spark_name(t: pa.DataType) -> str:
    """Spark's name for an Arrow type, for error messages."""
    names = {
        pa.bool_(): "boolean",
        pa.int8(): "tinyint",
        pa.int16(): "smallint",
        pa.int32(): "int",
        pa.int64(): "bigint",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.string(): "string",
        pa.date32(): "date",
        TIMESTAMP: "timestamp",
        pa.null(): "void",
    }
    if is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    return names.get(t, str(t))


def expect(fn: str, what: str, types: list[pa.DataType]) -> FunctionTypeError:
    """The error for `fn` called with `types` when it expects `what`."""
    got = ", ".join(spark_name(t) for t in types) or "no arguments"
    return FunctionTypeError(f"{fn} expects {what}, got {got}")


# --- decimals -----------------------------------------------------------------------------

MAX_PRECISION = 38


def as_decimal(t: pa.DataType) -> pa.DataType:
    """An integral type as the decimal Spark converts it to for decimal arithmetic."""
    if is_integral(t):
        return pa.decimal128(_INTEGRAL_DIGITS[t], 0)
    return t


def bounded(precision: int, scale: int) -> pa.DataType:
    return pa.decimal128(min(precision, MAX_PRECISION), min(scale, MAX_PRECISION))


def adjust_precision(precision: int, scale: int) -> pa.DataType:
    """Spark's result type for decimal arithmetic that needs more than 38 digits
    (spark.sql.decimalOperations.allowPrecisionLoss, on by default): keep the integral
    digits, cut the scale to no less than min(scale, 6)."""
    if precision <= MAX_PRECISION:
        return pa.decimal128(precision, scale)
    int_digits = precision - scale
    min_scale = min(scale, 6)
    return pa.decimal128(MAX_PRECISION, max(MAX_PRECISION - int_digits, min_scale))


def wider_decimal(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """Spark's common type of two decimals: the larger scale and integral range, cutting
    the scale (not the integral digits) past 38 digits."""
    scale = max(a.scale, b.scale)
    precision = max(a.precision - a.scale, b.precision - b.scale) + scale
    if precision <= MAX_PRECISION:
        return pa.decimal128(precision, scale)
    return pa.decimal128(MAX_PRECISION, max(0, scale - (precision - MAX_PRECISION)))


# --- common types -------------------------------------------------------------------------

_INT_RANK = {t: i for i, t in enumerate(INTEGRAL)}


def wider_numeric(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """Spark's (ANSI) common type of two numeric types: integral widening, integral and
    decimal to decimal, float only with float (float and anything else gives double, as
    ANSI type coercion skips float to keep precision), double with anything."""
    if a == b:
        return a
    if is_integral(a) and is_integral(b):
        return a if _INT_RANK[a] >= _INT_RANK[b] else b
    if pa.types.is_float64(a) or pa.types.is_float64(b):
        return pa.float64()
    if is_floating(a) or is_floating(b):
        return pa.float64()
    return wider_decimal(as_decimal(a), as_decimal(b))


def wider_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The common type of two types, or None: NULL goes with anything, numbers widen,
    a date with a timestamp is a timestamp, otherwise the types must be equal (no
    implicit casts from or to strings)."""
    if a == b:
        return a
    if is_null(a):
        return b
    if is_null(b):
        return a
    if is_numeric(a) and is_numeric(b):
        return wider_numeric(a, b)
    if is_datetime(a) and is_datetime(b):
        return TIMESTAMP
    if is_string(a) and is_string(b):
        return pa.string()
    return None


def common_type(types: list[pa.DataType]) -> pa.DataType:
    """The type all of `types` convert to (for CASE, COALESCE, UNION and IN lists), as
    Spark finds it; FunctionTypeError if there is none. All NULLs: NULL."""
    if not types:
        raise FunctionTypeError("no types to find a common type of")
    out = types[0]
    for t in types[1:]:
        wider = wider_type(out, t)
        if wider is None:
            names = ", ".join(spark_name(t) for t in types)
            raise FunctionTypeError(f"no common type for {names}")
        out = wider
    return out


# --- small helpers on values --------------------------------------------------------------


def is_scalar(v: Val) -> bool:
    return isinstance(v, pa.Scalar)


def to_array(v: Val, length: int) -> pa.Array:
    """`v` as an array of `length` rows (a scalar broadcast)."""
    if isinstance(v, pa.Scalar):
        return pa.repeat(v, length)
    if isinstance(v, pa.ChunkedArray):
        return v.combine_chunks()
    return v


def nonnull_any(mask: Val) -> bool:
    """Whether a boolean mask is true on some row (nulls count as false)."""
    if isinstance(mask, pa.Scalar):
        return bool(mask.is_valid and mask.as_py())
    return bool(pc.any(mask).as_py() or False)


def arrow_call(name: str, f: Callable[[], Val]) -> Val:
    """Run a pyarrow compute call that may fail on data (overflow, division by zero),
    turning its error into an EvaluationError that names the SQL function."""
    try:
        return f()
    except pa.ArrowInvalid as e:
        msg = str(e).split("\n")[0]
        if "overflow" in msg.lower():
            raise EvaluationError(f"arithmetic overflow in `{name}`") from e
        if "divide by zero" in msg.lower():
            raise EvaluationError(f"division by zero in `{name}`") from e
        raise EvaluationError(f"`{name}` failed: {msg}") from e
