"""Date and time functions with Spark's semantics in a UTC session (Spindle's timestamps
are UTC instants, as Spark's with spark.sql.session.timeZone=UTC): field extraction,
to_date, date_trunc, date_add/date_sub (int days, wrapping as Java's int arithmetic),
datediff and unix_timestamp. Dates stand for their midnight where a timestamp is needed,
timestamps for their day where a date is. Strings are not implicitly cast (cast first).

add_months, quarter, dayofyear and weekofyear; `timestamp_plus` (not callable by name), what
the compiler makes of a timestamp plus an INTERVAL.

date_format with a constant pattern of yyyy, yy, MM, dd, HH, mm, ss, quoted text and
punctuation. Left out: to_date/unix_timestamp with a format (Java's DateTimeFormatter
patterns), date_format's other pattern letters, current_date/current_timestamp (not
deterministic).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import decimals as dec
from .base import (
    TIMESTAMP,
    EvaluationError,
    Function,
    FunctionTypeError,
    Val,
    expect,
    is_integral,
    is_null,
    is_scalar,
    is_string,
    to_array,
)
from .cast import cast_value

DATE = pa.date32()
I32 = pa.int32()
ResultType = Callable[[list[pa.DataType]], pa.DataType]
Impl = Callable[[list[Val], int], Val]


def _is_dt(t: pa.DataType) -> bool:
    return t in (DATE, TIMESTAMP) or is_null(t)


def _nulls(args: list[Val], n: int, t: pa.DataType) -> Val | None:
    if any(is_null(a.type) for a in args):
        return pa.scalar(None, t) if all(is_scalar(a) for a in args) else pa.nulls(n, t)
    return None


def _typed(fn: str, result: pa.DataType, kinds: str) -> ResultType:
    """Arguments by kind: 'd' a date or timestamp, 's' a string, 'i' an int (tinyint to
    int); NULL for any."""

    def check(ts: list[pa.DataType]) -> pa.DataType:
        ok = len(ts) == len(kinds) and all(
            is_null(t)
            or (k == "d" and _is_dt(t))
            or (k == "s" and is_string(t))
            or (k == "i" and is_integral(t) and t != pa.int64())
            for t, k in zip(ts, kinds, strict=True)
        )
        if not ok:
            want = {"d": "a date or timestamp", "s": "a string", "i": "an int"}
            raise expect(fn, " and ".join(want[k] for k in kinds), ts)
        return result

    return check


def _as_date(v: Val) -> Val:
    return cast_value(v, DATE)


def _as_timestamp(v: Val) -> Val:
    return cast_value(v, TIMESTAMP)


def _field(fn: str, f: Callable[[Val], Val], needs_time: bool) -> Function:
    def impl(args: list[Val], n: int) -> Val:
        if (done := _nulls(args, n, I32)) is not None:
            return done
        x = args[0]
        x = _as_timestamp(x) if needs_time or x.type == TIMESTAMP else x
        return f(x).cast(I32)

    return Function(fn, 1, 1, _typed(fn, I32, "d"), impl, "nulls", safe=True)


def _day_of_week(x: Val) -> Val:
    return pc.day_of_week(x, count_from_zero=False, week_start=7)  # Sunday = 1


# --- months ---------------------------------------------------------------------------------


def _plus_months(days: np.ndarray, months: np.ndarray) -> np.ndarray:
    """Dates (days since the epoch) plus whole months, the day of month cut to the new
    month's length, as Spark's add_months does (2021-01-31 + 1 month: 2021-02-28)."""
    d = days.astype("datetime64[D]")
    month = d.astype("datetime64[M]")
    day = (d - month).astype(np.int64)
    target = month + months.astype(np.int64)
    length = ((target + 1).astype("datetime64[D]") - target.astype("datetime64[D]")).astype(
        np.int64
    )
    out: np.ndarray = target.astype("datetime64[D]").astype(np.int64)
    out = out + np.minimum(day, length - 1)
    if len(out) and (out.max() >= 2**31 or out.min() < -(2**31)):
        raise EvaluationError("integer overflow in `add_months`: the date is out of range")
    return out


def _add_months(args: list[Val], n: int) -> Val:
    if (done := _nulls(args, n, DATE)) is not None:
        return done
    (d, dv), (k, kv) = _days(args[0], n), _ints(args[1], n)
    valid = dv & kv
    out = _plus_months(np.where(valid, d, 0), np.where(valid, k, 0))
    result = dec.from_numpy(out.astype(np.int32), valid, I32).cast(DATE)
    return result[0] if all(is_scalar(a) for a in args) else result


_DAY_US = 86_400_000_000


def _timestamp_plus(args: list[Val], n: int) -> Val:
    """A timestamp plus an interval: whole months (day of month cut as add_months does,
    the time of day kept), then microseconds; Spark's TimestampAddYMInterval and TimeAdd
    in UTC."""
    if (done := _nulls(args[:1], n, TIMESTAMP)) is not None:
        return done
    months, micros = int(args[1].as_py()), int(args[2].as_py())
    ts = to_array(_as_timestamp(args[0]), n).cast(pa.int64())
    valid = dec.valid_mask(ts)
    us = np.asarray(pc.fill_null(ts, 0).to_numpy(), dtype=np.int64)
    if months:
        days = np.floor_divide(us, _DAY_US)
        moved = _plus_months(days, np.full(len(us), months, dtype=np.int64))
        us = moved * _DAY_US + (us - days * _DAY_US)
    if micros:
        with np.errstate(over="raise"):
            try:
                us = us + np.int64(micros)
            except FloatingPointError:
                raise EvaluationError("arithmetic overflow in a timestamp + interval") from None
    result = dec.from_numpy(us, valid, pa.int64()).cast(TIMESTAMP)
    return result[0] if is_scalar(args[0]) else result


def _add_months_type(ts: list[pa.DataType]) -> pa.DataType:
    if len(ts) != 2 or not (_is_dt(ts[0]) and (is_null(ts[1]) or is_integral(ts[1]))):
        raise expect("add_months", "a date and an int", ts)
    if ts[1] == pa.int64():
        raise expect("add_months", "a date and an int (not a bigint)", ts)
    return DATE


# --- to_date, date_trunc ------------------------------------------------------------------


def _to_date_type(ts: list[pa.DataType]) -> pa.DataType:
    if len(ts) != 1 or not (_is_dt(ts[0]) or is_string(ts[0])):
        raise expect("to_date", "a string, date or timestamp", ts)
    return DATE


def _to_date(args: list[Val], n: int) -> Val:
    if (done := _nulls(args, n, DATE)) is not None:
        return done
    return _as_date(args[0])


_TRUNC_UNITS = {
    "YEAR": "year",
    "YYYY": "year",
    "YY": "year",
    "QUARTER": "quarter",
    "MONTH": "month",
    "MM": "month",
    "MON": "month",
    "WEEK": "week",
    "DAY": "day",
    "DD": "day",
    "HOUR": "hour",
    "MINUTE": "minute",
    "SECOND": "second",
    "MILLISECOND": "millisecond",
    "MICROSECOND": "microsecond",
}


def _trunc(ts: Val, fmt: str | None) -> Val:
    unit = _TRUNC_UNITS.get(fmt.upper()) if fmt is not None else None
    if unit is None:  # Spark: NULL for an unknown unit
        return pa.scalar(None, TIMESTAMP) if is_scalar(ts) else pa.nulls(len(ts), TIMESTAMP)
    if unit == "microsecond":
        return ts
    return pc.floor_temporal(ts, unit=unit, week_starts_monday=True)


def _date_trunc(args: list[Val], n: int) -> Val:
    if (done := _nulls(args, n, TIMESTAMP)) is not None:
        return done
    fmt, ts = args[0], _as_timestamp(args[1])
    if is_scalar(fmt):
        return _trunc(ts, fmt.as_py())
    ts = to_array(ts, n)
    out = pa.nulls(n, TIMESTAMP)
    for unit in pc.unique(fmt).drop_null().to_pylist():  # once per distinct unit
        rows = pc.fill_null(pc.equal(fmt, unit), False)
        out = pc.replace_with_mask(out, rows, to_array(_trunc(ts.filter(rows), unit), 0))
    return out


# --- date arithmetic ----------------------------------------------------------------------


def _days(v: Val, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Days since the epoch of a date value, and where it is valid."""
    arr = to_array(_as_date(v), n).cast(I32)
    return np.asarray(pc.fill_null(arr, 0).to_numpy(), dtype=np.int32), dec.valid_mask(arr)


def _ints(v: Val, n: int) -> tuple[np.ndarray, np.ndarray]:
    arr = to_array(v, n).cast(I32)
    return np.asarray(pc.fill_null(arr, 0).to_numpy(), dtype=np.int32), dec.valid_mask(arr)


def _date_add(sign: int) -> Impl:
    def impl(args: list[Val], n: int) -> Val:
        if (done := _nulls(args, n, DATE)) is not None:
            return done
        (d, dv), (k, kv) = _days(args[0], n), _ints(args[1], n)
        with np.errstate(over="ignore"):
            out = d + k if sign > 0 else d - k  # int32: wraps, as Java's int
        result = dec.from_numpy(out.astype(np.int32), dv & kv, I32).cast(DATE)
        return result[0] if all(is_scalar(a) for a in args) else result

    return impl


def _datediff(args: list[Val], n: int) -> Val:
    if (done := _nulls(args, n, I32)) is not None:
        return done
    (end, ev), (start, sv) = _days(args[0], n), _days(args[1], n)
    with np.errstate(over="ignore"):
        out = (end - start).astype(np.int32)
    result = dec.from_numpy(out, ev & sv, I32)
    return result[0] if all(is_scalar(a) for a in args) else result


def _bound_by_evaluator(args: list[Val], n: int) -> Val:
    raise AssertionError("proctime is the evaluator's (evaluate.PROCTIME)")


def _unix_timestamp(args: list[Val], n: int) -> Val:
    """Seconds since the epoch, truncated towards zero (Java's long division)."""
    if (done := _nulls(args, n, pa.int64())) is not None:
        return done
    micros = to_array(_as_timestamp(args[0]), n).cast(pa.int64())
    values = np.asarray(pc.fill_null(micros, 0).to_numpy(), dtype=np.int64)
    seconds = values // 1_000_000
    seconds = seconds + ((values < 0) & (values % 1_000_000 != 0))
    result = dec.from_numpy(seconds, dec.valid_mask(micros), pa.int64())
    return result[0] if is_scalar(args[0]) else result


# --- date_format ----------------------------------------------------------------------------

# Spark's (Java's DateTimeFormatter) pattern letters that date_format takes, as strftime's.
_PATTERN = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}
_LETTERS = re.compile(r"([A-Za-z])\1*|'(?:[^']|'')*'|[^A-Za-z']+")


def _strftime(fmt: str) -> str:
    """A date_format pattern as a strftime format; FunctionTypeError naming what it lacks."""
    if "".join(m.group(0) for m in _LETTERS.finditer(fmt)) != fmt:
        raise FunctionTypeError(f"date_format: unclosed quote in {fmt!r}")
    out = []
    for m in _LETTERS.finditer(fmt):
        part = m.group(0)
        if part.startswith("'"):
            out.append((part[1:-1].replace("''", "'") or "'").replace("%", "%%"))
        elif part[0].isalpha():
            if part not in _PATTERN:
                raise FunctionTypeError(
                    f"date_format: pattern {part!r} is not supported (supported: "
                    f"{', '.join(_PATTERN)}, quoted text, punctuation)"
                )
            out.append(_PATTERN[part])
        else:
            out.append(part.replace("%", "%%"))
    return "".join(out)


def _date_format_type(ts: list[pa.DataType], literals: list[object]) -> pa.DataType:
    _typed("date_format", pa.string(), "ds")(ts)
    if not isinstance(literals[1], str):
        raise FunctionTypeError("date_format: the format must be a constant string")
    _strftime(literals[1])
    return pa.string()


def _date_format(args: list[Val], n: int) -> Val:
    if (done := _nulls(args, n, pa.string())) is not None:
        return done
    fmt = _strftime(args[1].as_py())
    # Whole seconds: strftime's %S shows a timestamp's fraction.
    ts = pc.floor_temporal(to_array(_as_timestamp(args[0]), n), unit="second")
    ts = ts.cast(pa.timestamp("s", tz="UTC"))
    out = pc.strftime(ts, format=fmt, locale="C")
    if "%Y" in fmt:  # Java signs a year of more than four digits
        wide = pc.fill_null(pc.greater(pc.year(ts), 9999), False)
        if pc.any(wide).as_py():
            out = pc.if_else(wide, pc.strftime(ts, format=fmt.replace("%Y", "+%Y")), out)
    return out[0] if is_scalar(args[0]) else out


def functions() -> list[Function]:
    out = [
        _field("year", pc.year, False),
        _field("quarter", pc.quarter, False),
        _field("dayofyear", pc.day_of_year, False),
        _field("weekofyear", pc.iso_week, False),
        _field("month", pc.month, False),
        _field("day", pc.day, False),
        _field("dayofmonth", pc.day, False),
        _field("dayofweek", _day_of_week, False),
        _field("hour", pc.hour, True),
        _field("minute", pc.minute, True),
        _field("second", pc.second, True),
        Function("to_date", 1, 1, _to_date_type, _to_date, "nulls"),
        Function("date_trunc", 2, 2, _typed("date_trunc", TIMESTAMP, "sd"), _date_trunc, "nulls"),
        Function("date_add", 2, 2, _typed("date_add", DATE, "di"), _date_add(1), "nulls", True),
        Function("date_sub", 2, 2, _typed("date_sub", DATE, "di"), _date_add(-1), "nulls", True),
        Function("datediff", 2, 2, _typed("datediff", I32, "dd"), _datediff, "nulls", True),
        Function("add_months", 2, 2, _add_months_type, _add_months, "nulls"),
        Function(
            "timestamp_plus",
            3,
            3,
            lambda ts: TIMESTAMP,
            _timestamp_plus,
            "nulls",
            public=False,
        ),
        Function(
            "unix_timestamp", 1, 1, _typed("unix_timestamp", pa.int64(), "d"), _unix_timestamp
        ),
        # PROCTIME(), NOW(), CURRENT_TIMESTAMP: the step's processing time, which the
        # evaluator gives (`evaluate.PROCTIME`): never called.
        Function("proctime", 0, 0, lambda ts: TIMESTAMP, _bound_by_evaluator, safe=True),
        Function(
            "date_format",
            2,
            2,
            _typed("date_format", pa.string(), "ds"),
            _date_format,
            "nulls",
            literal_type=_date_format_type,
        ),
    ]
    return out
