"""Errors in a pipeline's SQL, each at a line and column of the text the user wrote."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong, where: `line` and `column` are 1-based positions in the SQL text
    (0 when the problem has no single place, e.g. a view that is missing)."""

    message: str
    line: int = 0
    column: int = 0

    def __str__(self) -> str:
        return (
            f"line {self.line}, column {self.column}: {self.message}" if self.line else self.message
        )


class SqlError(ValueError):
    """The SQL cannot become a dataflow; `problems` says every reason found, in text order."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(problems, key=lambda p: (p.line, p.column))
        super().__init__("; ".join(str(p) for p in self.problems))


def position(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of character `offset` of `text`."""
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


__all__ = ["Problem", "SqlError", "position"]
