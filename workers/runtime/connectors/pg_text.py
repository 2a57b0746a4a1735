"""PostgreSQL's text output of values (what pgoutput sends, and `col::text` selects) as a
table's Arrow columns. A value that does not convert makes its row a dead letter."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pyarrow as pa

from pipeline_spec.formats.decimals import NotDecimal, spark_decimal

_BOOLS = {"t": True, "f": False, "true": True, "false": False}
_SHORT_OFFSET = re.compile(r"([+-]\d\d)$")  # `+00`: PostgreSQL's offset without minutes


def convert(texts: list[str | None], t: pa.DataType) -> tuple[pa.Array, set[int]]:
    """`texts` as an array of type `t`, and the indexes of those that do not convert (NULL
    in the array)."""
    if pa.types.is_string(t):
        return pa.array(texts, t), set()
    if not (pa.types.is_boolean(t) or pa.types.is_timestamp(t) or pa.types.is_decimal(t)):
        try:
            return pa.array(texts, pa.string()).cast(t), set()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # one at a time, below, to find those that do not convert
    out: list[object] = []
    bad: set[int] = set()
    for i, text in enumerate(texts):
        try:
            out.append(None if text is None else _one(text, t))
        except (ValueError, NotDecimal, pa.ArrowInvalid, pa.ArrowNotImplementedError):
            out.append(None)
            bad.add(i)
    return pa.array(out, t), bad


def _one(text: str, t: pa.DataType) -> object:
    if pa.types.is_boolean(t):
        return _BOOLS[text.lower()] if text.lower() in _BOOLS else _raise(text)
    if isinstance(t, pa.Decimal128Type):
        return spark_decimal(text, t)
    if pa.types.is_timestamp(t):
        stamp = datetime.fromisoformat(_SHORT_OFFSET.sub(r"\1:00", text))
        return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)
    return pa.scalar(text, pa.string()).cast(t).as_py()


def _raise(text: str) -> object:
    raise ValueError(f"{text!r} is not a boolean")


__all__ = ["convert"]
