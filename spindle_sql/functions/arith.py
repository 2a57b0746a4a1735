"""Arithmetic operators (+ - * / % neg) and math functions (abs, round, floor, ceil, sqrt,
power, ln, exp, mod, pmod) with Spark's ANSI semantics: result types as Spark's type
coercion gives them, EvaluationError on integer and decimal overflow and on division by
zero (for doubles too, as Spark's ANSI mode does).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal, localcontext

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import decimals as dec
from .base import (
    EvaluationError,
    Function,
    FunctionTypeError,
    Val,
    arrow_call,
    bounded,
    expect,
    is_decimal,
    is_floating,
    is_integral,
    is_null,
    is_numeric,
    is_scalar,
    nonnull_any,
    to_array,
    wider_numeric,
)
from .cast import cast_value

F64 = pa.float64()
ResultType = Callable[[list[pa.DataType]], pa.DataType]
Impl = Callable[[list[Val], int], Val]


def _to(v: Val, t: pa.DataType) -> Val:
    return cast_value(v, t)


def _numeric_args(fn: str, types: list[pa.DataType]) -> list[pa.DataType]:
    """The argument types with NULLs standing for the others' (all NULL: double)."""
    known = [t for t in types if not is_null(t)]
    if any(not is_numeric(t) for t in known):
        raise expect(fn, "numbers", types)
    return [t if not is_null(t) else (known[0] if known else F64) for t in types]


def arith_type(op: str, types: list[pa.DataType]) -> pa.DataType:
    """Spark's result type of binary `op`: integral widening, float with float stays
    float, any other float or double gives double, decimals by Spark's decimal rules; `/`
    on integers gives double."""
    a, b = _numeric_args(op, types)
    if op == "/":
        if is_floating(a) or is_floating(b) or not (is_decimal(a) or is_decimal(b)):
            return F64
        return dec.decimal_result("/", a, b)
    wide = wider_numeric(a, b)
    if is_decimal(wide):
        return dec.decimal_result(op if op in ("+", "-", "*", "/") else "%", a, b)
    return wide


def _zero_divisor(fn: str, a: Val, b: Val) -> None:
    """Spark (ANSI) raises when the divisor is zero and the dividend is not null."""
    zero = pa.scalar(Decimal(0), b.type) if is_decimal(b.type) else pa.scalar(0, b.type)
    if nonnull_any(pc.and_(pc.equal(b, zero), pc.is_valid(a))):
        raise EvaluationError(f"division by zero in `{fn}`")


def _binary(op: str) -> Function:
    checked = {"+": pc.add_checked, "-": pc.subtract_checked, "*": pc.multiply_checked}

    def impl(args: list[Val], n: int) -> Val:
        a, b = args
        rt = arith_type(op, [a.type, b.type])
        if is_null(a.type) or is_null(b.type):
            return pa.scalar(None, rt) if is_scalar(a) and is_scalar(b) else pa.nulls(n, rt)
        if op in ("/", "%", "pmod"):
            _zero_divisor(op, a, b)
        if is_decimal(rt):
            if op in ("+", "-"):
                return dec.add_sub(op, a, b, rt, n, op)
            if op == "*":
                return dec.multiply(a, b, rt, n, op)
            if op == "/":
                return dec.divide(a, b, rt, n, op)
            return dec.remainder(a, b, rt, n, op, pmod=op == "pmod")
        if op in ("%", "pmod"):
            return _mod(to_array(_to(a, rt), n), to_array(_to(b, rt), n), op == "pmod")
        x, y = _to(a, rt), _to(b, rt)
        if op == "/":
            return pc.divide(x, y)
        if is_floating(rt):
            return {"+": pc.add, "-": pc.subtract, "*": pc.multiply}[op](x, y)
        return arrow_call(op, lambda: checked[op](x, y))

    lazy = "right_first" if op in ("/", "%", "pmod") else "nulls"
    return Function(op, 2, 2, lambda ts: arith_type(op, ts), impl, lazy=lazy)


def _mod(a: pa.Array, b: pa.Array, pmod: bool) -> pa.Array:
    """Java's remainder (the dividend's sign) and Spark's pmod ((r + n) % n for r < 0,
    wrapping in int or long as Java does; tinyint and smallint compute in int)."""
    t = a.type
    valid = np.asarray(pc.and_(pc.is_valid(a), pc.is_valid(b)).to_numpy(zero_copy_only=False))
    if is_floating(t):
        x = np.asarray(pc.fill_null(a, 0).to_numpy(), dtype=t.to_pandas_dtype())
        y = np.asarray(pc.fill_null(b, 1).to_numpy(), dtype=t.to_pandas_dtype())
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.fmod(x, y)
            if pmod:
                r = np.where(r < 0, np.fmod(r + y, y), r)
        return dec.from_numpy(r, valid, t)
    work: type[np.signedinteger] = np.int64 if t == pa.int64() else np.int32
    x = np.asarray(pc.fill_null(a, 0).to_numpy(), dtype=work)
    y = np.asarray(pc.fill_null(b, 1).to_numpy(), dtype=work)
    y = np.where((y == 0) | (y == -1), 1, y)  # x % -1 is 0 (and avoids MIN / -1)
    r = np.fmod(x, y)
    if pmod:
        with np.errstate(over="ignore"):
            r = np.where(r < 0, np.fmod(r + y, y), r)
    return dec.from_numpy(r.astype(work), valid, pa.from_numpy_dtype(work)).cast(t)


# --- unary --------------------------------------------------------------------------------


def _same_numeric(fn: str, null_as: pa.DataType = F64) -> ResultType:
    def result(ts: list[pa.DataType]) -> pa.DataType:
        (t,) = ts
        if is_null(t):
            return null_as
        if not is_numeric(t):
            raise expect(fn, "a number", ts)
        return t

    return result


def _neg(args: list[Val], n: int) -> Val:
    (a,) = args
    if is_null(a.type):
        return pa.scalar(None, F64) if is_scalar(a) else pa.nulls(n, F64)
    if is_integral(a.type):
        return arrow_call("-", lambda: pc.negate_checked(a))
    return pc.negate(a)


def _abs(args: list[Val], n: int) -> Val:
    (a,) = args
    if is_null(a.type):
        return pa.scalar(None, F64) if is_scalar(a) else pa.nulls(n, F64)
    if is_integral(a.type):
        return arrow_call("abs", lambda: pc.abs_checked(a))
    return pc.abs(a)


def _double_type(fn: str) -> ResultType:
    def result(ts: list[pa.DataType]) -> pa.DataType:
        _numeric_args(fn, ts)
        return F64

    return result


def _double_fn(f: Callable[..., Val]) -> Impl:
    def impl(args: list[Val], n: int) -> Val:
        return f(*[_to(a, F64) for a in args])

    return impl


def _ln(args: list[Val], n: int) -> Val:
    """Spark's ln: NULL for x <= 0 (NaN stays NaN)."""
    x = _to(args[0], F64)
    return pc.if_else(pc.less_equal(x, 0.0), pa.scalar(None, F64), pc.ln(x))


# --- floor, ceil, round -------------------------------------------------------------------


def _floor_ceil_type(fn: str) -> ResultType:
    def result(ts: list[pa.DataType]) -> pa.DataType:
        (t,) = ts
        if is_null(t) or is_integral(t) or is_floating(t):
            return pa.int64()
        if is_decimal(t):
            return t if t.scale == 0 else bounded(t.precision - t.scale + 1, 0)
        raise expect(fn, "a number", ts)

    return result


def _floor_ceil(fn: str) -> Impl:
    def impl(args: list[Val], n: int) -> Val:
        (a,) = args
        rt = _floor_ceil_type(fn)([a.type])
        f = pc.floor if fn == "floor" else pc.ceil
        if is_decimal(a.type):
            if a.type == rt:
                return a
            t = a.type  # one more digit: 9.5 rounds up to 10
            wide = pa.decimal256(t.precision + 1, t.scale)
            return dec.rescale(f(to_array(a, n).cast(wide)), rt, fn)
        if not is_floating(a.type):
            return a.cast(rt)
        # Java's (long) of Math.floor/ceil: NaN gives 0, beyond the range saturates.
        arr = to_array(a, n).cast(F64)
        x = np.asarray(pc.fill_null(arr, 0.0).to_numpy(), dtype=np.float64)
        y = np.nan_to_num(np.floor(x) if fn == "floor" else np.ceil(x), nan=0.0)
        out = np.clip(y, -(2.0**63), 2.0**63 - 1024).astype(np.int64)
        out = np.where(y >= 2.0**63, np.int64(2**63 - 1), out)
        return dec.from_numpy(out, dec.valid_mask(arr), pa.int64())

    return impl


def round_type(ts: list[pa.DataType]) -> pa.DataType:
    """round(x[, d]): x's type, except that for a decimal Spark's type depends on d's
    value: `round_literal_type` gives it (this raises for round(decimal, d))."""
    t = ts[0]
    if len(ts) > 1 and not (is_integral(ts[1]) or is_null(ts[1])):
        raise expect("round", "a number and an integer scale", ts)
    if is_null(t):
        return F64
    if is_integral(t) or is_floating(t):
        return t
    if is_decimal(t):
        if len(ts) == 1:
            return round_result(t, 0)
        raise FunctionTypeError(
            "round of a decimal to a scale: the result type depends on the scale's value "
            "(use Function.literal_type)"
        )
    raise expect("round", "a number and an integer scale", ts)


def round_literal_type(ts: list[pa.DataType], literals: list[object]) -> pa.DataType:
    """round's type given its literal arguments' values (the scale's decides a decimal
    result's type)."""
    if len(ts) > 1 and is_decimal(ts[0]):
        if not (is_integral(ts[1]) or is_null(ts[1])):
            raise expect("round", "a number and an integer scale", ts)
        d = literals[1]
        if not isinstance(d, int):
            raise FunctionTypeError("round of a decimal needs a constant integer scale")
        return round_result(ts[0], d)
    return round_type(ts)


def round_result(t: pa.DataType, d: int) -> pa.DataType:
    """Spark's type of round(decimal t, d): one more integral digit for the carry."""
    if not is_decimal(t):
        return t
    least = t.precision - t.scale + 1
    if d < 0:
        return pa.decimal128(min(max(least, -d + 1), 38), 0)
    scale = min(t.scale, d)
    return pa.decimal128(min(least + scale, 38), scale)


def round_impl(args: list[Val], n: int) -> Val:
    """HALF_UP, as Spark: decimals exactly; integers by a negative scale (an overflow
    raises); doubles through their shortest decimal representation (Spark rounds
    BigDecimal(Double.toString(x))); floats as their double."""
    a = args[0]
    d_val = args[1] if len(args) > 1 else pa.scalar(0, pa.int32())
    if not is_scalar(d_val):
        raise FunctionTypeError("round's scale must be a constant")
    d = d_val.as_py()
    t = a.type
    if is_null(t) or d is None:
        rt = round_result(F64 if is_null(t) else t, d or 0)
        return pa.scalar(None, rt) if is_scalar(a) else pa.nulls(n, rt)
    arr = to_array(a, n)
    if is_decimal(t):
        return dec.rescale(_round_decimal(arr, d), round_result(t, d), "round")
    if is_integral(t):
        if d >= 0:
            return a
        rounded = _round_decimal(arr.cast(pa.decimal128(20, 0)), d)
        try:
            return rounded.cast(t)
        except pa.ArrowInvalid as e:
            raise EvaluationError("arithmetic overflow in `round`") from e
    return round_double(arr.cast(F64), d, t)


def _round_decimal(arr: pa.Array, d: int) -> pa.Array:
    t = arr.type
    if d >= t.scale:
        return arr
    wide = pa.decimal256(min(t.precision + 1, 76), t.scale)
    if -d > t.precision - t.scale:  # every value is below half the rounding unit
        return pc.if_else(pc.is_null(arr), pa.scalar(None, wide), pa.scalar(Decimal(0), wide))
    return pc.round(arr.cast(wide), d, round_mode=dec.HALF_UP)


def round_double(x: pa.Array, d: int, to: pa.DataType) -> pa.Array:
    """round(double, d) as Spark computes it: BigDecimal(Double.toString(x)) rounded
    HALF_UP, then the nearest `to` (double or float); NaN and infinities unchanged."""
    finite = pc.fill_null(pc.is_finite(x), False)
    if d >= 325:  # no double has digits that far right
        return x.cast(to)
    if d <= -309:  # every finite double is below half the unit
        return pc.if_else(finite, pa.scalar(0.0, to), x.cast(to))
    ax = pc.abs(x)
    # Values whose digits all lie above the rounding position keep their value.
    keep = pc.fill_null(pc.greater_equal(ax, 2.0**52 if d >= 0 else 10.0 ** (16 - d)), True)
    work = pc.and_(finite, pc.invert(keep))
    if abs(d) > 40:  # rare: row by row, beyond what 76 digits hold
        rows = x.filter(work)
        unit = Decimal(1).scaleb(-d)
        with localcontext() as ctx:
            ctx.prec = 1000
            vals = [
                str(Decimal(repr(v)).quantize(unit, rounding=ROUND_HALF_UP))
                for v in rows.to_pylist()
            ]
        return pc.replace_with_mask(x.cast(to), work, pa.array(vals, pa.string()).cast(to))
    tiny = pc.less(ax, float(Decimal(5).scaleb(-(d + 1))))  # rounds to zero
    zeroed = pc.if_else(pc.or_(tiny, pc.invert(work)), 0.0, x)
    scale = max(d, 0) + 18
    exact = zeroed.cast(pa.string()).cast(pa.decimal256(16 + max(0, -d) + scale, scale))
    rounded = pc.round(exact, d, round_mode=dec.HALF_UP)
    # Straight from the decimal string to `to`: correctly rounded, as Java's doubleValue.
    back = dec.to_plain_string(rounded).cast(to)
    return pc.if_else(work, back, x.cast(to))


# --- registry -----------------------------------------------------------------------------


def _unary(name: str, result: ResultType, impl: Impl, safe: bool = False) -> Function:
    return Function(name, 1, 1, result, impl, lazy="nulls", safe=safe)


def functions() -> list[Function]:
    binary = {op: _binary(op) for op in ("+", "-", "*", "/", "%", "pmod")}
    mod = Function("mod", 2, 2, binary["%"].result_type, binary["%"].impl, "right_first")
    floor, ceil = _floor_ceil("floor"), _floor_ceil("ceil")
    return [
        *binary.values(),
        mod,
        _unary("neg", _same_numeric("neg"), _neg),
        _unary("abs", _same_numeric("abs"), _abs),
        _unary("floor", _floor_ceil_type("floor"), floor),
        _unary("ceil", _floor_ceil_type("ceil"), ceil),
        _unary("ceiling", _floor_ceil_type("ceiling"), ceil),
        _unary("sqrt", _double_type("sqrt"), _double_fn(pc.sqrt), safe=True),
        _unary("exp", _double_type("exp"), _double_fn(pc.exp), safe=True),
        _unary("ln", _double_type("ln"), _ln, safe=True),
        Function("round", 1, 2, round_type, round_impl, "nulls", literal_type=round_literal_type),
        Function("power", 2, 2, _double_type("power"), _double_fn(pc.power), "nulls", True),
        Function("pow", 2, 2, _double_type("pow"), _double_fn(pc.power), "nulls", True),
    ]
