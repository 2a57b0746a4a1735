"""What `RowsOver` computes besides aggregates over ROWS frames, on a partition's rows in
their total order (`PartitionedOperator._ordered`: partition, the ORDER BY columns, then the
other columns):

- `WindowCall`s: ROW_NUMBER, RANK, DENSE_RANK, LAG and LEAD. Peers are the rows equal in
  every ORDER BY column (NULL equal to NULL); RANK is one more than the rows before the
  row's peers (gaps after ties), DENSE_RANK one more than the peer groups before it (no
  gaps), ROW_NUMBER the row's place in the total order (ties broken by the other columns,
  so it is a function of the partition's rows). LAG(x, n, d) is x of the row n places
  before in the total order (LEAD: after), or d's value on the current row where there is
  no such row of the partition (d absent: NULL); a negative n looks the other way.
- RANGE frames (`range_frames`): a row's frame ends at its last peer and starts at the
  partition's first row (unbounded) or at the first row whose single ORDER BY value is
  within `n` of the row's (ascending: >= v - n; descending: <= v + n). NULL order values
  are peers of each other only, so a NULL row's offset frame is its NULL peers, as in
  Spark and DuckDB. `n` is in the order column's stored units (microseconds of a
  timestamp, days of a date).

All of it depends on the partition's rows alone, so `RowsOver`'s recomputation of touched
partitions keeps it exact under retractions. A change in a partition can change every
later row's ROW_NUMBER, RANK and DENSE_RANK (and LAG/LEAD of its neighbours): each step
re-emits those rows, so an unbounded ROW_NUMBER costs up to the partition's size per change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .partitioned import changes

CallFunc = Literal["row_number", "rank", "dense_rank", "lag", "lead"]
RANKS = ("row_number", "rank", "dense_rank")


@dataclass(frozen=True)
class WindowCall:
    """Output column `name`: `func` of the row's place in its partition (ROW_NUMBER, RANK,
    DENSE_RANK), or of column `column` `offset` rows before (LAG) or after (LEAD) it, with
    column `default`'s value where there is none (None: NULL)."""

    name: str
    func: CallFunc
    column: str | None = None
    offset: int = 1
    default: str | None = None

    def describe(self) -> tuple[Any, ...]:
        return (self.name, self.func, self.column, self.offset, self.default)


def peers(rows: pa.Table, starts: np.ndarray[Any, Any], order: list[str]) -> np.ndarray[Any, Any]:
    """Where each peer group starts in `rows` (sorted, partitions at `starts`): a partition
    start, or a change of any ORDER BY column (NULL equal to NULL)."""
    new = changes(rows, order)
    new[starts] = True
    return np.flatnonzero(new).astype(np.int64)


def _spread(group_starts: np.ndarray[Any, Any], n: int) -> np.ndarray[Any, Any]:
    """Per row, the index of the group (of those starting at `group_starts`) it is in."""
    return np.repeat(np.arange(len(group_starts)), np.diff(np.append(group_starts, n)))


class Places:
    """Each row's partition and peer group in rows sorted by `_ordered`."""

    def __init__(self, rows: pa.Table, starts: np.ndarray[Any, Any], order: list[str]) -> None:
        n = rows.num_rows
        self.n, self.at = n, np.arange(n)
        self.part = _spread(starts, n)
        self.first = starts[self.part]  # the row's partition's first row
        ends = np.append(starts[1:], n)
        self.end = ends[self.part]  # one past its last row
        self.peer_starts = peers(rows, starts, order)
        self.peer = _spread(self.peer_starts, n)
        peer_ends = np.append(self.peer_starts[1:], n)
        self.peer_first = self.peer_starts[self.peer]
        self.peer_last = peer_ends[self.peer] - 1

    def call(self, call: WindowCall, rows: pa.Table, t: pa.DataType) -> pa.Array:
        if call.func == "row_number":
            return pa.array(self.at - self.first + 1, t)
        if call.func == "rank":
            return pa.array(self.peer_first - self.first + 1, t)
        if call.func == "dense_rank":
            # Peer groups before the row's, counted from its partition's first group.
            first_group = self.peer[self.first]
            return pa.array(self.peer - first_group + 1, t)
        assert call.column is not None
        shift = call.offset if call.func == "lag" else -call.offset
        source = self.at - shift
        outside = (source < self.first) | (source >= self.end)
        index = pa.array(np.where(outside, 0, source), pa.int64(), mask=outside)
        taken = pc.take(rows.column(call.column), index)
        if call.default is None:
            return taken.combine_chunks().cast(t)
        default = rows.column(call.default)
        return pc.if_else(pa.array(outside), default, taken).combine_chunks().cast(t)

    def range_lo(
        self, rows: pa.Table, column: str, desc: bool, offset: Any
    ) -> np.ndarray[Any, Any]:
        """Each row's first frame row for RANGE BETWEEN `offset` PRECEDING (None:
        UNBOUNDED) AND CURRENT ROW over the single ORDER BY `column`."""
        if offset is None:
            return self.first  # type: ignore[no-any-return]
        col = rows.column(column)
        valid = pc.is_valid(col).to_numpy(zero_copy_only=False)
        values = _stored(col)
        lo = self.peer_first.copy()  # NULL rows: their peers only
        starts = np.unique(self.first)
        for s in starts:
            e = int(self.end[s])
            region = np.flatnonzero(valid[s:e]) + s  # NULLs first ascending, last descending
            if not len(region):
                continue
            v = values[region]
            if desc:  # v descending: the first row with value <= v + offset
                lo[region] = region[0] + np.searchsorted(-v, -(v + offset), "left")
            else:  # ascending: the first row with value >= v - offset
                lo[region] = region[0] + np.searchsorted(v, v - offset, "left")
        return lo  # type: ignore[no-any-return]


def _stored(col: pa.ChunkedArray) -> np.ndarray[Any, Any]:
    """The order column's values as numbers (temporal types as their stored integers),
    NULLs as 0 (never read)."""
    t = col.type
    if pa.types.is_timestamp(t) or pa.types.is_date64(t) or pa.types.is_duration(t):
        col = col.cast(pa.int64())
    elif pa.types.is_date32(t):
        col = col.cast(pa.int32()).cast(pa.int64())
    elif pa.types.is_integer(t):
        col = col.cast(pa.int64())
    else:
        col = col.cast(pa.float64())
    filled = pc.fill_null(col, pa.scalar(0, col.type)) if col.null_count else col
    out: np.ndarray[Any, Any] = np.asarray(filled.to_numpy(zero_copy_only=False))
    return out


def call_type(schema: pa.Schema, call: WindowCall) -> pa.DataType:
    """The output type: int32 for the ranks (Spark's), the column's for LAG and LEAD."""
    if call.func in RANKS:
        return pa.int32()
    assert call.column is not None
    return schema.field(call.column).type


def range_ok(t: pa.DataType) -> bool:
    """Whether a RANGE frame with an offset can order by a column of type `t`."""
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_date(t)
    )


def reduce_frames(
    values: np.ndarray[Any, Any], lo: np.ndarray[Any, Any], hi: np.ndarray[Any, Any], op: np.ufunc
) -> np.ndarray[Any, Any]:
    """Each frame's `op`-reduction of `values[lo:hi + 1]` (frames never empty), left to
    right, so a row's result depends on its frame's values alone."""
    if not len(values):
        return values
    padded = np.append(values, values[:1])  # `hi + 1` may be one past the end
    bounds = np.column_stack([lo, hi + 1]).ravel()
    out: np.ndarray[Any, Any] = op.reduceat(padded, bounds)[::2]
    return out


__all__ = ["RANKS", "CallFunc", "Places", "WindowCall", "call_type", "range_ok", "reduce_frames"]
