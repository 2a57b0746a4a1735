"""Comparisons, boolean logic, null tests, IN and the conditional functions (coalesce,
nullif, if, ifnull/nvl, greatest, least) with Spark's semantics: arguments widened to
their common type first (no implicit casts from strings), Kleene logic, and Spark's
ordering of floating point, where NaN equals NaN and is greater than any other value.

None of them raises: widening to the common type keeps every integral digit (a decimal
may lose scale, rounded HALF_UP, as in Spark).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce

import pyarrow as pa
import pyarrow.compute as pc

from .base import (
    TIMESTAMP,
    Function,
    Val,
    common_type,
    expect,
    is_floating,
    is_null,
    is_scalar,
    wider_type,
)
from .cast import cast_value

BOOL = pa.bool_()
_NULL_BOOL = pa.scalar(None, BOOL)


# --- comparisons --------------------------------------------------------------------------


def _comparable(fn: str, ts: list[pa.DataType]) -> pa.DataType:
    t = wider_type(ts[0], ts[1])
    if t is None:
        raise expect(fn, "two values of comparable types", ts)
    return t


def _compare_type(fn: str) -> Callable[[list[pa.DataType]], pa.DataType]:
    def result(ts: list[pa.DataType]) -> pa.DataType:
        _comparable(fn, ts)
        return BOOL

    return result


def widen(fn: str, a: Val, b: Val) -> tuple[Val, Val]:
    t = _comparable(fn, [a.type, b.type])
    return cast_value(a, t), cast_value(b, t)


def _nan(x: Val) -> Val:
    return pc.is_nan(x)


def equal(x: Val, y: Val) -> Val:
    """x = y on values of one type; NaN equals NaN."""
    out = pc.equal(x, y)
    if is_floating(x.type):
        out = pc.if_else(pc.and_(_nan(x), _nan(y)), True, out)
    return out


def less(x: Val, y: Val, or_equal: bool) -> Val:
    """x < y (or <=) on values of one type; NaN is above everything else."""
    out = pc.less_equal(x, y) if or_equal else pc.less(x, y)
    if is_floating(x.type):
        nx, ny = _nan(x), _nan(y)
        nan_case = ny if or_equal else pc.and_(pc.invert(nx), ny)
        out = pc.if_else(pc.or_(nx, ny), nan_case, out)
    return out


def _comparison(fn: str) -> Function:
    def impl(args: list[Val], n: int) -> Val:
        x, y = widen(fn, args[0], args[1])
        if is_null(x.type):
            return _NULL_BOOL if is_scalar(x) and is_scalar(y) else pa.nulls(n, BOOL)
        if fn == "=":
            return equal(x, y)
        if fn == "<>":
            return pc.invert(equal(x, y))
        if fn == "<=>":
            both_null = pc.and_(pc.is_null(x), pc.is_null(y))
            return pc.if_else(both_null, True, pc.fill_null(equal(x, y), False))
        if fn in ("<", "<="):
            return less(x, y, fn == "<=")
        return less(y, x, fn == ">=")

    lazy = "strict" if fn == "<=>" else "nulls"
    return Function(fn, 2, 2, _compare_type(fn), impl, lazy=lazy, safe=True)


# --- logic and null tests -----------------------------------------------------------------


def _bool_type(fn: str, arity: int) -> Callable[[list[pa.DataType]], pa.DataType]:
    def result(ts: list[pa.DataType]) -> pa.DataType:
        if any(not (t == BOOL or is_null(t)) for t in ts):
            raise expect(fn, "boolean" + ("s" if arity > 1 else ""), ts)
        return BOOL

    return result


def _as_bool(v: Val) -> Val:
    return v if v.type == BOOL else v.cast(BOOL)


def _and(args: list[Val], n: int) -> Val:
    return pc.and_kleene(_as_bool(args[0]), _as_bool(args[1]))


def _or(args: list[Val], n: int) -> Val:
    return pc.or_kleene(_as_bool(args[0]), _as_bool(args[1]))


def _not(args: list[Val], n: int) -> Val:
    return pc.invert(_as_bool(args[0]))


def _any_type(ts: list[pa.DataType]) -> pa.DataType:
    return BOOL


# --- IN -----------------------------------------------------------------------------------


def _in_type(ts: list[pa.DataType]) -> pa.DataType:
    common_type(ts)
    return BOOL


def in_impl(args: list[Val], n: int) -> Val:
    """value IN (items): true on a match, else NULL if the value or an item is NULL, else
    false. A list of literals becomes a hash lookup."""
    t = common_type([a.type for a in args])
    value, items = cast_value(args[0], t), [cast_value(a, t) for a in args[1:]]
    if is_null(t):
        return _NULL_BOOL if is_scalar(value) else pa.nulls(n, BOOL)
    if not all(is_scalar(i) for i in items) or is_scalar(value):
        return reduce(pc.or_kleene, [equal(value, i) for i in items])
    present = [i for i in items if i.is_valid]
    if is_floating(t):  # -0.0 and 0.0 are equal, but hash apart
        value = pc.add(value, pa.scalar(0.0, t))
        present = [pc.add(i, pa.scalar(0.0, t)) for i in present]
    value_set = pa.concat_arrays([pa.repeat(i, 1) for i in present]) if present else pa.array([], t)
    found = pc.is_in(value, value_set=value_set)
    if len(present) < len(items):
        found = pc.if_else(found, True, _NULL_BOOL)
    return pc.if_else(pc.is_valid(value), found, _NULL_BOOL)


# --- conditional functions ----------------------------------------------------------------


def _common(fn: str, first: int = 0) -> Callable[[list[pa.DataType]], pa.DataType]:
    def result(ts: list[pa.DataType]) -> pa.DataType:
        try:
            return common_type(ts[first:])
        except ValueError:
            raise expect(fn, "arguments of a common type", ts) from None

    return result


def coalesce_impl(args: list[Val], n: int) -> Val:
    t = common_type([a.type for a in args])
    vals = [cast_value(a, t) for a in args]
    if is_null(t):
        return vals[0] if len(vals) == 1 else pa.nulls(n, t)
    return pc.coalesce(*vals) if len(vals) > 1 else vals[0]


def _if_type(ts: list[pa.DataType]) -> pa.DataType:
    if not (ts[0] == BOOL or is_null(ts[0])):
        raise expect("if", "a boolean condition and two values of a common type", ts)
    return _common("if", 1)(ts)


def if_impl(args: list[Val], n: int) -> Val:
    t = common_type([args[1].type, args[2].type])
    if is_null(t):
        return pa.nulls(n, t)
    cond = pc.fill_null(_as_bool(args[0]), False)
    return pc.if_else(cond, cast_value(args[1], t), cast_value(args[2], t))


def _nullif_type(ts: list[pa.DataType]) -> pa.DataType:
    _comparable("nullif", ts)
    return ts[0]


def _nullif(args: list[Val], n: int) -> Val:
    a = args[0]
    if is_null(a.type):
        return a
    x, y = widen("nullif", a, args[1])
    same = pc.fill_null(equal(x, y), False)
    return pc.if_else(same, pa.scalar(None, a.type), a)


def _extreme(greatest: bool) -> Callable[[list[Val], int], Val]:
    def impl(args: list[Val], n: int) -> Val:
        t = common_type([a.type for a in args])
        vals = [cast_value(a, t) for a in args]
        if is_null(t):
            return pa.nulls(n, t)
        # Arrow compares neither booleans nor zoned timestamps element-wise: as integers.
        as_int = {BOOL: pa.int8(), TIMESTAMP: pa.int64()}.get(t)
        work = [v.cast(as_int) for v in vals] if as_int is not None else vals
        f = pc.max_element_wise if greatest else pc.min_element_wise
        out = f(*work, skip_nulls=True)
        if as_int is not None:
            out = out.cast(t)
        if greatest and is_floating(t):  # Arrow skips NaN; in Spark it is the greatest
            any_nan = reduce(pc.or_, [pc.fill_null(_nan(v), False) for v in vals])
            out = pc.if_else(any_nan, pa.scalar(float("nan"), t), out)
        return out

    return impl


def functions() -> list[Function]:
    comparisons = [_comparison(fn) for fn in ("=", "<>", "<", "<=", ">", ">=", "<=>")]
    return [
        *comparisons,
        Function("and", 2, 2, _bool_type("and", 2), _and, lazy="special", safe=True),
        Function("or", 2, 2, _bool_type("or", 2), _or, lazy="special", safe=True),
        Function("not", 1, 1, _bool_type("not", 1), _not, lazy="nulls", safe=True),
        Function("is_null", 1, 1, _any_type, lambda a, n: pc.is_null(a[0]), safe=True),
        Function("is_not_null", 1, 1, _any_type, lambda a, n: pc.is_valid(a[0]), safe=True),
        Function("in", 2, None, _in_type, in_impl, "special", True),
        Function("coalesce", 1, None, _common("coalesce"), coalesce_impl, "special", True),
        Function("ifnull", 2, 2, _common("ifnull"), coalesce_impl, "special", True),
        Function("nvl", 2, 2, _common("nvl"), coalesce_impl, "special", True),
        Function("if", 3, 3, _if_type, if_impl, "special", True),
        Function("nullif", 2, 2, _nullif_type, _nullif, "nulls", True),
        Function("greatest", 2, None, _common("greatest"), _extreme(True), safe=True),
        Function("least", 2, None, _common("least"), _extreme(False), safe=True),
    ]
