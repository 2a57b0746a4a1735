"""Decimal values from text, as Spark 4's JSON and CSV readers make them (measured on PySpark
4.0.5: docs/connectors.md, "Decimals"), for the sources that parse without Spark.

Spark reads a decimal from text (a CSV field, a JSON string, or a JSON number's own text,
never through a double) by removing every comma, reading the rest as Java's BigDecimal
does (an optional sign, digits with at most one point, an optional exponent; any Unicode
decimal digits; no blanks), and rounding HALF_UP to the column's scale. A value whose
rounded digits do not fit the precision does not convert: Spark's reader makes the record
bad. So `1.005` is 1.01 in decimal(10, 2), `"1,000.5"` is 1000.50, `1e-3` is 0.00, and
`99999999.995` does not fit decimal(10, 2).

Arrow's own decimal parsing is not used: it takes strings Java refuses (`1e+-3`) and wraps
values past its precision silently (`2E48` as decimal256(76, 38)).
"""

from __future__ import annotations

import decimal
import json
import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa

# Python's \d is Unicode's decimal digits, as Java's Character.isDigit.
_NUMBER = re.compile(r"[+-]?(?:(\d+)\.?(\d*)|\.(\d+))(?:[eE]([+-]?\d+))?")
_INT32 = 2**31
_EXACT = decimal.Context(
    prec=100, rounding=decimal.ROUND_HALF_UP, Emin=decimal.MIN_EMIN, Emax=decimal.MAX_EMAX
)


class NotDecimal(ValueError):
    """A value that does not convert to the column's decimal type; says why."""


def spark_decimal(text: str, t: pa.Decimal128Type) -> Decimal:
    """`text` as Spark converts it to decimal `t` (see the module's docstring)."""
    s = text.replace(",", "")
    m = _NUMBER.fullmatch(s)
    if m is None:
        raise NotDecimal(f"{_shown(text)} is not a number")
    fraction = m.group(2) or m.group(3) or ""
    exponent = int(m.group(4) or 0)
    # BigDecimal keeps its exponent and scale in 32-bit integers.
    if not (-_INT32 <= exponent < _INT32 and -_INT32 <= len(fraction) - exponent < _INT32):
        raise NotDecimal(f"{_shown(text)} is out of range")
    try:
        q = Decimal(s).quantize(Decimal(1).scaleb(-t.scale), context=_EXACT)
    except decimal.InvalidOperation:  # more digits than the context holds: far too big
        q = None
    if q is None or (q != 0 and q.adjusted() >= t.precision - t.scale):
        raise NotDecimal(
            f"{_shown(text)} does not fit decimal({t.precision},{t.scale}): "
            f"at most {t.precision - t.scale} digits before the point"
        )
    return q


def decimal_array(values: Sequence[Any], t: pa.Decimal128Type) -> tuple[pa.Array, dict[int, str]]:
    """`values` (text, None, or anything else: not a decimal) as an array of `t`, and the
    positions of those that do not convert, with why (NULL in the array)."""
    texts: list[str | None] = []
    bad: dict[int, str] = {}
    for i, v in enumerate(values):
        if v is None:
            texts.append(None)
            continue
        try:
            if not isinstance(v, str):
                raise NotDecimal(f"{_shown(v)} is not a number")
            texts.append(format(spark_decimal(v, t), "f"))
        except NotDecimal as e:
            texts.append(None)
            bad[i] = str(e)
    return pa.array(texts, pa.string()).cast(t), bad


class _Invalid:
    """What a JSON value other than text or null reads as: not a decimal."""

    def __init__(self, shown: str) -> None:
        self.shown = shown

    def __repr__(self) -> str:
        return self.shown


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):  # Arrow's reader refuses a record naming a field twice
        raise ValueError("a field is given twice")
    return out


def _constant(name: str) -> Any:
    return _Invalid(name)  # NaN, Infinity: not a decimal


def json_decimals(
    records: Sequence[bytes | str], columns: dict[str, pa.Decimal128Type]
) -> tuple[dict[str, pa.Array], dict[int, str]]:
    """The decimal `columns` of JSON object records (one object each), as Spark's JSON
    reader converts them: numbers from their text, strings as CSV fields; and the records
    that do not parse or whose value does not convert, with why (their values NULL)."""
    values: dict[str, list[Any]] = {c: [] for c in columns}
    bad: dict[int, str] = {}
    for i, record in enumerate(records):
        try:
            obj = json.loads(
                record,
                parse_float=str,
                parse_int=str,
                parse_constant=_constant,
                object_pairs_hook=_object,
            )
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            bad[i] = f"not a JSON object: {e}"
            obj = {}
        for c in columns:
            v = obj.get(c)
            values[c].append(v if v is None or isinstance(v, str) else _Invalid(_json(v)))
    arrays = {}
    for c, t in columns.items():
        arrays[c], wrong = decimal_array(values[c], t)
        for i, why in wrong.items():
            bad.setdefault(i, f"{c}: {why}")
    return arrays, bad


def _json(v: Any) -> str:
    return v.shown if isinstance(v, _Invalid) else json.dumps(v)


def _shown(v: Any) -> str:
    text = repr(v) if isinstance(v, str) else str(v)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["NotDecimal", "decimal_array", "json_decimals", "spark_decimal"]
