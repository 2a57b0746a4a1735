"""Spark's (ANSI) casts from strings: to booleans, integers, floating point, decimals,
dates and timestamps. Each follows the parser Spark uses (`UTF8String.toLongExact`,
`Double.parseDouble`, `BigDecimal`, `DateTimeUtils.stringToDate`/`parseTimestampString`)
through regular expressions on Arrow arrays; a string Spark cannot parse raises
EvaluationError, as Spark does in ANSI mode.

Not supported (EvaluationError naming the form, where Spark would succeed): hexadecimal
floating point ('0x1p3'), time-only timestamps ('12:00', which Spark puts on the current
date) and time zones other than Z, UTC/GMT/UT and numeric offsets (region ids like
'Europe/Paris', short ids like 'PST').
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .base import TIMESTAMP, EvaluationError, nonnull_any, spark_name
from .decimals import from_numpy, py_decimal, rescale, valid_mask

# Spark trims what `UTF8String.trimAll` and `String.trim` trim: ASCII controls and space.
_SPACE = r"[\x00-\x20]"


def trim_all(s: pa.Array) -> pa.Array:
    return pc.replace_substring_regex(s, rf"^{_SPACE}+|{_SPACE}+$", "")


def _invalid(s: pa.Array, ok: pa.Array, to: pa.DataType) -> None:
    """Raise for the first non-null string `ok` is false on."""
    bad = pc.and_(pc.is_valid(s), pc.invert(pc.fill_null(ok, False)))
    if nonnull_any(bad):
        value = s.filter(bad)[0].as_py()
        raise EvaluationError(
            f"invalid input in cast: {value!r} cannot be cast to {spark_name(to)}"
        )


def to_boolean(s: pa.Array) -> pa.Array:
    low = pc.utf8_lower(trim_all(s))
    true = pc.is_in(low, value_set=pa.array(["t", "true", "y", "yes", "1"]))
    false = pc.is_in(low, value_set=pa.array(["f", "false", "n", "no", "0"]))
    _invalid(s, pc.or_(true, false), pa.bool_())
    return pc.if_else(pc.is_valid(s), true, pa.scalar(None, pa.bool_()))


def to_integral(s: pa.Array, to: pa.DataType) -> pa.Array:
    """Optional sign and ASCII digits only (no point, no exponent); out of range is invalid
    input, as in Spark."""
    t = trim_all(s)
    _invalid(s, pc.match_substring_regex(t, r"^[+-]?[0-9]+$"), to)
    try:
        return pc.replace_substring_regex(t, r"^\+", "").cast(pa.int64()).cast(to)
    except pa.ArrowInvalid as e:
        raise EvaluationError(
            f"invalid input in cast: value out of range for {spark_name(to)}"
        ) from e


_SPECIAL = {
    "inf": "inf",
    "+inf": "inf",
    "infinity": "inf",
    "+infinity": "inf",
    "-inf": "-inf",
    "-infinity": "-inf",
    "nan": "nan",
}
_JAVA_DOUBLE = r"^[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?)$"


def to_floating(s: pa.Array, to: pa.DataType) -> pa.Array:
    """Spark's special words (any case: inf, infinity, nan, signed), else Java's
    Double.parseDouble (decimal notation, optional exponent and f/d suffix, NaN and
    Infinity); parsed directly to the target width, as Java's Float.parseFloat does."""
    t = trim_all(s)
    low = pc.utf8_lower(t)
    special = pc.is_in(low, value_set=pa.array(list(_SPECIAL)))
    java = pc.match_substring_regex(t, _JAVA_DOUBLE)
    hexadecimal = pc.match_substring_regex(t, r"^[+-]?0[xX]")
    if nonnull_any(pc.and_(hexadecimal, pc.invert(special))):
        raise EvaluationError("hexadecimal floating point strings are not supported in cast")
    _invalid(s, pc.or_(special, java), to)
    text = pc.replace_substring_regex(t, r"[fFdD]$", "")
    text = pc.replace_substring_regex(text, r"^[+-]?NaN$", "nan")
    text = pc.replace_substring_regex(text, r"Infinity$", "inf")
    text = pc.replace_substring_regex(text, r"^\+", "")
    for word, norm in _SPECIAL.items():
        text = pc.if_else(pc.equal(low, word), norm, text)
    return text.cast(to)


def to_decimal(s: pa.Array, to: pa.DataType) -> pa.Array:
    """Java's BigDecimal syntax, rounded HALF_UP to the scale; EvaluationError on overflow.
    Without an exponent the digits past the first one beyond the scale cannot change a
    HALF_UP rounding, so they are cut to fit Arrow's parser; with one (rare), row by row."""
    t = trim_all(s)
    number = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)"
    _invalid(s, pc.match_substring_regex(t, number + r"([eE][+-]?[0-9]+)?$"), to)
    exponent = pc.fill_null(pc.match_substring_regex(t, r"[eE]"), False)
    parts = pc.extract_regex(
        pc.if_else(exponent, pa.scalar(None, pa.string()), t),
        r"^(?P<sign>[+-]?)0*(?P<int>[0-9]*)\.?(?P<frac>[0-9]*)$",
    )
    int_part, frac = pc.struct_field(parts, "int"), pc.struct_field(parts, "frac")
    if pc.any(pc.greater(pc.utf8_length(int_part), to.precision - to.scale)).as_py():
        raise EvaluationError(
            f"numeric value out of range in cast: cannot be represented as {spark_name(to)}"
        )
    frac = pc.utf8_rpad(pc.utf8_slice_codeunits(frac, 0, to.scale + 1), to.scale + 1, "0")
    text = pc.binary_join_element_wise(
        pc.struct_field(parts, "sign"), pc.utf8_lpad(int_part, 1, "0"), ".", frac, ""
    )
    wide = pa.decimal256(to.precision + 1, to.scale + 1)
    out = rescale(text.cast(wide), to, "cast")
    if nonnull_any(exponent):
        rows = t.filter(exponent)
        fixed = py_decimal(lambda v: Decimal(v), [rows], to, "cast")
        out = pc.replace_with_mask(out, exponent, fixed)
    return out


# --- dates and timestamps -----------------------------------------------------------------


def _ints(parts: pa.Array, field: str, default: int) -> np.ndarray:
    col = pc.struct_field(parts, field)
    col = pc.if_else(pc.equal(col, ""), str(default), col)
    return np.asarray(pc.fill_null(col, str(default)).cast(pa.int64()).to_numpy(), dtype=np.int64)


def days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (H. Hinnant's algorithm)."""
    y = y - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return np.asarray(era * 146097 + doe - 719468, dtype=np.int64)


def _valid_date(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    month_days = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])
    last = month_days[np.clip(m, 0, 12)] + ((m == 2) & leap)
    return np.asarray((m >= 1) & (m <= 12) & (d >= 1) & (d <= last), dtype=bool)


_DATE = (
    r"^(?P<sign>[+-]?)(?P<y>[0-9]{4,7})(?:-(?P<m>[0-9]{1,2})(?:-(?P<d>[0-9]{1,2})(?:[ T].*)?)?)?$"
)


def to_date(s: pa.Array) -> pa.Array:
    """`[+-]yyyy[yyy][-[m]m[-[d]d[( |T)anything]]]` after trimming, as Spark's
    stringToDate."""
    t = trim_all(s)
    matched = pc.match_substring_regex(t, "(?s)" + _DATE)
    _invalid(s, matched, pa.date32())
    parts = pc.extract_regex(pc.if_else(matched, t, pa.scalar(None, pa.string())), "(?s)" + _DATE)
    sign = np.where(
        np.asarray(pc.fill_null(pc.equal(pc.struct_field(parts, "sign"), "-"), False)), -1, 1
    )
    y = sign * _ints(parts, "y", 1970)
    m, d = _ints(parts, "m", 1), _ints(parts, "d", 1)
    valid = valid_mask(t)
    days = days_from_civil(y, m, d)
    ok = _valid_date(y, m, d) & (np.abs(days) < 2**31)
    _invalid(s, pa.array(ok | ~valid), pa.date32())
    return from_numpy(np.where(ok, days, 0).astype(np.int32), valid, pa.int32()).cast(pa.date32())


_TIMESTAMP = (
    r"^(?P<sign>[+-]?)(?P<y>[0-9]{4,6})(?:-(?P<mo>[0-9]{1,2})(?:-(?P<d>[0-9]{1,2})"
    r"(?:[ T](?P<h>[0-9]{1,2})(?::(?P<mi>[0-9]{1,2})(?::(?P<s>[0-9]{1,2})"
    r"(?:\.(?P<f>[0-9]*))?(?P<z>[^0-9.].*|\..*)?)?)?)?)?)?$"
)
# Zone offsets as Java's ZoneId.of takes them, after Spark's two rewrites of (+|-)h:mm and
# (+|-)hh:m.
_ZONE = (
    r"^(?:Z|UTC|GMT|UT|(?P<p>UTC|GMT|UT)?(?P<sign>[+-])(?:(?P<h1>[0-9]{1,2})|(?P<h2>[0-9]{2}):?"
    r"(?P<m2>[0-9]{2})|(?P<h3>[0-9]{2}):(?P<m3>[0-9]{2}):(?P<s3>[0-9]{2})|(?P<h4>[0-9]{2})"
    r"(?P<m4>[0-9]{2})(?P<s4>[0-9]{2})))$"
)
_MAX_DAYS = 106751990  # days whose every microsecond fits a long
_SPACE_CHARS = "".join(chr(c) for c in range(0x21))


def _zone_offsets(zone: pa.Array) -> np.ndarray:
    """Seconds east of UTC of the zone suffixes (empty: UTC); EvaluationError for zones
    Java would reject or that are not supported here."""
    z = pc.utf8_trim(pc.fill_null(zone, ""), _SPACE_CHARS)
    z = pc.replace_substring_regex(z, r"([+-])([0-9]):", r"\1" + "0" + r"\2:", max_replacements=1)
    z = pc.replace_substring_regex(
        z, r"([+-])([0-9][0-9]):([0-9])$", r"\1\2:0\3", max_replacements=1
    )
    empty = pc.equal(z, "")
    ok = pc.or_(empty, pc.match_substring_regex(z, _ZONE))
    if not pc.all(ok).as_py():
        bad = z.filter(pc.invert(ok))[0].as_py()
        raise EvaluationError(f"time zone {bad!r} in a timestamp string is not supported")
    parts = pc.extract_regex(pc.if_else(empty, "Z", z), _ZONE)

    def field(*names: str) -> np.ndarray:
        out = np.zeros(len(z), dtype=np.int64)
        for n in names:
            out = out + _ints(parts, n, 0)
        return out

    hours, minutes, seconds = (
        field("h1", "h2", "h3", "h4"),
        field("m2", "m3", "m4"),
        field("s3", "s4"),
    )
    sign = np.where(
        np.asarray(pc.fill_null(pc.equal(pc.struct_field(parts, "sign"), "-"), False)), -1, 1
    )
    total = hours * 3600 + minutes * 60 + seconds
    if np.any((hours > 18) | (minutes > 59) | (seconds > 59) | (total > 18 * 3600)):
        raise EvaluationError("invalid time zone offset in a timestamp string")
    return np.asarray(sign * total, dtype=np.int64)


def to_timestamp(s: pa.Array) -> pa.Array:
    """Spark's parseTimestampString: a date as for dates (4 to 6 year digits), then
    optionally ` `/`T` and [h]h[:[m]m[:[s]s[.fraction][zone]]] (fraction digits past six
    dropped); the zone shifts the local time to UTC."""
    t = trim_all(s)
    time_only = pc.match_substring_regex(t, r"^(T|[0-9]{1,2}:)")
    if nonnull_any(time_only):
        raise EvaluationError("time-only timestamp strings are not supported in cast")
    matched = pc.match_substring_regex(t, "(?s)" + _TIMESTAMP)
    _invalid(s, matched, TIMESTAMP)
    parts = pc.extract_regex(
        pc.if_else(matched, t, pa.scalar(None, pa.string())), "(?s)" + _TIMESTAMP
    )
    sign = np.where(
        np.asarray(pc.fill_null(pc.equal(pc.struct_field(parts, "sign"), "-"), False)), -1, 1
    )
    y = sign * _ints(parts, "y", 1970)
    mo, d = _ints(parts, "mo", 1), _ints(parts, "d", 1)
    h, mi, sec = _ints(parts, "h", 0), _ints(parts, "mi", 0), _ints(parts, "s", 0)
    frac = pc.utf8_rpad(pc.utf8_slice_codeunits(pc.struct_field(parts, "f"), 0, 6), 6, "0")
    micros_frac = np.asarray(pc.fill_null(frac, "0").cast(pa.int64()).to_numpy(), dtype=np.int64)
    valid = valid_mask(t)
    offset = _zone_offsets(pc.struct_field(parts, "z"))
    days = days_from_civil(y, mo, d)
    ok = _valid_date(y, mo, d) & (h <= 23) & (mi <= 59) & (sec <= 59) & (np.abs(days) <= _MAX_DAYS)
    _invalid(s, pa.array(ok | ~valid), TIMESTAMP)
    seconds = np.where(ok, days, 0) * 86400 + h * 3600 + mi * 60 + sec - offset
    micros = seconds * 1_000_000 + micros_frac
    return from_numpy(micros, valid, pa.int64()).cast(TIMESTAMP)


__all__ = [
    "days_from_civil",
    "to_boolean",
    "to_date",
    "to_decimal",
    "to_floating",
    "to_integral",
    "to_timestamp",
    "trim_all",
]
