"""A run's offset log: each step's input offsets, durable before the step's output reaches
any sink (`<storage>/offsets/step-<step:012d>.json`, as Spark's own offset log does).

A step redone after a crash or a restore reads exactly the input it read the first time: the
run replays the logged steps after its checkpoint with their logged offsets before it takes
new input, so every sink can rely on "same step, same output" (a sink that cannot roll back,
such as a Kafka transaction already committed, skips a step it holds). Entries up to the
oldest checkpoint's step are deleted as retention deletes checkpoints.

Each entry also holds the step's processing time (`proctime_us`, UTC microseconds: the wall
clock when the step was first taken), which the step's PROCTIME(), NOW() and
CURRENT_TIMESTAMP give, so a step redone gives the same rows (`proctime`). An entry an
earlier release wrote has none: the first redo of its step takes its own clock's time and
writes it into the entry (`stamp`) before the step's output is written, so every later redo
gives that time again. (No output of such a step can have depended on another: the release
that wrote the entry had no PROCTIME.)

With an object store (the run's checkpoint tier), each entry is also put there, as
`offsets/step-<step:012d>.json` beside the checkpoints, before the step runs: a run restored
on another machine from the store's checkpoints redoes the same steps with the same input
(a Kafka, Delta or Postgres sink holds them already). A run whose local log is absent takes
the store's entries. While the store cannot be reached, entries are kept local and put, in
order, once it can (retried with backoff, not on every step); the first failure of each
outage is reported (`on_error`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from pipeline_spec.offsets import Offset, parse
from storage_engine import PosixFileLayer
from storage_engine.errors import StorageError
from storage_engine.fileio import FileLayer, write_durably
from storage_engine.objstore import ObjectStoreLike

log = logging.getLogger("spindle.runner")

DIRECTORY = "offsets"
_PREFIX, _SUFFIX = "step-", ".json"


class OffsetLog:
    """The offset log of the storage location `storage`. An entry is `{"step": S, "offsets":
    {<table>: {"start": a, "end": b}}, "proctime_us": T}`: the step read offsets [a, b) of
    each input table (counts, or a Kafka table's offsets per partition:
    `pipeline_spec.offsets`) at processing time T (absent in an earlier release's entry)."""

    def __init__(
        self,
        storage: str,
        fs: FileLayer | None = None,
        store: ObjectStoreLike | None = None,
        on_error: Callable[[int, BaseException], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = os.path.join(storage, DIRECTORY)
        self._fs = fs or PosixFileLayer()
        self._store = store
        self._on_error = on_error
        self._clock = clock
        self._unsent: set[int] = set()  # entries the store has not got yet
        self._doomed: set[int] = set()  # entries the store should not have any more
        self._retry_at = 0.0
        self._backoff = 0.0
        if store is not None and not os.path.isdir(self.directory):
            self._pull(store)
        self._steps = set(self._listed())

    def _pull(self, store: ObjectStoreLike) -> None:
        """Take the store's entries: this machine has no log of its own. If the store
        cannot be read, the run goes on without them (its sinks then report steps they
        hold that it cannot redo: `steps_held_beyond`)."""
        try:
            names = [o.key.rpartition("/")[2] for o in store.list(DIRECTORY + "/")]
            wanted = [n for n in names if n.startswith(_PREFIX) and n.endswith(_SUFFIX)]
            got = [(n, store.get_bytes(f"{DIRECTORY}/{n}")) for n in wanted]
        except StorageError as e:
            log.warning("the offset log in the object store could not be read: %s", e)
            return
        if got:
            os.makedirs(self.directory, exist_ok=True)
        for name, data in got:
            write_durably(self._fs, os.path.join(self.directory, name), [data])

    def _listed(self) -> list[int]:
        if not os.path.isdir(self.directory):
            return []
        return sorted(
            int(n[len(_PREFIX) : -len(_SUFFIX)])
            for n in os.listdir(self.directory)
            if n.startswith(_PREFIX) and n.endswith(_SUFFIX)
        )

    def _path(self, step: int) -> str:
        return os.path.join(self.directory, _name(step))

    def read(self, step: int) -> dict[str, tuple[Offset, Offset]] | None:
        """Step `step`'s offsets per table, or None if it is not logged (or unreadable)."""
        doc = self._doc(step)
        if doc is None:
            return None
        try:
            offsets: Any = doc["offsets"]
            return {t: (parse(o["start"]), parse(o["end"])) for t, o in offsets.items()}
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def proctime(self, step: int) -> int | None:
        """Step `step`'s processing time (UTC microseconds), or None if the step is not
        logged or its entry has none (an earlier release's)."""
        doc = self._doc(step)
        value = None if doc is None else doc.get("proctime_us")
        return value if isinstance(value, int) else None

    def stamp(self, step: int, proctime_us: int) -> None:
        """Write a processing time into step `step`'s entry (an earlier release's, which
        has none), durably, keeping its offsets: later redos of the step read it."""
        doc = self._doc(step)
        if doc is None:
            raise ValueError(f"step {step} is not in the offset log")
        self._write(step, {**doc, "proctime_us": proctime_us})

    def _doc(self, step: int) -> dict[str, object] | None:
        if step not in self._steps:
            return None
        try:
            with open(self._path(step), encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

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

    def record(
        self,
        step: int,
        offsets: Mapping[str, tuple[Offset, Offset]],
        proctime_us: int | None = None,
    ) -> None:
        """Log step `step`'s offsets (and its processing time) durably. Entries after it
        belong to a timeline that no longer follows (a different input for this step):
        they are deleted first."""
        for later in sorted(s for s in self._steps if s > step):
            self._remove(later)
        doc: dict[str, object] = {
            "step": step,
            "offsets": {t: {"start": a, "end": b} for t, (a, b) in offsets.items()},
        }
        if proctime_us is not None:
            doc["proctime_us"] = proctime_us
        self._write(step, doc)

    def _write(self, step: int, doc: Mapping[str, object]) -> None:
        """Write step `step`'s entry durably, and put it in the store."""
        os.makedirs(self.directory, exist_ok=True)
        write_durably(self._fs, self._path(step), [json.dumps(doc).encode()])
        self._steps.add(step)
        if self._store is not None:
            self._unsent.add(step)
            self._doomed.discard(step)
            self.mirror()

    def mirror(self) -> bool:
        """Bring the store's entries in line with the local log (put, in step order, the
        entries it lacks; delete those deleted here), unless a failure's backoff is still
        running; True if the store is in line."""
        store = self._store
        if store is None or not (self._unsent or self._doomed):
            return True
        if self._clock() < self._retry_at:
            return False
        try:
            for step in sorted(self._unsent):
                with contextlib.suppress(FileNotFoundError):  # deleted since: not needed
                    store.put_file(self._key(step), self._path(step))
                self._unsent.discard(step)
            if self._doomed:
                store.remove([self._key(s) for s in sorted(self._doomed)])
                self._doomed.clear()
        except StorageError as e:
            if not self._backoff:  # the first failure of an outage
                if self._on_error is not None:
                    self._on_error(min(self._unsent or self._doomed), e)
                else:
                    log.warning("offsets not in the object store yet (%s): kept local", e)
            wait = store.settings.retry_max_wait_s
            self._backoff = min(wait, max(self._backoff * 2, wait / 8))
            self._retry_at = self._clock() + self._backoff
            return False
        self._backoff = 0.0
        return True

    def _key(self, step: int) -> str:
        return f"{DIRECTORY}/{_name(step)}"

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
        if self._store is not None:
            self._unsent.discard(step)
            self._doomed.add(step)


def _name(step: int) -> str:
    return f"{_PREFIX}{step:012d}{_SUFFIX}"


__all__ = ["DIRECTORY", "OffsetLog"]
