"""What every sink does (`Sink`), what opening one is given (`SinkContext`), and the errors
sinks share.

A sink receives, per step, an operator's output delta (rows plus `__weight`) and writes it
tagged with the step. `rollback(step)` removes everything written for later steps: a run
restored from the checkpoint of step S calls it before producing step S + 1 again, so a
crash between a sink write and the next checkpoint never duplicates output. A sink that
cannot take a step back (`rolls_back` false: Kafka's) skips the steps up to `last_step()`
instead, which is exact because a redone step reads the input it read the first time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from storage_engine import StorageLocation


class SinkConflictError(ValueError):
    """Another pipeline's sink already writes this table (or topic)."""


class SinkError(RuntimeError):
    """A step's changes do not fit the sink's table (table mode's contract), or the sink's
    store refuses them."""


@dataclass(frozen=True)
class SinkContext:
    """What a sink is opened with besides its spec: the schema of the output it takes, the
    pipeline's name (a table has one writing sink, named `<pipeline>/<sink>`), the directory
    relative file paths are under, and the pipeline's storage location (a `view`'s spine)."""

    schema: pa.Schema
    pipeline: str
    base_dir: str
    location: StorageLocation


class Sink(Protocol):
    name: str
    # Whether `rollback` takes steps back; if not, `write` skips steps up to `last_step()`.
    rolls_back: bool

    def write(self, step: int, delta: pa.Table) -> None:
        """Write step `step`'s output (rows plus `__weight`); writing a step again replaces
        it."""

    def rollback(self, step: int) -> None:
        """Forget everything written for steps after `step`."""

    def last_step(self) -> int:
        """The newest step whose output the sink holds (0: none known)."""

    def sync(self) -> None:
        """Make what was written durable: called before each checkpoint."""

    def forget_through(self, step: int) -> None:
        """No rollback goes back to `step` or before (the oldest checkpoint's): what only
        such a rollback needs may go."""

    def close(self) -> None: ...


__all__ = ["Sink", "SinkConflictError", "SinkContext", "SinkError"]
