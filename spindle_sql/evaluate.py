"""Vectorised evaluation of typed scalar expressions (`expr.py`) on Arrow tables, with
Spark's semantics (`functions/`): one pyarrow.compute pass per node, no per-row Python.

Spark evaluates some arguments only on some rows: a CASE branch where it is taken, the
right side of AND only where the left is not false, a COALESCE argument where the earlier
ones are NULL, the arguments of a null-intolerant function after the first NULL not at
all (see `Function.lazy`). A run-time error (ANSI: overflow, division by zero, invalid
cast) must only come from rows Spark evaluates, so an argument that may raise is
evaluated on just those rows; arguments that cannot raise are evaluated on all rows and
selected, which is cheaper.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .expr import Call, Case, Cast, Column, Expr, Literal, UdfCall
from .functions import FUNCTIONS, EvaluationError, Val, cast_value, common_type
from .functions.base import (
    TIMESTAMP,
    is_decimal,
    is_floating,
    is_integral,
    is_null,
    is_numeric,
    is_string,
)
from .functions.logic import equal

BOOL = pa.bool_()


PROCTIME = "proctime"  # the function a step's processing time is


class _Rows:
    """The rows an expression is evaluated on: a table, or some of its rows; the step's
    processing time (UTC microseconds, None if the caller gave none)."""

    def __init__(
        self, table: pa.Table, indices: pa.Array | None = None, step_time_us: int | None = None
    ) -> None:
        self.table = table
        self.indices = indices
        self.step_time_us = step_time_us
        self.n = table.num_rows if indices is None else len(indices)
        self._columns: dict[str, pa.Array] = {}

    def column(self, name: str) -> pa.Array:
        col = self._columns.get(name)
        if col is None:
            col = self.table.column(name).combine_chunks()
            if self.indices is not None:
                col = col.take(self.indices)
            self._columns[name] = col
        return col

    def subset(self, mask: pa.Array) -> _Rows:
        """The rows where `mask` (one boolean per row here, no nulls) is true."""
        idx = pc.indices_nonzero(mask)
        indices = idx if self.indices is None else self.indices.take(idx)
        return _Rows(self.table, indices, self.step_time_us)


def evaluate(e: Expr, table: pa.Table, step_time_us: int | None = None) -> pa.Array:
    """`e` on every row of `table`: an array of `table.num_rows` values of type `e.type`.
    EvaluationError where Spark (ANSI mode) raises. `step_time_us`: the step's processing
    time, what PROCTIME() gives on every row (one value per step, as Spark's
    current_timestamp() per micro-batch)."""
    if table.num_rows == 0:  # no row evaluates anything (Spark raises per row)
        return pa.array([], e.type)
    return _full(_eval(e, _Rows(table, None, step_time_us)), table.num_rows, e.type)


def evaluate_predicate(e: Expr, table: pa.Table, step_time_us: int | None = None) -> pa.Array:
    """A boolean filter mask for `e` (WHERE, HAVING, ON): NULL counts as false."""
    if is_null(e.type):
        return pa.array([False] * table.num_rows, BOOL)
    return pc.fill_null(evaluate(e, table, step_time_us), False)


def _full(v: Val, n: int, t: pa.DataType) -> pa.Array:
    """`v` as an array of `n` rows of type `t`."""
    if v.type != t:
        if not is_null(v.type):
            raise TypeError(f"internal: a value of type {v.type} where {t} was expected")
        v = pa.scalar(None, t) if isinstance(v, pa.Scalar) else pa.nulls(len(v), t)
    if isinstance(v, pa.Scalar):
        return pa.repeat(v, n)
    if isinstance(v, pa.ChunkedArray):
        return v.combine_chunks()
    return v


def _eval(e: Expr, rows: _Rows) -> Val:
    if isinstance(e, Column):
        return rows.column(e.name)
    if isinstance(e, Literal):
        return pa.scalar(e.value, e.type)
    if isinstance(e, Cast):
        return cast_value(_eval(e.arg, rows), e.type)
    if isinstance(e, Case):
        return _case(e, rows)
    if isinstance(e, UdfCall):
        return e.udf([_eval(a, rows) for a in e.args], rows.n)
    if e.fn == PROCTIME:
        if rows.step_time_us is None:
            raise EvaluationError(
                "PROCTIME(): this step has no processing time (a pipeline's run gives each "
                "step the time its offset log recorded)"
            )
        return pa.scalar(rows.step_time_us, e.type)
    return _call(e, rows)


def _on(e: Expr, rows: _Rows, mask: Any) -> Val:
    """`e` evaluated only on the rows where `mask` is true (NULL elsewhere) if it may
    raise, else on all rows."""
    if not may_raise(e):
        return _eval(e, rows)
    if isinstance(mask, (pa.Scalar, bool)):
        keep = mask if isinstance(mask, bool) else bool(mask.as_py())
        return _eval(e, rows) if keep else pa.scalar(None, e.type)
    mask = pc.fill_null(mask, False)
    if pc.all(mask).as_py():
        return _eval(e, rows)
    if not pc.any(mask).as_py():  # no row evaluates it (a kernel of scalars needs a row)
        return pa.nulls(rows.n, e.type)
    value = _full(_eval(e, rows.subset(mask)), int(pc.sum(mask).as_py() or 0), e.type)
    return pc.replace_with_mask(pa.nulls(rows.n, e.type), mask, value)


def _call(e: Call, rows: _Rows) -> Val:
    f = FUNCTIONS[e.fn]
    args = e.args
    if f.lazy == "strict" or not any(may_raise(a) for a in args):
        vals = [_eval(a, rows) for a in args]
    elif f.lazy == "nulls":
        vals = []
        for a in args:
            guard = _all_valid(vals)
            vals.append(_on(a, rows, guard) if guard is not None else _eval(a, rows))
    elif f.lazy == "right_first":
        right = _eval(args[1], rows)
        vals = [_on(args[0], rows, pc.is_valid(right)), right]
    else:
        vals = _special(e, rows)
    return f.impl(vals, rows.n)


def _all_valid(vals: list[Val]) -> Any:
    """Where all of `vals` are non-null (None: no values yet)."""
    if not vals:
        return None
    out = pc.is_valid(vals[0])
    for v in vals[1:]:
        out = pc.and_(out, pc.is_valid(v))
    return out


def _special(e: Call, rows: _Rows) -> list[Val]:
    """Arguments of the functions that choose which arguments to evaluate per row."""
    fn, args = e.fn, e.args
    if fn in ("and", "or"):
        left = _eval(args[0], rows)
        # AND needs the right side where the left is not false, OR where it is not true.
        need = pc.fill_null(left if fn == "and" else pc.invert(left), True)
        return [left, _on(args[1], rows, need)]
    if fn in ("coalesce", "ifnull", "nvl"):
        vals: list[Val] = []
        for a in args:
            need = None
            for v in vals:
                need = pc.is_null(v) if need is None else pc.and_(need, pc.is_null(v))
            vals.append(_eval(a, rows) if need is None else _on(a, rows, need))
        return vals
    if fn == "if":
        cond = _eval(args[0], rows)
        taken = pc.fill_null(cond, False)
        return [cond, _on(args[1], rows, taken), _on(args[2], rows, pc.invert(taken))]
    if fn == "in":
        return _in_args(e, rows)
    return [_eval(a, rows) for a in args]


def _in_args(e: Call, rows: _Rows) -> list[Val]:
    """IN evaluates the value, then the items in order until one matches."""
    t = common_type([a.type for a in e.args])
    value = _eval(e.args[0], rows)
    vals = [value]
    matched: Any = pa.scalar(False)
    v = cast_value(value, t)
    for a in e.args[1:]:
        need = pc.and_(pc.is_valid(v), pc.invert(matched))
        item = _on(a, rows, need)
        vals.append(item)
        if not is_null(t):
            matched = pc.or_(matched, pc.fill_null(equal(v, cast_value(item, t)), False))
    return vals


def _case(e: Case, rows: _Rows) -> Val:
    """CASE: the first WHEN whose condition is true (NULL is not) gives the value."""
    n, t = rows.n, e.type
    parts: list[Expr] = [x for w in e.whens for x in w]
    if e.otherwise is not None:
        parts.append(e.otherwise)
    if not any(may_raise(p) for p in parts):
        conds = [pc.fill_null(_full(_eval(c, rows), n, BOOL), False) for c, _ in e.whens]
        values = [_full(_eval(v, rows), n, t) for _, v in e.whens]
        other = _full(_eval(e.otherwise, rows), n, t) if e.otherwise is not None else None
        if other is not None:
            values.append(other)
        if is_null(t):
            return pa.nulls(n, t)
        names = [str(i) for i in range(len(conds))]
        return pc.case_when(pa.StructArray.from_arrays(conds, names=names), *values)
    out = pa.nulls(n, t)
    remaining = pa.repeat(pa.scalar(True), n)
    for c, v in e.whens:
        cond = _full(_on(c, rows, remaining), n, BOOL) if not is_null(c.type) else None
        if cond is None:
            continue
        taken = pc.and_(remaining, pc.fill_null(cond, False))
        out = _put(out, taken, v, rows)
        remaining = pc.and_(remaining, pc.invert(taken))
    if e.otherwise is not None:
        out = _put(out, remaining, e.otherwise, rows)
    return out


def _put(out: pa.Array, mask: pa.Array, e: Expr, rows: _Rows) -> pa.Array:
    """`out` with `e`'s values (evaluated on those rows only) where `mask` is true."""
    count = int(pc.sum(mask).as_py() or 0)
    if count == 0 or is_null(e.type):
        return out
    value = _full(_eval(e, rows.subset(mask)), count, e.type)
    return pc.replace_with_mask(out, mask, value)


# --- which expressions may raise ----------------------------------------------------------


def may_raise(e: Expr) -> bool:
    """Whether evaluating `e` may raise an EvaluationError on some input."""
    if isinstance(e, (Column, Literal)):
        return False
    if isinstance(e, Cast):
        return not _safe_cast(e.arg.type, e.type) or may_raise(e.arg)
    if isinstance(e, Case):
        parts = [x for w in e.whens for x in w] + ([e.otherwise] if e.otherwise else [])
        return any(may_raise(p) for p in parts)
    if isinstance(e, UdfCall):  # user code may raise on any row
        return True
    f = FUNCTIONS.get(e.fn)
    return f is None or not f.safe or any(may_raise(a) for a in e.args)


_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}


def _safe_cast(src: pa.DataType, dst: pa.DataType) -> bool:
    """Casts that never raise: to the same type, widening, to strings and booleans."""
    if src == dst or is_null(src) or (is_string(dst) and not is_floating(src)):
        return True
    if dst == BOOL and (is_numeric(src) or src == BOOL):
        return True
    if is_integral(src) and is_integral(dst):
        return bool(src.bit_width <= dst.bit_width)
    if is_decimal(dst) and (is_integral(src) or is_decimal(src)):  # keeps integral digits
        digits = src.precision - src.scale if is_decimal(src) else _DIGITS[src.bit_width]
        return bool(dst.precision - dst.scale >= digits)
    if is_integral(src) or is_decimal(src) or src == BOOL:
        return is_floating(dst)
    if src == pa.float32():
        return bool(dst == pa.float64())
    return bool(src in (pa.date32(), TIMESTAMP) and dst in (pa.date32(), TIMESTAMP))


__all__ = ["EvaluationError", "evaluate", "evaluate_predicate", "may_raise"]
