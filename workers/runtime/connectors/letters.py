"""Dead-letter records of a table whose bad records come from lines of files (or from no
file at all): file, line, the record's text, and why."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from ..file_batches import FileBatches


def line_letters(
    table: str, bad: pa.Table, fmt: str, files: FileBatches | None
) -> list[dict[str, Any]]:
    """`bad`'s records (`__file`, `__lineno`, `__line`) as dead letters, in file and line
    order; `files`: the reader of the step's files, which finds a bad record's line."""
    rows = bad.select(["__file", "__lineno", "__line"]).to_pylist()
    if files is not None:
        # Spark's JSON reader does not give a bad record's line: find it in the file.
        unnumbered = [r for r in rows if r["__lineno"] is None]
        found = files.bad_line_numbers([(r["__file"], r["__line"]) for r in unnumbered])
        for r, n in zip(unnumbered, found, strict=True):
            r["__lineno"] = n
        rows.sort(key=lambda r: (files.path_of(r["__file"]), r["__lineno"] or 0))
    reason = f"not parseable as {fmt} with the source schema"
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


__all__ = ["line_letters"]
