"""A run's dead letters: the records of a step that did not parse or convert, one JSON-lines
file per step (`<storage>/dead-letters/step-N.jsonl`: table, file, line, record, reason; a
Kafka table's have topic, partition and offset instead of file and line). A
bad record never fails a step; like the sinks, the files are idempotent by step and rolled
back to the restored step."""

from __future__ import annotations

import json
import os

import pyarrow as pa

from pipeline_spec import model as S

from .file_batches import FileBatches

DIRECTORY = "dead-letters"


class DeadLetters:
    """`tables`: each input table's source and, for files, its reader (which finds a bad
    JSON record's line)."""

    def __init__(
        self, storage: str, tables: dict[str, tuple[S.Source, FileBatches | None]]
    ) -> None:
        self.directory = os.path.join(storage, DIRECTORY)
        self._tables = {
            t: (src.format if isinstance(src, S.FilesSource) else src.kind, files)
            for t, (src, files) in tables.items()
        }

    def rollback(self, step: int) -> None:
        """Forget the dead letters of steps after `step` (they will be redone)."""
        if not os.path.isdir(self.directory):
            return
        for n in os.listdir(self.directory):
            if not n.startswith("step-") or int(n[5:17]) > step:
                os.remove(os.path.join(self.directory, n))

    def write(self, step: int, bad: dict[str, pa.Table | None]) -> int:
        """Write step `step`'s bad records (per table, the micro-batch's `bad` table, with
        `__file`, `__lineno` and `__line`); how many there were."""
        records = [r for t, b in bad.items() if b is not None for r in self._records(t, b)]
        if not records:
            return 0
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, f"step-{step:012d}.jsonl")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
        os.replace(path + ".tmp", path)
        return len(records)

    def _records(self, table: str, bad: pa.Table) -> list[dict[str, object]]:
        kind, files = self._tables[table]
        rows = bad.select(["__file", "__lineno", "__line"]).to_pylist()
        if files is not None:
            # Spark's JSON reader does not give a bad record's line: find it in the file.
            unnumbered = [r for r in rows if r["__lineno"] is None]
            found = files.bad_line_numbers([(r["__file"], r["__line"]) for r in unnumbered])
            for r, n in zip(unnumbered, found, strict=True):
                r["__lineno"] = n
            rows.sort(key=lambda r: (files.path_of(r["__file"]), r["__lineno"] or 0))
        if kind == "kafka":
            return [
                {
                    "table": table,
                    "topic": r["__file"].rpartition(":")[0],
                    "partition": int(r["__file"].rpartition(":")[2]),
                    "offset": r["__lineno"],
                    "record": r["__line"],
                    "reason": "no value, or not parseable with the table's format and schema",
                }
                for r in rows
            ]
        reason = f"not parseable as {kind} with the source schema"
        return [
            {
                "table": table,
                "file": files.path_of(r["__file"]) if files else None,
                "line": r["__lineno"],
                "record": r["__line"],
                "reason": reason,
            }
            for r in rows
        ]


__all__ = ["DIRECTORY", "DeadLetters"]
