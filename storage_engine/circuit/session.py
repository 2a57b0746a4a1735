"""Session windows per partition (Flink's `SESSION(TABLE t PARTITION BY k, DESCRIPTOR(ts),
gap)`): a partition's rows, ordered by time, fall in one session while each follows the one
before by less than `gap`; the session is `[first ts, last ts + gap)`. Every row comes out
with its session's bounds, so sessions feed any query (a count per bidder and session:
Nexmark q11).

A row can join two sessions into one, and its retraction can split one, so a session's
bounds depend on all of the partition's rows: they are recomputed for each touched partition
before and after the delta (`PartitionedOperator`), and the rows whose bounds changed are
retracted and emitted again. Rows without a time are left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..schema import WEIGHT
from .operator import CircuitError, empty_delta, require_columns
from .partitioned import PartitionedOperator

_TS = pa.timestamp("us", tz="UTC")


class SessionWindows(PartitionedOperator):
    def __init__(
        self,
        op_id: str,
        input_schema: pa.Schema,
        partition_by: Sequence[str],
        time: str,
        gap_us: int,
        start: str,
        end: str,
        input: str = "source",
    ) -> None:
        """`time`: a timestamp column; `start`, `end`: the output columns of the bounds."""
        require_columns(op_id, input_schema, [time], "time column")
        if not pa.types.is_timestamp(input_schema.field(time).type):
            raise CircuitError(f"operator {op_id!r}: {time!r} is not a timestamp column")
        if gap_us <= 0:
            raise CircuitError(f"operator {op_id!r}: the gap must be positive")
        for c in (start, end):
            if c in input_schema.names:
                raise CircuitError(f"operator {op_id!r}: column {c!r} is an input column")
        out = input_schema.append(pa.field(start, _TS)).append(pa.field(end, _TS))
        super().__init__(op_id, input_schema, partition_by, out, input)
        self.time, self.gap_us = time, gap_us
        self._swept: int | None = None  # the bound of the last sweep (microseconds)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "session_windows",
            "id": self.id,
            "input": self.inputs[0],
            "columns": [(f.name, str(f.type)) for f in self.input_schema],
            "partition_by": self.partition_by,
            "time": self.time,
            "gap_us": self.gap_us,
        }

    def step(self, deltas: Mapping[str, pa.Table]) -> pa.Table:
        d = deltas[self.inputs[0]]
        valid = pc.is_valid(d.column(self.time))
        return super().step({self.inputs[0]: d.filter(valid)})

    def forget_below(self, input: str, bound: Any) -> None:
        """Later rows have a time at or above `bound`: a session ending at or before it is
        closed (no later row can join it, and it cannot merge with an open one), so its rows
        go. Finding them reads all the state, so a sweep waits until the bound has moved on
        by a gap since the last one."""
        assert self._rows is not None
        b = pa.scalar(bound, _TS).cast(pa.int64()).as_py()
        if self._swept is not None and b - self._swept < self.gap_us:
            return
        self._swept = b
        sessions = self._result(self._all_rows())
        ends = pc.cast(sessions.column(self._out.field(-1).name), pa.int64())
        self._forget(sessions.filter(pc.less_equal(ends, b)))

    def _result(self, rows: pa.Table) -> pa.Table:
        """Each row with a positive multiplicity, with its session's bounds."""
        rows = rows.filter(pc.greater(rows.column(WEIGHT), 0))
        if rows.num_rows == 0:
            return empty_delta(self._out)
        rows = self._sorted(rows, [(self.time, False)])
        col = rows.column(self.time)
        col = col.cast(pa.timestamp("us", col.type.tz))
        ts = pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False)
        new = np.ones(len(ts), np.bool_)
        new[1:] = np.diff(ts) >= self.gap_us
        new[self._starts(rows)] = True
        session = np.cumsum(new) - 1
        firsts = np.flatnonzero(new)
        lasts = np.append(firsts[1:], len(ts)) - 1
        start, end = ts[firsts][session], ts[lasts][session] + self.gap_us
        out = rows.select(self.input_schema.names)
        out = out.append_column(self._out.field(-2), pa.array(start, pa.int64()).cast(_TS))
        out = out.append_column(self._out.field(-1), pa.array(end, pa.int64()).cast(_TS))
        return out.append_column(WEIGHT, rows.column(WEIGHT))


__all__ = ["SessionWindows"]
