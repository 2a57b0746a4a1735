"""A run's offset log: each step's input offsets, durable before the step's output reaches
any sink (`<storage>/offsets/step-<step:012d>.json`, as Spark's own offset log does).

A step redone after a crash or a restore reads exactly the input it read the first time: the
run replays the logged steps after its checkpoint with their logged offsets before it takes
new input, so every sink can rely on "same step, same output" (a sink that cannot roll back,
such as a Kafka transaction already committed, skips a step it holds). Entries up to the
oldest checkpoint's step are deleted as retention deletes checkpoints.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping

from pipeline_spec.offsets import Offset, parse
from storage_engine import PosixFileLayer
from storage_engine.fileio import FileLayer, write_durably

DIRECTORY = "offsets"
_PREFIX, _SUFFIX = "step-", ".json"


class OffsetLog:
    """The offset log of the storage location `storage`. An entry is `{"step": S, "offsets":
    {<table>: {"start": a, "end": b}}}`: the step read offsets [a, b) of each input table
    (counts, or a Kafka table's offsets per partition: `pipeline_spec.offsets`)."""

    def __init__(self, storage: str, fs: FileLayer | None = None) -> None:
        self.directory = os.path.join(storage, DIRECTORY)
        self._fs = fs or PosixFileLayer()
        self._steps = set(self._listed())

    def _listed(self) -> list[int]:
        if not os.path.isdir(self.directory):
            return []
        return sorted(
            int(n[len(_PREFIX) : -len(_SUFFIX)])
            for n in os.listdir(self.directory)
            if n.startswith(_PREFIX) and n.endswith(_SUFFIX)
        )

    def _path(self, step: int) -> str:
        return os.path.join(self.directory, f"{_PREFIX}{step:012d}{_SUFFIX}")

    def read(self, step: int) -> dict[str, tuple[Offset, Offset]] | None:
        """Step `step`'s offsets per table, or None if it is not logged (or unreadable)."""
        if step not in self._steps:
            return None
        try:
            with open(self._path(step), encoding="utf-8") as f:
                doc = json.load(f)
            return {t: (parse(o["start"]), parse(o["end"])) for t, o in doc["offsets"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def pending(
        self, step: int, offsets: Mapping[str, Offset]
    ) -> list[dict[str, tuple[Offset, Offset]]]:
        """The logged steps after `step`, in order, whose input continues from `offsets`
        (each table's offset after `step`): the steps a run restored at `step` must redo
        with exactly these offsets. Stops at the first gap or entry that does not follow."""
        out: list[dict[str, tuple[Offset, Offset]]] = []
        at = dict(offsets)
        while (entry := self.read(step + len(out) + 1)) is not None:
            if entry.keys() != at.keys() or any(entry[t][0] != at[t] for t in at):
                break
            out.append(entry)
            at = {t: end for t, (_, end) in entry.items()}
        return out

    def record(self, step: int, offsets: Mapping[str, tuple[Offset, Offset]]) -> None:
        """Log step `step`'s offsets durably. Entries after it belong to a timeline that no
        longer follows (a different input for this step): they are deleted first."""
        for later in sorted(s for s in self._steps if s > step):
            self._remove(later)
        os.makedirs(self.directory, exist_ok=True)
        doc = {
            "step": step,
            "offsets": {t: {"start": a, "end": b} for t, (a, b) in offsets.items()},
        }
        write_durably(self._fs, self._path(step), [json.dumps(doc).encode()])
        self._steps.add(step)

    def truncate_through(self, step: int) -> int:
        """Delete the entries of steps up to `step` (those no checkpoint a run may restore
        can redo); how many were deleted."""
        victims = [s for s in self._steps if s <= step]
        for s in victims:
            self._remove(s)
        return len(victims)

    def _remove(self, step: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self._path(step))
        self._steps.discard(step)


__all__ = ["DIRECTORY", "OffsetLog"]
