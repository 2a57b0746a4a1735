"""Window table functions in FROM, as Flink and Feldera write them:

    TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND))
    TABLE(HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND))  -- slide, size
    TABLE(SESSION(TABLE t PARTITION BY k, DESCRIPTOR(ts), INTERVAL '10' SECOND))  -- gap

Each gives t's columns plus `window_start` and `window_end` (UTC timestamps), a row once per
window its `ts` falls in (HOP: size / slide windows); rows without a `ts` are left out.
TUMBLE's and HOP's windows are computed per row (`plan.Windows`, linear); SESSION's depend on
the partition's other rows (`plan.Sessions`, stateful). Windowed rows feed any query:
aggregates grouped by the window, joins of them (Nexmark q5, q7, q8, q11).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from .errors import Problem, SqlError
from .intervals import IntervalError, duration_us
from .parse import PARTITION_CALL, SESSION_CALL, Script


def window_call(item: exp.Expr) -> exp.Anonymous | None:
    """The TUMBLE, HOP or SESSION call of a FROM item `TABLE(TUMBLE(...))`, or None."""
    outer = item.this if isinstance(item, exp.Table) else None
    if not isinstance(outer, exp.Anonymous) or str(outer.this).upper() != "TABLE":
        return None
    inner = outer.expressions[0] if len(outer.expressions) == 1 else None
    kinds = ("TUMBLE", "HOP", SESSION_CALL)
    if isinstance(inner, exp.Anonymous) and str(inner.this).upper() in kinds:
        return inner
    return None


def is_session(call: exp.Anonymous) -> bool:
    return str(call.this).upper() == SESSION_CALL


def _error(script: Script, node: exp.Expr, message: str) -> SqlError:
    line, col = script.at(node)
    return SqlError([Problem(message, line, col)])


def interval_us(script: Script, node: exp.Expr) -> int:
    """A window's `INTERVAL 'n' UNIT` (of fixed length, positive) in microseconds."""
    try:
        return duration_us(node)
    except IntervalError as e:
        raise _error(script, node, str(e)) from None


def session_args(
    script: Script, call: exp.Anonymous
) -> tuple[exp.Expr, list[exp.Column], str, int]:
    """(the table argument, the partition columns, the time column's name, the gap) of a
    SESSION call."""
    args = list(call.expressions)
    partition: list[exp.Column] = []
    second = args[1] if len(args) > 1 else None
    if isinstance(second, exp.Anonymous) and str(second.this).upper() == PARTITION_CALL:
        partition = list(args.pop(1).expressions)
    usage = "SESSION(TABLE t [PARTITION BY k | PARTITION BY (k1, k2)], DESCRIPTOR(ts), gap)"
    if len(args) != 3:
        raise _error(script, call, f"SESSION takes a table, a time column and a gap: {usage}")
    for p in partition:
        if not isinstance(p, exp.Column) or p.table:
            raise _error(script, p, "SESSION partitions by the table's columns, by name")
    return args[0], partition, _descriptor(script, "SESSION", args[1]), interval_us(script, args[2])


def _descriptor(script: Script, kind: str, descriptor: exp.Expr) -> str:
    if not (
        isinstance(descriptor, exp.Anonymous)
        and str(descriptor.this).upper() == "DESCRIPTOR"
        and len(descriptor.expressions) == 1
        and isinstance(descriptor.expressions[0], exp.Column)
    ):
        raise _error(script, descriptor, f"{kind}: the time column is given as DESCRIPTOR(col)")
    return str(descriptor.expressions[0].name).lower()


def window_args(script: Script, call: exp.Anonymous) -> tuple[exp.Expr, str, int, int]:
    """(the table argument, the time column's name, size, slide) of a TUMBLE or HOP call."""
    kind = str(call.this).upper()
    args = list(call.expressions)
    want = 3 if kind == "TUMBLE" else 4
    if len(args) != want:
        usage = (
            "TUMBLE(TABLE t, DESCRIPTOR(ts), size)"
            if kind == "TUMBLE"
            else "HOP(TABLE t, DESCRIPTOR(ts), slide, size)"
        )
        raise _error(script, call, f"{kind} takes {want} arguments: {usage}")
    table, time = args[0], _descriptor(script, kind, args[1])
    if kind == "TUMBLE":
        size = slide = interval_us(script, args[2])
    else:
        slide, size = interval_us(script, args[2]), interval_us(script, args[3])
        if size % slide:
            raise _error(script, call, "HOP: the size must be a whole multiple of the slide")
    return table, time, size, slide


def assign(table: pa.Table, time: str, size_us: int, slide_us: int) -> tuple[pa.Table, pa.Array]:
    """`table`'s rows with a time, each repeated once per window (size / slide times), and
    the windows' starts (microseconds since the epoch), aligned with them."""
    col = table.column(time)
    valid = pc.is_valid(col)
    if not pc.all(valid).as_py():
        table = table.filter(valid)
        col = table.column(time)
    ts = pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False)
    copies = size_us // slide_us
    last = np.floor_divide(ts, slide_us) * slide_us  # the latest window holding each row
    rows = np.repeat(np.arange(len(ts)), copies)
    starts = np.repeat(last, copies) - np.tile(np.arange(copies) * slide_us, len(ts))
    return table.take(pa.array(rows)), pa.array(starts, pa.int64())


__all__ = ["assign", "interval_us", "is_session", "session_args", "window_args", "window_call"]
