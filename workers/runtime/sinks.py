"""A run's sinks: opened from the spec through the connector registry
(`connectors.registry`), written together each step, and what they hold compared with what
a run can redo.

Each sink kind is its own module in `connectors` (`files`, `postgres`, `delta`, `kafka`,
`discard`, `view`); `connectors.sink` says what every sink does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from pipeline_spec import model as S
from storage_engine import StorageLocation
from storage_engine.circuit import Stepper

from .connectors.registry import open_sink
from .connectors.sink import Sink, SinkContext


def open_sinks(
    spec: S.PipelineSpec, circuit: Stepper, loc: StorageLocation, base_dir: str
) -> dict[str, Sink]:
    """The spec's sinks by name, each over its operator's (or view's) output schema (`files`
    paths relative to `base_dir`; `view` spines in `loc`)."""
    schemas = circuit.output_schemas
    return {
        s.name: open_sink(s, SinkContext(schemas[s.from_], spec.name, base_dir, loc))
        for s in spec.sinks
    }


class WrittenSteps:
    """Each sink's last step that wrote rows (a step whose view did not change writes none),
    for users to see: kept in checkpoints' metadata (`sink_steps`), so a restore rolls it
    back with the sinks and a run on another machine knows it."""

    def __init__(self, sinks: Mapping[str, Sink], restored: Mapping[str, Any]) -> None:
        self._sinks = sinks
        held = restored.get("sink_steps")
        self.steps: dict[str, int] = {
            n: v for n, v in (held if isinstance(held, dict) else {}).items() if n in sinks
        }
        self._rows: dict[str, int] = {}

    def write(self, spec: S.PipelineSpec, step: int, out: Mapping[str, pa.Table]) -> None:
        """The step's output to every sink."""
        for s in spec.sinks:
            delta = out[s.from_]
            self._sinks[s.name].write(step, delta)
            self._rows[s.name] = delta.num_rows
            if delta.num_rows:
                self.steps[s.name] = step

    def figures(self) -> dict[str, dict[str, int | None]]:
        """Per sink: `rows` written by the last step, `last_step` that wrote any."""
        return {
            n: {"rows": self._rows.get(n, 0), "last_step": self.steps.get(n)} for n in self._sinks
        }


def steps_held_beyond(sinks: dict[str, Sink], redo_through: int) -> dict[str, int]:
    """The sinks that cannot roll back (Kafka's) and hold steps after `redo_through`, the
    last step a run can redo with the input it logged: by name, the newest step each holds.
    Those steps are skipped, and their output may not be what this run would write."""
    held = {n: s.last_step() for n, s in sinks.items() if not s.rolls_back}
    return {n: step for n, step in held.items() if step > redo_through}


__all__ = ["WrittenSteps", "open_sinks", "steps_held_beyond"]
