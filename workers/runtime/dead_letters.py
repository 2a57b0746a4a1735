"""A run's dead letters: the records of a step that did not parse or convert, one JSON-lines
file per step (`<storage>/dead-letters/step-N.jsonl`: table, file, line, record, reason; a
Kafka table's have topic, partition and offset instead of file and line). A
bad record never fails a step; like the sinks, the files are idempotent by step and rolled
back to the restored step."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import pyarrow as pa

from .connectors.source import Source

DIRECTORY = "dead-letters"
UNMATCHED = "a delete of a key that has no row"


class DeadLetters:
    """`tables`: each input table's source, which says what its bad records are
    (`Source.dead_letters`: a file's line, a Kafka partition's offset)."""

    def __init__(self, storage: str, tables: dict[str, Source]) -> None:
        self.directory = os.path.join(storage, DIRECTORY)
        self._tables = dict(tables)

    def rollback(self, step: int) -> None:
        """Forget the dead letters of steps after `step` (they will be redone)."""
        if not os.path.isdir(self.directory):
            return
        for n in os.listdir(self.directory):
            if not n.startswith("step-") or int(n[5:17]) > step:
                os.remove(os.path.join(self.directory, n))

    def write(
        self,
        step: int,
        bad: dict[str, pa.Table | None],
        unmatched: Mapping[str, pa.Table] | None = None,
    ) -> int:
        """Write step `step`'s bad records (per table, the micro-batch's `bad` table, with
        `__file`, `__lineno` and `__line`) and its deletes of keys without a row (per
        upserted table, `Stepper.take_unmatched`); how many there were."""
        records = [
            r for t, b in bad.items() if b is not None for r in self._tables[t].dead_letters(t, b)
        ]
        records += [
            {"table": t, "record": json.dumps(r, default=str), "reason": UNMATCHED}
            for t, rows in (unmatched or {}).items()
            for r in rows.to_pylist()
        ]
        if not records:
            return 0
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, f"step-{step:012d}.jsonl")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
        os.replace(path + ".tmp", path)
        return len(records)


__all__ = ["DIRECTORY", "UNMATCHED", "DeadLetters"]
