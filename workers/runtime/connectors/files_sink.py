"""The `files` sink: one file per step, `step-<step:012d>.parquet|jsonl`, written to a
temporary name and renamed (rewriting a step replaces it). Parquet keeps every column's type
(decimal(p, s) too); JSON lines writes a decimal as a string of all its digits
(`"1234.50"`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline_spec.model import FilesSink as FilesSinkSpec
from storage_engine.location_view import to_jsonable

from .sink import SinkContext

STEP = "__step"
_STEP_FILE = re.compile(r"^step-(\d{12})\.(parquet|jsonl)$")


class FilesSink:
    rolls_back = True

    def __init__(self, spec: FilesSinkSpec, base_dir: str = ".") -> None:
        self.name = spec.name
        os.makedirs(os.path.join(base_dir, spec.path), exist_ok=True)
        # Resolved once, as opened (and checked against the file roots): a symlink swapped
        # in later cannot redirect writes or rollback's deletions.
        self.path = os.path.realpath(os.path.join(base_dir, spec.path))
        self.format = spec.format
        self._unsynced: list[str] = []  # files written since the last `sync`

    def steps(self) -> list[int]:
        return sorted(int(m.group(1)) for n in os.listdir(self.path) if (m := _STEP_FILE.match(n)))

    def last_step(self) -> int:
        return max(self.steps(), default=0)

    def rollback(self, step: int) -> None:
        for n in os.listdir(self.path):
            m = _STEP_FILE.match(n)
            if (m and int(m.group(1)) > step) or n.endswith(".tmp"):
                os.remove(os.path.join(self.path, n))
        _fsync(self.path)

    def sync(self) -> None:
        """Make every file written so far durable (before a checkpoint covers its step)."""
        for path in self._unsynced:
            with contextlib.suppress(FileNotFoundError):  # rolled back since
                _fsync(path)
        if self._unsynced:
            _fsync(self.path)
        self._unsynced.clear()

    def write(self, step: int, delta: pa.Table) -> None:
        if delta.num_rows == 0:
            return
        name = f"step-{step:012d}.{self.format}"
        final = os.path.join(self.path, name)
        tmp = final + ".tmp"
        table = delta.append_column(STEP, pa.array([step] * delta.num_rows, pa.int64()))
        if self.format == "parquet":
            pq.write_table(table, tmp)
        else:
            with open(tmp, "w", encoding="utf-8") as f:
                for row in table.to_pylist():
                    f.write(json.dumps(row, default=_json_value) + "\n")
        os.replace(tmp, final)
        self._unsynced.append(final)

    def read_all(self) -> pa.Table | None:
        """Every change row written so far (tests, tools)."""
        files = [os.path.join(self.path, f"step-{s:012d}.{self.format}") for s in self.steps()]
        if not files:
            return None
        if self.format == "parquet":
            return pa.concat_tables([pq.read_table(f) for f in files])
        rows = []
        for f in files:
            with open(f, encoding="utf-8") as fh:
                rows += [json.loads(line) for line in fh]
        return pa.Table.from_pylist(rows)

    def forget_through(self, step: int) -> None:
        pass  # a step's file is the whole of its output

    def close(self) -> None:
        pass


def _json_value(v: Any) -> Any:
    """A value JSON has no type for: a decimal as the string of its digits (every one kept,
    `to_jsonable`), anything else (times) as its text."""
    return to_jsonable(v) if isinstance(v, Decimal) else str(v)


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_sink(spec: FilesSinkSpec, ctx: SinkContext) -> FilesSink:
    return FilesSink(spec, ctx.base_dir)


__all__ = ["STEP", "FilesSink", "open_sink"]
