"""Windowed aggregate on an event-time column: tumbling or hopping windows, a watermark with
allowed lateness, and state below the watermark garbage-collected.

Each row is assigned to every window [start, start + size) containing its event time, with
starts on multiples of `slide` (= `size` for tumbling windows); the windows are then a group
aggregate over (window_start, window_end, group_by...). Keys start with `window_start`, so
closed windows are dropped from state with one `truncate_below` per spine.

Watermark: the largest event time seen so far minus `lateness`, advanced after each step
and stored in every checkpoint. A window is closed once `window_end <= watermark`: its output
is final, rows that would still fall into it are dropped (counted in `late_rows`), and its
state is deleted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..location import StorageLocation
from ..schema import WEIGHT
from .aggregate import Aggregate, GroupAggregate
from .operator import (
    CircuitError,
    Operator,
    require_columns,
    weighted,
)

START, END = "window_start", "window_end"


class WindowAggregate(Operator):
    def __init__(
        self,
        op_id: str,
        input_schema: pa.Schema,
        time_column: str,
        size_us: int,
        aggregates: Sequence[Aggregate],
        group_by: Sequence[str] = (),
        slide_us: int | None = None,
        lateness_us: int = 0,
        input: str = "source",
    ) -> None:
        super().__init__(op_id, [input])
        require_columns(op_id, input_schema, [time_column], "time column")
        t = input_schema.field(time_column).type
        if not pa.types.is_timestamp(t):
            raise CircuitError(
                f"operator {op_id!r}: time column {time_column!r} is {t}, not a timestamp"
            )
        slide = slide_us or size_us
        if size_us <= 0 or slide <= 0 or size_us % slide:
            raise CircuitError(
                f"operator {op_id!r}: window size must be a positive multiple of the slide"
            )
        if lateness_us < 0:
            raise CircuitError(f"operator {op_id!r}: lateness must not be negative")
        self.time_column = time_column
        self.size, self.slide, self.lateness = size_us, slide, lateness_us
        self._ts = pa.timestamp("us", tz=t.tz)
        windowed = pa.schema([pa.field(START, self._ts), pa.field(END, self._ts), *input_schema])
        self._agg = GroupAggregate(
            op_id, windowed, [START, END, *group_by], aggregates, input=input
        )
        self.group_by = list(group_by)
        self.watermark: int | None = None  # microseconds since the epoch

    @property
    def output_schema(self) -> pa.Schema:
        return self._agg.output_schema

    def describe(self) -> dict[str, Any]:
        return {
            **self._agg.describe(),
            "kind": "window_aggregate",
            "time_column": self.time_column,
            "size_us": self.size,
            "slide_us": self.slide,
        }

    def open(self, location: StorageLocation, state: Mapping[str, Any]) -> None:
        self._agg.open(location, state)
        wm = state.get("watermark")
        self.watermark = int(wm) if wm is not None else None
        self.late_rows = int(state.get("late_rows", 0))

    def checkpoint_state(self) -> dict[str, Any]:
        return {"watermark": self.watermark, "late_rows": self.late_rows}

    def _advance(self, newest_us: int) -> None:
        newest = newest_us - self.lateness
        if self.watermark is None or newest > self.watermark:
            self.watermark = newest
            self._collect()

    def step(self, deltas: Mapping[str, pa.Table]) -> pa.Table:
        d = weighted(deltas[self.inputs[0]])
        t = pc.cast(d.column(self.time_column), self._ts).cast(pa.int64())
        valid = pc.is_valid(t).to_numpy(zero_copy_only=False)
        t_np = pc.fill_null(t, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        rows, starts = [], []
        # Window k of a row: start = floor(t / slide) * slide - k * slide, k < size / slide.
        # Rows without an event time belong to no window.
        base = (t_np // self.slide) * self.slide
        idx = np.flatnonzero(valid)
        for k in range(self.size // self.slide):
            s = base[idx] - k * self.slide
            rows.append(idx)
            starts.append(s)
        row_idx = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        start = np.concatenate(starts) if starts else np.zeros(0, np.int64)
        if self.watermark is not None:
            closed = start + self.size <= self.watermark
            self.late_rows += len(np.unique(row_idx[closed]))
            row_idx, start = row_idx[~closed], start[~closed]
        exploded = d.take(pa.array(row_idx))
        exploded = exploded.add_column(0, END, pa.array(start + self.size).cast(self._ts))
        exploded = exploded.add_column(0, START, pa.array(start).cast(self._ts))
        out = self._agg.step({self.inputs[0]: exploded})
        if idx.size:
            self._advance(int(t_np[idx].max()))
        return out

    def _collect(self) -> None:
        """Drop the state of closed windows: every window starting at or before
        watermark - size has ended."""
        assert self.watermark is not None
        bound = pa.scalar(self.watermark - self.size + 1, pa.int64()).cast(self._ts).as_py()
        for sp in self._agg.spines():
            sp.truncate_below((bound,))

    def metrics(self) -> dict[str, Any]:
        return {**self._agg.metrics(), "watermark_us": self.watermark, "late_rows": self.late_rows}


__all__ = ["END", "START", "WEIGHT", "WindowAggregate"]
