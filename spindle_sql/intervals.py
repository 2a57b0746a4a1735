"""INTERVAL literals, as Spark 4 reads them: `INTERVAL '90' DAY`, `INTERVAL 3 DAYS`,
`INTERVAL '1 day'`, `INTERVAL '1.5' SECOND`, `INTERVAL '-3' MONTH`. One unit each.

Spark types an interval by its units, not its value: YEAR and MONTH make a year-month
interval, which a date keeps its type through; WEEK and DAY a day interval, which a date
also keeps (`date '1998-12-01' - INTERVAL '90' DAY` is a date); HOUR down to MICROSECOND a
day-time interval, which turns a date into a timestamp. Window table functions take their
sizes from here too (`windows.py`), in microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Literal

from sqlglot import exp

Kind = Literal["months", "days", "time"]

_MONTHS = {"YEAR": 12, "MONTH": 1}
_DAYS = {"WEEK": 7, "DAY": 1}
_TIME_US = {
    "HOUR": 3_600_000_000,
    "MINUTE": 60_000_000,
    "SECOND": 1_000_000,
    "MILLISECOND": 1_000,
    "MICROSECOND": 1,
}
_DAY_US = 86_400_000_000
UNITS = (*_MONTHS, *_DAYS, *_TIME_US)


class IntervalError(ValueError):
    """Not an interval literal Spindle reads (the message says why)."""


@dataclass(frozen=True)
class Interval:
    """An interval literal's value: `months` for a year-month interval, `micros` for a day
    or day-time one (a day is 86,400 s: Spindle's timestamps are UTC)."""

    kind: Kind
    months: int = 0
    micros: int = 0

    @property
    def days(self) -> int:
        """A day interval's whole days."""
        return self.micros // _DAY_US

    def negated(self) -> Interval:
        return Interval(self.kind, -self.months, -self.micros)


def interval(node: exp.Expr) -> Interval:
    """The value of an `exp.Interval` node; IntervalError naming what is wrong."""
    if not isinstance(node, exp.Interval):
        raise IntervalError("expected an interval such as INTERVAL '10' SECOND")
    unit_node = node.args.get("unit")
    if unit_node is not None and not isinstance(unit_node, exp.Var):
        raise IntervalError(
            f"interval {node.sql(dialect='spark')}: one unit only ({', '.join(UNITS)})"
        )
    unit = str(unit_node.name if unit_node is not None else "").upper()
    text = str(node.this.name if node.this is not None else "").strip()
    if not unit and " " in text:  # INTERVAL '10 seconds'
        text, unit = text.split(None, 1)
        unit = unit.strip().upper()
    unit = unit[:-1] if unit.endswith("S") and unit[:-1] in UNITS else unit
    if unit not in UNITS:
        raise IntervalError(f"interval unit {unit or '?'}: use one of {', '.join(UNITS)}")
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise IntervalError(f"interval {text!r}: not a number") from None
    if not value.is_finite():
        raise IntervalError(f"interval {text!r}: not a number")
    if unit in _MONTHS or unit in _DAYS:
        if value != value.to_integral_value():
            raise IntervalError(f"interval {text!r} {unit}: a whole number is needed")
        if unit in _MONTHS:
            return Interval("months", months=int(value) * _MONTHS[unit])
        return Interval("days", micros=int(value) * _DAYS[unit] * _DAY_US)
    micros = value * _TIME_US[unit]
    if micros != micros.to_integral_value():
        raise IntervalError(f"interval {text!r} {unit}: finer than a microsecond")
    return Interval("time", micros=int(micros))


def duration_us(node: exp.Expr) -> int:
    """A positive interval of fixed length (no months or years) in microseconds: a
    window's size, slide or gap."""
    value = interval(node)
    if value.kind == "months":
        raise IntervalError("a window's interval must have a fixed length: not months or years")
    if value.micros <= 0:
        raise IntervalError("a window's interval must be positive")
    return value.micros


__all__ = ["UNITS", "Interval", "IntervalError", "duration_us", "interval"]
