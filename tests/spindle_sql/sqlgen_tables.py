"""The differential test's tables (tests/spindle_sql/sqlgen.py): three small ones sharing column
names (for USING and correlations), every type the language has, and their rows: few
distinct values, so that joins match and groups gather, NULLs, duplicate rows, and -0.0
beside 0.0."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa

from .sqlgen_types import BIGINT, DATE, DOUBLE, INT, STRING, STRINGS, TS, Dec, Type

TABLES: dict[str, pa.Schema] = {
    "t": pa.schema(
        [
            ("a", pa.int32()),
            ("b", pa.int64()),
            ("x", pa.float64()),
            ("m", pa.decimal128(9, 2)),
            ("s", pa.string()),
            ("d", pa.date32()),
            ("ts", pa.timestamp("us", tz="UTC")),
        ]
    ),
    "u": pa.schema(
        [
            ("a", pa.int32()),
            ("c", pa.int64()),
            ("y", pa.float64()),
            ("n", pa.decimal128(7, 3)),
            ("s", pa.string()),
            ("d", pa.date32()),
        ]
    ),
    "w": pa.schema([("a", pa.int32()), ("e", pa.int64()), ("s", pa.string())]),
}
_TYPES: dict[str, Type] = {"int32": INT, "int64": BIGINT, "double": DOUBLE, "string": STRING}
_TYPES |= {"date32[day]": DATE, "timestamp[us, tz=UTC]": TS}
DOUBLES = [-0.0, 0.0, 0.25, -1.5, 2.5, 3.75, 10.0, -7.25, 100.5]
D0 = date(2024, 1, 28)
T0 = datetime(2024, 2, 27, 22, tzinfo=UTC)


def column_type(f: pa.Field) -> Type:
    if pa.types.is_decimal(f.type):
        return Dec(f.type.precision, f.type.scale)
    return _TYPES[str(f.type)]


def _value(rng: random.Random, f: pa.Field) -> Any:
    if rng.random() < 0.15:
        return None
    t = column_type(f)
    if isinstance(t, Dec):
        return Decimal(rng.randint(-500, 5000)).scaleb(-t.s)
    return {
        INT: lambda: rng.randint(-2, 5),
        BIGINT: lambda: rng.randint(-20, 40),
        DOUBLE: lambda: rng.choice(DOUBLES),
        STRING: lambda: rng.choice(STRINGS),
        DATE: lambda: D0 + timedelta(days=rng.randint(0, 40)),
        TS: lambda: T0 + timedelta(minutes=rng.randint(0, 3000), microseconds=rng.randint(0, 2)),
    }[t]()


def rows(
    rng: random.Random, table: str, n: int, seen: list[tuple[Any, ...]]
) -> list[tuple[Any, ...]]:
    """`n` new rows of `table`, a quarter of them again rows drawn before (in `seen`)."""
    out = []
    for _ in range(n):
        if seen and rng.random() < 0.25:
            out.append(rng.choice(seen))
        else:
            out.append(tuple(_value(rng, f) for f in TABLES[table]))
            seen.append(out[-1])
    return out
