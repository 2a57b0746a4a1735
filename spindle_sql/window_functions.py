"""What one window item of a SELECT asks of the engine's `RowsOver` (`ranking.over_rows`
groups them by window): the ranking and offset functions (`call`) and an aggregate's frame
(`frame`), as Spark reads them.

- `ROW_NUMBER()`, `RANK()`, `DENSE_RANK()` (int, as Spark's) and `LAG(x [, n [, d]])`,
  `LEAD(...)` (x's type; n an integer literal, 1 if absent, negative looking the other
  way; d cast to x's type, NULL if absent): ORDER BY is required and no frame may be
  written (Spark's own frames for them are implied).
- An aggregate's frame: `ROWS BETWEEN n PRECEDING (or UNBOUNDED PRECEDING, or CURRENT
  ROW) AND CURRENT ROW`; `RANGE` with the same bounds, where n is an integer literal over
  an integer or floating order column, an INTERVAL of fixed length over a timestamp (days
  over a date); no frame is RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW (with peers)
  with ORDER BY, the whole partition without. Frames ending after the current row are
  refused: a row's value would depend on rows that have not arrived.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from sqlglot import exp

from .compile import Compiler, key
from .errors import SqlError
from .expr import Cast, Expr
from .functions.base import FunctionTypeError, common_type
from .intervals import IntervalError, interval
from .plan import AggCall

FUNCS: dict[type[exp.Expr], str] = {
    exp.RowNumber: "row_number",
    exp.Rank: "rank",
    exp.DenseRank: "dense_rank",
    exp.Lag: "lag",
    exp.Lead: "lead",
}
Error = Callable[[exp.Expr, str], SqlError]
_ROWS = "ROWS or RANGE BETWEEN n PRECEDING (or UNBOUNDED PRECEDING) AND CURRENT ROW"


def is_function(window: exp.Window) -> bool:
    return type(window.this) in FUNCS


def call(
    window: exp.Window, compiler: Compiler, name: str, error: Error
) -> tuple[AggCall, Expr | None, Expr | None]:
    """The window function's call (output column `name`), its argument and its default
    (cast to the argument's type), for the caller to compute into columns."""
    node = window.this
    func = FUNCS[type(node)]
    text = key(node).upper()
    if window.args.get("spec") is not None:
        raise error(window, f"{text} takes no frame (its rows are implied)")
    order = window.args.get("order")
    if order is None or not order.expressions:
        raise error(window, f"{text} OVER (...) needs ORDER BY")
    if func not in ("lag", "lead"):
        return AggCall(name, func, None, pa.int32()), None, None  # type: ignore[arg-type]
    arg = compiler(node.this)
    offset = 1
    if node.args.get("offset") is not None:
        found = _integer(node.args["offset"])
        if found is None:
            raise error(window, f"{text}: the offset must be an integer literal")
        offset = found
    default: Expr | None = None
    if node.args.get("default") is not None:
        default = compiler(node.args["default"])
        if default.type != arg.type:
            try:
                fits = pa.types.is_null(default.type) or common_type([arg.type, default.type]) == (
                    arg.type
                )
            except FunctionTypeError:
                fits = False
            if not fits:
                raise error(window, f"{text}: the default must be of type {arg.type}")
            default = Cast(default, arg.type)
    return (
        AggCall(name, func, None, arg.type, offset=offset),  # type: ignore[arg-type]
        arg,
        default,
    )


def _integer(node: exp.Expr) -> int | None:
    negative = isinstance(node, exp.Neg)
    if negative:
        node = node.this
    if isinstance(node, exp.Literal) and not node.is_string and str(node.this).isdigit():
        return -int(str(node.this)) if negative else int(str(node.this))
    return None


def frame(window: exp.Window, order: list[Expr], error: Error) -> tuple[int | None, bool]:
    """An aggregate's frame: the rows (or, for RANGE, the order column's units) before the
    current row it starts at (None: unbounded), and whether it is RANGE."""
    spec = window.args.get("spec")
    if spec is None:
        return None, True  # SQL's default frame: up to the last peer (all rows without order)
    if not order:
        raise error(window, "a frame needs ORDER BY")
    kind = str(spec.args.get("kind") or "").upper()
    if kind not in ("ROWS", "RANGE"):
        raise error(window, f"the frame must be {_ROWS}")
    start, side = spec.args.get("start"), str(spec.args.get("start_side") or "").upper()
    end = spec.args.get("end")
    if end is not None and str(end).upper() != "CURRENT ROW":
        raise error(window, f"the frame must end at the current row: {_ROWS}")
    ranged = kind == "RANGE"
    if isinstance(start, str) and start.upper() == "UNBOUNDED" and side == "PRECEDING":
        return None, ranged
    if not ranged:
        if isinstance(start, str) and start.upper() == "CURRENT ROW":
            return 0, False
        n = _integer(start) if isinstance(start, exp.Expr) and side == "PRECEDING" else None
        if n is None or n < 0:
            raise error(window, f"the frame must start n rows before the current row: {_ROWS}")
        return n, False
    if len(order) != 1:
        raise error(window, "a RANGE frame with an offset needs ORDER BY one column")
    t = order[0].type
    if isinstance(start, str) and start.upper() == "CURRENT ROW":
        offset: int | None = 0
    elif side != "PRECEDING" or not isinstance(start, exp.Expr):
        offset = None
    elif pa.types.is_timestamp(t) or pa.types.is_date(t):
        offset = _interval(start, t, window, error)
    else:
        offset = _integer(start)
    if pa.types.is_decimal(t) or not (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_date(t)
    ):
        raise error(
            window,
            f"a RANGE frame with an offset orders by an integer, floating, date or timestamp "
            f"column, not {t}",
        )
    if offset is None or offset < 0:
        what = "an INTERVAL" if pa.types.is_timestamp(t) or pa.types.is_date(t) else "n"
        raise error(window, f"the RANGE frame must start {what} PRECEDING the current row")
    return offset, True


def _interval(node: exp.Expr, t: pa.DataType, window: exp.Window, error: Error) -> int:
    """A RANGE offset over a timestamp in microseconds, over a date in days."""
    try:
        value = interval(node)
    except IntervalError as e:
        raise error(window, f"the RANGE frame's offset: {e}") from None
    if value.kind == "months":
        raise error(window, "a RANGE frame's INTERVAL must have a fixed length, not months")
    if pa.types.is_date(t):
        if value.kind != "days":
            raise error(window, "a RANGE frame over a date needs an INTERVAL of days")
        return value.days
    return value.micros


__all__ = ["FUNCS", "call", "frame", "is_function"]
