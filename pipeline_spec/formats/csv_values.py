"""CSV field values converted in Arrow exactly as Spark's CSV reader converts them, column by
column (`convert`), or None when any value of the column might convert otherwise: the
driver's parse (`csv_lines`) then leaves the file to Spark, which decides.

Spark's reader (`file_batches.CSV_OPTIONS`) takes an empty field, quoted or not, as NULL, and
hands any other text, untrimmed, to the column type's parser; a value that parser refuses
makes the record malformed (a dead letter). What is taken here, and how:

- a string is itself;
- an integer is `-?[0-9]+` in range (Java also takes `+` and other scripts' digits: left to
  Spark);
- a double is a plain decimal (`1`, `-1.5`, `.5`, `1e-3`), or `NaN`, `Inf`, `-Inf` (Spark's
  names for them);
- a boolean is `true` or `false` in any case;
- a decimal(p, s) is `[+-]?` digits with at most one `.` (no exponent, no `,`, which Spark's
  parser drops), rounded half away from zero to s places (Java's `HALF_UP`, as Spark's
  `Decimal`), and at most p digits once rounded;
- a date is `yyyy-mm-dd`, a real day (Spark also takes `1996-3-13`, `1996`, a time after
  the date, spaces around: left to Spark);
- a timestamp is `yyyy-mm-dd[Thh:mm[:ss[.ffffff]]]` (UTC, the session's zone), or
  `yyyy-mm-ddThh:mm:ss[.ffffff]` then `Z` or `+hh:mm`/`-hh:mm`; a space may stand for `T`.

`null` is no NULL: Spark's reader refuses it in a number, boolean, date or timestamp column
(the record is malformed) and keeps it as text in a string column.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

_TS = pa.timestamp("us", tz="UTC")
_INTS = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
_TYPES = (*_INTS, pa.float64(), pa.bool_(), pa.string(), pa.date32(), _TS)
_INT = r"^-?[0-9]+$"
_DOUBLE = r"^-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"
_SPECIAL = {"NaN": "nan", "Inf": "inf", "-Inf": "-inf"}
_DECIMAL = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)$"
_DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
_SECONDS = r":[0-9]{2}(\.[0-9]{1,6})?"
_LOCAL = f"^{_DATE}([T ][0-9]{{2}}:[0-9]{{2}}({_SECONDS})?)?$"
_ZONED = f"^{_DATE}[T ][0-9]{{2}}:[0-9]{{2}}{_SECONDS}(Z|[+-][0-9]{{2}}:[0-9]{{2}})$"
_MAX_DIGITS = 38  # Arrow's decimal128, as Spark's decimal


def converts(t: pa.DataType) -> bool:
    """Whether `convert` takes columns of type `t` (some of its values, at least)."""
    return t in _TYPES or (pa.types.is_decimal128(t) and t.scale >= 0)


def convert(s: pa.Array, t: pa.DataType) -> pa.Array | None:
    """Column `s`'s field texts as type `t`, as Spark converts them, or None if one of them
    may convert otherwise (see the module's docstring)."""
    values = pc.if_else(pc.equal(s, ""), pa.scalar(None, pa.string()), s)
    try:
        if t == pa.string():
            return values
        if t in _INTS:
            return pc.cast(values, t) if _valid(values, _matches(values, _INT)) else None
        if t == pa.float64():
            return _doubles(values)
        if t == pa.bool_():
            lower = pc.utf8_lower(values)
            ok = pc.is_in(lower, pa.array(["true", "false"]))
            return pc.equal(lower, "true") if _valid(values, ok) else None
        if t == pa.date32():
            ok = _matches(values, f"^{_DATE}$")
            return pc.cast(values, t) if _valid(values, ok) else None
        if pa.types.is_decimal128(t):
            return _decimals(values, t)
        return _timestamps(values)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # out of the type's range, or not a real day


def _matches(values: pa.Array, pattern: str) -> pa.Array:
    return pc.match_substring_regex(values, pattern)


def _valid(values: pa.Array, ok: pa.Array) -> bool:
    """Whether `ok` holds for every non-NULL value."""
    return bool(pc.all(pc.or_kleene(pc.is_null(values), ok)).as_py())


def _doubles(values: pa.Array) -> pa.Array | None:
    named = pc.is_in(values, pa.array(list(_SPECIAL)))
    if not _valid(values, pc.or_kleene(_matches(values, _DOUBLE), named)):
        return None
    for name, arrow in _SPECIAL.items():
        values = pc.if_else(pc.equal(values, name), arrow, values)
    return pc.cast(values, pa.float64())


def _decimals(values: pa.Array, t: pa.Decimal128Type) -> pa.Array | None:
    """Plain decimals rounded as Spark's `Decimal(BigDecimal(text), p, s)` rounds them."""
    if not _valid(values, _matches(values, _DECIMAL)):
        return None
    try:
        return pc.cast(values, t)  # exact unless a value has more places than the scale
    except pa.ArrowInvalid:
        pass  # then it raises (or when an integer part is too long: so does the rounding)
    length = pc.utf8_length(values)
    point = pc.find_substring(values, ".")
    fraction = pc.if_else(pc.less(point, 0), 0, pc.subtract(pc.subtract(length, point), 1))
    places = pc.max(fraction).as_py() or 0
    if places <= t.scale:
        return None
    # More places than the scale: read them all, round half away from zero, then narrow
    # (Arrow raises when a rounded value has more than p digits).
    whole = pc.max(pc.if_else(pc.less(point, 0), length, point)).as_py() or 0
    if whole + places + 1 > _MAX_DIGITS:
        return None
    wide = pc.cast(values, pa.decimal128(whole + places + 1, places))
    return pc.cast(pc.round(wide, t.scale, round_mode="half_towards_infinity"), t)


def _timestamps(values: pa.Array) -> pa.Array | None:
    local = _matches(values, _LOCAL)
    if not _valid(values, pc.or_kleene(local, _matches(values, _ZONED))):
        return None
    date_only = pc.equal(pc.utf8_length(values), 10)
    # Arrow reads a zone only with a time; Spark's date alone is its midnight, UTC.
    values = pc.if_else(date_only, pc.binary_join_element_wise(values, "T00:00", ""), values)
    with_zone = pc.if_else(local, pc.binary_join_element_wise(values, "Z", ""), values)
    return pc.cast(with_zone, _TS)


__all__ = ["convert", "converts"]
