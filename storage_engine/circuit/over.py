"""Aggregates over a window of rows (SQL's `AGG(x) OVER (PARTITION BY p ORDER BY o ROWS
BETWEEN n PRECEDING AND CURRENT ROW)`, or `UNBOUNDED PRECEDING`): every input row comes out
with the aggregates of its partition's rows from `n` rows before it (all, if unbounded) to
itself, in the order; correct under retractions.

State: `<id>.rows`, every live input row keyed by its partition columns (a multiset); each
touched partition's rows are computed before and after the delta (`PartitionedOperator`),
so the rows whose aggregates changed (those within `n` rows after an inserted or deleted
one) are retracted and emitted again. Ties in the order are broken by the other columns,
ascending, so each frame is a function of the partition's rows alone (SQL leaves it
unspecified). NULLs come first in ascending order and last in descending order, as in
Spark; aggregates skip NULL values, and one over no value is NULL (count: 0).

Each aggregate has its own frame (`preceding`, one for all or one per aggregate), all over
one ordering of the partition: an output row's values are its own position's, also among
rows equal in every column (as Spark's one Window operator per PARTITION BY and ORDER BY;
operators chained would order the copies by the earlier one's values). An operator whose
aggregates share a frame describes it as one `preceding`, as before frames per aggregate,
so its fingerprint and checkpoints are those of then.

Besides aggregates over ROWS frames: RANGE frames (`ranges`, frames ending at the current
row's last peer) and the window functions ROW_NUMBER, RANK, DENSE_RANK, LAG and LEAD
(`WindowCall`), all over the same ordering (`window_calls` has their semantics). An
operator without them describes as before, so its fingerprint is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..schema import WEIGHT
from .aggregate import Aggregate
from .decimals import average, avg_type, from_unscaled, sum_type, unscaled
from .operator import CircuitError, empty_delta, require_columns
from .partitioned import PartitionedOperator
from .window_calls import RANKS, Places, WindowCall, call_type, range_ok, reduce_frames


class RowsOver(PartitionedOperator):
    def __init__(
        self,
        op_id: str,
        input_schema: pa.Schema,
        partition_by: Sequence[str],
        order_by: Sequence[tuple[str, bool]],
        preceding: int | Sequence[int | None] | None,
        aggregates: Sequence[Aggregate | WindowCall],
        input: str = "source",
        ranges: Sequence[bool] = (),
    ) -> None:
        """`order_by`: (column, descending) pairs; `preceding`: the frame's rows before
        the current one (None: unbounded), one for all aggregates or one per aggregate;
        `aggregates`: output columns, after the input's (`WindowCall`s ignore their
        frame). `ranges`: per aggregate, whether its frame is RANGE (`preceding` then in
        the single order column's units; `window_calls`); empty: all ROWS. All aggregates
        are computed over one ordering of each partition, so an output row's values are
        all its own row's even among rows equal in every column."""
        frames = (
            list(preceding) if isinstance(preceding, Sequence) else [preceding] * len(aggregates)
        )
        if len(frames) != len(aggregates) or len(ranges) not in (0, len(aggregates)):
            raise CircuitError(f"operator {op_id!r}: one frame per aggregate")
        if any(p is not None and p < 0 for p in frames):
            raise CircuitError(f"operator {op_id!r}: the frame cannot end before it starts")
        require_columns(op_id, input_schema, [c for c, _ in order_by], "order columns")
        offsets = [p is not None and r for p, r in zip(frames, ranges, strict=False)]
        if any(offsets) and not (
            len(order_by) == 1 and range_ok(input_schema.field(order_by[0][0]).type)
        ):
            raise CircuitError(
                f"operator {op_id!r}: a RANGE frame with an offset orders by one numeric "
                "or temporal column"
            )
        fields = []
        for a in aggregates:
            if a.name in input_schema.names:
                raise CircuitError(f"operator {op_id!r}: {a.name!r} is an input column")
            fields.append(pa.field(a.name, _type(op_id, input_schema, a)))
        super().__init__(
            op_id, input_schema, partition_by, pa.schema([*input_schema, *fields]), input
        )
        self.order_by, self.frames = list(order_by), frames
        # One frame for all (always so before per-aggregate frames): described as a
        # single `preceding`, so such an operator's fingerprint is what it always was.
        self.preceding: int | list[int | None] | None = (
            frames[0] if len(set(frames)) == 1 else frames
        )
        self.aggregates = list(aggregates)
        self.ranges = list(ranges) if any(ranges) else [False] * len(aggregates)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "rows_over",
            "id": self.id,
            "input": self.inputs[0],
            "columns": [(f.name, str(f.type)) for f in self.input_schema],
            "partition_by": self.partition_by,
            "order_by": self.order_by,
            "preceding": self.preceding,
            "aggregates": [
                a.describe() if isinstance(a, WindowCall) else (a.name, a.func, a.column)
                for a in self.aggregates
            ],
        }
        if any(self.ranges):  # only then: operators of ROWS frames describe as they did
            out["ranges"] = self.ranges
        return out

    def _result(self, rows: pa.Table) -> pa.Table:
        """Every live row (once per unit of its weight) with its frame's aggregates."""
        ordered = self._ordered(rows, self.order_by)
        if ordered is None:
            return empty_delta(self._out)
        rows, starts = ordered
        by_frame: dict[tuple[int | None, bool], _Frames] = {}
        out = rows.select(self.input_schema.names)
        added = list(self._out)[len(self.input_schema) :]
        places: Places | None = None
        if any(self.ranges) or any(isinstance(a, WindowCall) for a in self.aggregates):
            places = Places(rows, starts, [c for c, _ in self.order_by])
        for a, f, p, r in zip(self.aggregates, added, self.frames, self.ranges, strict=True):
            if isinstance(a, WindowCall):
                assert places is not None
                out = out.append_column(f, places.call(a, rows, f.type))
                continue
            if (p, r) not in by_frame:
                if r:
                    assert places is not None
                    (column, desc), *_ = self.order_by if p is not None else [("", False)]
                    lo = places.range_lo(rows, column, desc, p)
                    by_frame[p, r] = _Frames(starts, rows.num_rows, p, (lo, places.peer_last))
                else:
                    by_frame[p, r] = _Frames(starts, rows.num_rows, p)
            frames = by_frame[p, r]
            col = None if a.column is None else rows.column(a.column)
            if col is not None and pa.types.is_decimal(col.type) and a.func != "count":
                what = f"operator {self.id!r}: {a.func} of column {a.column!r}"
                out = out.append_column(f, frames.decimal(a.func, col, f.type, what))
            else:
                out = out.append_column(f, frames.aggregate(a.func, col, f.type))
        return out.append_column(WEIGHT, pa.array(np.ones(out.num_rows, np.int64)))


class _Frames:
    """Row i's frame in rows sorted by partition: positions lo[i] to i (ROWS), or to the
    given bounds (a RANGE frame's: `window_calls`)."""

    def __init__(
        self,
        starts: np.ndarray[Any, Any],
        n: int,
        preceding: int | None,
        bounds: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None = None,
    ) -> None:
        lengths = np.diff(np.append(starts, n))
        self.starts, self.lengths, self.preceding = starts, lengths, preceding
        self.ranged = bounds is not None
        if bounds is not None:
            self.lo, self.at = bounds  # `at`: the frame's last row
            return
        first = np.repeat(starts, lengths)
        at = np.arange(n)
        self.lo = first if preceding is None else np.maximum(first, at - preceding)
        self.at = at

    def _window_sum(self, values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Each frame's sum of integers `values` (exact: int64 sums wrap in between, not in
        the end)."""
        prefix = np.concatenate([np.zeros(1, np.int64), np.cumsum(values)])
        return prefix[self.at + 1] - prefix[self.lo]  # type: ignore[no-any-return]

    def aggregate(self, func: str, col: pa.ChunkedArray | None, t: pa.DataType) -> pa.Array:
        if col is None:  # count(*)
            return pa.array(self.at - self.lo + 1, pa.int64())
        valid = pc.is_valid(col).to_numpy(zero_copy_only=False)
        counts = self._window_sum(valid.astype(np.int64))
        if func == "count":
            return pa.array(counts, pa.int64())
        empty = counts == 0
        if func in ("sum", "avg"):
            if pa.types.is_floating(col.type):
                sums = self._each(_numbers(col, 0.0, np.float64), 0.0, np.add)
            else:
                sums = self._window_sum(_numbers(col, 0, np.int64))
            result = sums / np.maximum(counts, 1) if func == "avg" else sums
            return pa.array(result, t, mask=empty)
        storage = _storage(col.type)
        fill: Any
        if pa.types.is_floating(storage):
            wide, fill = pa.float64(), np.inf if func == "min" else -np.inf
        else:
            bounds = np.iinfo(np.int64)
            wide, fill = pa.int64(), bounds.max if func == "min" else bounds.min
        values = _numbers(col.cast(storage).cast(wide), fill, wide.to_pandas_dtype())
        extremes = self._each(values, fill, np.minimum if func == "min" else np.maximum)
        return pc.cast(pa.array(extremes, mask=empty), storage, safe=False).view(t)

    def decimal(self, func: str, col: pa.ChunkedArray, t: pa.DataType, what: str) -> pa.Array:
        """sum, avg, min or max of a decimal column per frame, exact: on the unscaled
        integers (Python's, unbounded), then checked against `t` (`decimals`)."""
        valid = pc.is_valid(col).to_numpy(zero_copy_only=False)
        empty = self._window_sum(valid.astype(np.int64)) == 0
        values = unscaled(col)
        if func in ("sum", "avg"):
            prefix = np.concatenate([np.zeros(1, dtype=object), np.cumsum(values)])
            sums = prefix[self.at + 1] - prefix[self.lo]
            if func == "sum":
                return from_unscaled(sums, empty, t, what)
            counts = self._window_sum(valid.astype(np.int64))
            return average(sums, counts, col.type.scale, t, what)
        bound = 10**t.precision  # beyond every value: what a NULL compares as
        fill = bound if func == "min" else -bound
        values = np.where(valid, values, fill)
        extremes = self._each(values, fill, np.minimum if func == "min" else np.maximum)
        return from_unscaled(extremes, empty, t, what)

    def _each(self, values: np.ndarray[Any, Any], fill: Any, op: np.ufunc) -> np.ndarray[Any, Any]:
        """Each frame's `op`-reduction of `values`, partition by partition, so that a row's
        result depends on its frame's values alone, bit for bit (a floating-point sum over
        all the rows sorted would also depend on the other partitions of the step)."""
        if self.ranged:  # frames of any length: each reduced on its own
            return reduce_frames(values, self.lo, self.at, op)
        out = np.empty_like(values)
        for s, n in zip(self.starts, self.lengths, strict=True):
            part = values[s : s + n]
            if self.preceding is None:
                out[s : s + n] = op.accumulate(part)
                continue
            width = min(self.preceding + 1, n)
            padded = np.concatenate([np.full(width - 1, fill, values.dtype), part])
            windows = np.lib.stride_tricks.sliding_window_view(padded, width)
            out[s : s + n] = op.reduce(windows, axis=1)
        return out


def _numbers(col: pa.ChunkedArray, fill: Any, dtype: Any) -> np.ndarray[Any, Any]:
    """The column's values as `dtype`, NULLs as `fill`."""
    filled = pc.fill_null(col, pa.scalar(fill, col.type)) if col.null_count else col
    return np.asarray(filled.to_numpy(zero_copy_only=False), dtype)


def _storage(t: pa.DataType) -> pa.DataType:
    """The numbers a temporal type is stored as (int64 or int32); others as they are."""
    if pa.types.is_timestamp(t) or pa.types.is_duration(t) or pa.types.is_date64(t):
        return pa.int64()
    if pa.types.is_date32(t):
        return pa.int32()
    return t


def _type(op_id: str, schema: pa.Schema, a: Aggregate | WindowCall) -> pa.DataType:
    if isinstance(a, WindowCall):
        if a.func in RANKS:
            return call_type(schema, a)
        require_columns(op_id, schema, [c for c in (a.column, a.default) if c], "columns")
        if a.column is None:
            raise CircuitError(f"operator {op_id!r}: {a.func} needs a column")
        t = call_type(schema, a)
        if a.default is not None and schema.field(a.default).type != t:
            raise CircuitError(f"operator {op_id!r}: {a.func}'s default is not of type {t}")
        return t
    if a.func == "count":
        return pa.int64()
    if a.column is None:
        raise CircuitError(f"operator {op_id!r}: {a.func} needs a column")
    require_columns(op_id, schema, [a.column], "aggregated columns")
    t = schema.field(a.column).type
    numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
    if a.func == "avg" and numeric:
        return avg_type(t)
    if a.func == "sum" and numeric:
        return sum_type(t)
    if a.func in ("min", "max") and (numeric or _storage(t) != t):
        return t
    raise CircuitError(
        f"operator {op_id!r}: {a.func} over a window of rows of {t} is not supported"
    )


__all__ = ["RowsOver"]
