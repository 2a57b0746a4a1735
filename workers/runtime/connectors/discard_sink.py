"""The `discard` sink: nothing kept (Flink's `blackhole`); its rows count in the metrics."""

from __future__ import annotations

import pyarrow as pa

from pipeline_spec.model import DiscardSink as DiscardSinkSpec

from .sink import SinkContext


class DiscardSink:
    """Drops what it is given: the view is computed, and nothing is kept."""

    rolls_back = True  # nothing to take back

    def __init__(self, name: str) -> None:
        self.name = name
        self._last = 0

    def rollback(self, step: int) -> None:
        self._last = min(self._last, step)

    def write(self, step: int, delta: pa.Table) -> None:
        self._last = step

    def last_step(self) -> int:
        return self._last

    def sync(self) -> None:
        pass

    def forget_through(self, step: int) -> None:
        pass

    def close(self) -> None:
        pass


def open_sink(spec: DiscardSinkSpec, ctx: SinkContext) -> DiscardSink:
    return DiscardSink(spec.name)


__all__ = ["DiscardSink", "open_sink"]
