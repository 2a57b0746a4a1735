"""A run's dead letters: the records of a step that did not parse or convert, one JSON-lines
file per step (`<storage>/dead-letters/step-N.jsonl`: file, line, record, reason). A bad
record never fails a step; like the sinks, the files are idempotent by step and rolled back
to the restored step."""

from __future__ import annotations

import json
import os

import pyarrow as pa

from pipeline_spec import model as S

from .file_batches import FileBatches

DIRECTORY = "dead-letters"


class DeadLetters:
    def __init__(self, storage: str, source: S.Source, files: FileBatches | None) -> None:
        self.directory = os.path.join(storage, DIRECTORY)
        self._kind = source.format if isinstance(source, S.FilesSource) else source.kind
        self._files = files

    def rollback(self, step: int) -> None:
        """Forget the dead letters of steps after `step` (they will be redone)."""
        if not os.path.isdir(self.directory):
            return
        for n in os.listdir(self.directory):
            if not n.startswith("step-") or int(n[5:17]) > step:
                os.remove(os.path.join(self.directory, n))

    def write(self, step: int, bad: pa.Table | None) -> int:
        """Write step `step`'s bad records (the micro-batch's `bad` table, with `__file`,
        `__lineno` and `__line`); how many there were."""
        if bad is None or bad.num_rows == 0:
            return 0
        rows = bad.select(["__file", "__lineno", "__line"]).to_pylist()
        files = self._files
        if files is not None:
            # Spark's JSON reader does not give a bad record's line: find it in the file.
            unnumbered = [r for r in rows if r["__lineno"] is None]
            found = files.bad_line_numbers([(r["__file"], r["__line"]) for r in unnumbered])
            for r, n in zip(unnumbered, found, strict=True):
                r["__lineno"] = n
            rows.sort(key=lambda r: (files.path_of(r["__file"]), r["__lineno"] or 0))
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, f"step-{step:012d}.jsonl")
        reason = f"not parseable as {self._kind} with the source schema"
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            for r in rows:
                record = {
                    "file": files.path_of(r["__file"]) if files else None,
                    "line": r["__lineno"],
                    "record": r["__line"],
                    "reason": reason,
                }
                f.write(json.dumps(record) + "\n")
        os.replace(path + ".tmp", path)
        return len(rows)


__all__ = ["DIRECTORY", "DeadLetters"]
