"""A run's checkpoints: the commit policy (every N steps and/or T seconds, asynchronous by
default), checkpoints requested from outside (the control plane's `commit` and `stop`), and
what retention frees: a log source's input log below the oldest checkpoint a run may
restore (each log source's, for its table's offset)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from pipeline_spec import model as S
from pipeline_spec.offsets import OFFSETS, Offset
from storage_engine import StorageLocation
from storage_engine.circuit import Stepper
from storage_engine.commit import CommitHandle

from .connectors.sink import Sink
from .durability import DurabilityWatch


class Checkpointing:
    """`position()`: the run's step and each input table's offset now; `step_lock`: held
    while a step runs, so a checkpoint is always taken between steps. With `own_retention`
    (standalone runs) the spec's `keep_last` is applied after each commit; under the
    control plane its retention policy decides (it knows pins). `releases`: per table whose
    source lets go of input no checkpoint needs, what to tell (`Source.release_below`)."""

    def __init__(
        self,
        spec: S.PipelineSpec,
        circuit: Stepper,
        loc: StorageLocation,
        sinks: Mapping[str, Sink],
        durability: DurabilityWatch,
        step_lock: threading.RLock,
        position: Callable[[], tuple[int, dict[str, Offset], dict[str, Any]]],
        own_retention: bool,
        releases: Mapping[str, Callable[[Offset], None]],
        on_durable: Mapping[str, Callable[[Offset], None]] | None = None,
    ) -> None:
        self._spec, self._circuit, self._loc = spec, circuit, loc
        self._sinks, self._durability = sinks, durability
        self._step_lock, self._position = step_lock, position
        self.own_retention = own_retention
        self._releases = dict(releases)
        # Seconds between automatic commits; the control plane edits it (None: off).
        self.auto_commit_s: float | None = spec.checkpoint.every
        self.steps_since = 0
        self.count = 0  # checkpoints this run requested
        self._last = time.monotonic()
        self._oldest: str | None = None  # as `_retention_ran` last saw it
        # Per table, told its offset in each newest checkpoint (seen after a step, durable).
        self._on_durable: dict[str, Callable[[Offset], None]] = dict(on_durable or {})
        self._newest: str | None = None

    def after_step(self) -> float:
        """The policy, after each step: checkpoint if due; ms spent on the step's thread."""
        self.steps_since += 1
        if self._on_durable:
            self._report_durable()
        every_steps = self._spec.checkpoint.every_steps
        every = self.auto_commit_s
        due = (every_steps is not None and self.steps_since >= every_steps) or (
            every is not None and time.monotonic() - self._last >= every
        )
        return self.commit() if due else 0.0

    def commit(self, identifier: str | None = None, wait: bool = False) -> float:
        """Checkpoint the state after the current step; ms spent on the caller's thread."""
        t0 = time.perf_counter()
        h, _ = self.request(identifier)
        if wait or not self._spec.checkpoint.asynchronous:
            h.wait_local()
        return (time.perf_counter() - t0) * 1000

    def request(self, identifier: str | None = None) -> tuple[CommitHandle, int]:
        """Request a checkpoint of the state between steps; its handle and step."""
        with self._step_lock:
            step, offsets, extra = self._position()
            # The checkpoint will say these steps' output is written: make it durable first.
            for sink in self._sinks.values():
                sink.sync()
            # Standalone, the spec's keep_last is applied by the commit thread once the
            # checkpoint is durable: a gc here would wait for the running commit.
            keep = self._spec.retention.keep_last if self.own_retention else None
            h = self._circuit.commit_async(
                step,
                {OFFSETS: offsets, "pipeline": self._spec.name, **extra},
                identifier=identifier,
                keep_last=keep,
            )
            self._durability.track(h)
            self.steps_since = 0
            self._last = time.monotonic()
            self.count += 1
            if self.own_retention:
                self._retention_ran()
        return h, step

    def _report_durable(self) -> None:
        cps = self._loc.list_checkpoints()
        if cps and cps[-1].uuid != self._newest:
            self._newest = cps[-1].uuid
            offsets = self._spec.offsets(self._loc.checkpoint_metadata(cps[-1].uuid))
            for table, told in self._on_durable.items():
                told(offsets[table])

    def close(self) -> None:
        """The run ends: standalone, wait for the last commits and the retention they ran."""
        if self.own_retention and not self._loc.read_only:
            self._loc.wait_commits()
            self._retention_ran()

    def _retention_ran(self) -> None:
        """Standalone retention runs on the commit thread (`request`): once it has deleted
        the oldest checkpoint, the input log below the new oldest can go."""
        if not self._releases:
            return
        cps = self._loc.list_checkpoints()
        if not cps or cps[0].uuid == self._oldest:
            return
        self._oldest = cps[0].uuid
        self.deleted()

    def deleted(self) -> None:
        """After a gc: the input is needed only from the oldest checkpoint a run may
        restore (or, with none left, from the live state's offset)."""
        if not self._releases:
            return
        cps = self._loc.list_checkpoints()
        offsets = (
            self._spec.offsets(self._loc.checkpoint_metadata(cps[0].uuid))
            if cps
            else self._position()[1]
        )
        for table, release in self._releases.items():
            release(offsets[table])


__all__ = ["Checkpointing"]
