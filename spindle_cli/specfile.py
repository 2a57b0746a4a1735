"""Reading a pipeline spec file: YAML or JSON, from a path or stdin (`-`).

The file holds the spec itself (docs/pipeline-spec.schema.json). A request body
`{"spec": {...}, "description": "..."}` is accepted too, so the JSON of `pipelines get`
or a curl payload can be fed back.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class SpecFileError(Exception):
    """The file is missing, unreadable, or not a YAML/JSON mapping."""


# How the SQL planner's errors start (a position in the `sql` text).
_SQL_POSITION = re.compile(r"^line (\d+), column (\d+):")


@dataclass(frozen=True)
class SpecFile:
    spec: dict[str, Any]
    description: str | None
    where: str = ""
    # The file line (1-based) of the `sql` text's first line and its indentation, when the
    # text is a literal block (`sql: |`) whose lines are the file's.
    sql_block: tuple[int, int] | None = None

    def position(self, field: str, message: str) -> str | None:
        """Where in the file an error of the `sql` field is (`FILE:LINE:COLUMN`), from the
        planner's line and column in the SQL text; None for other errors, or when the SQL
        is not a literal block."""
        at = _SQL_POSITION.match(message)
        if at is None or self.sql_block is None or field.removeprefix("spec.") != "sql":
            return None
        first, indent = self.sql_block
        return f"{self.where}:{first + int(at[1]) - 1}:{indent + int(at[2])}"


def _sql_block(text: str) -> tuple[int, int] | None:
    """`SpecFile.sql_block` of a spec (or request body) file's text."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return None
    node = _entry(root, "sql") or _entry(_entry(root, "spec"), "sql")
    if not isinstance(node, yaml.ScalarNode) or node.style != "|":
        return None
    first = node.start_mark.line + 1  # 0-based: the line after the block's header
    for line in text.splitlines()[first : node.end_mark.line + 1]:
        if line.strip():
            return first + 1, len(line) - len(line.lstrip(" "))
    return None


def _entry(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    return next(
        (v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None
    )


def _parse(text: str, where: str) -> Any:
    if text.lstrip().startswith(("{", "[")):
        try:
            return json.loads(text)
        except ValueError:
            pass  # maybe YAML flow style: let the YAML parser say what is wrong
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecFileError(f"{where} is neither valid YAML nor JSON: {e}") from None


def read(source: str) -> SpecFile:
    """`source` is a path, or `-` for stdin."""
    where = "stdin" if source == "-" else source
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SpecFileError(f"cannot read {where}: {e}") from None
    doc = _parse(text, where)
    if not isinstance(doc, dict):
        raise SpecFileError(f"{where} does not hold a mapping (a pipeline spec)")
    doc = json.loads(json.dumps(doc, default=str))  # YAML dates and the like, as JSON sends them
    block = _sql_block(text)
    if "spec" in doc and "name" not in doc and isinstance(doc["spec"], dict):
        desc = doc.get("description")
        return SpecFile(doc["spec"], None if desc is None else str(desc), where, block)
    return SpecFile(doc, None, where, block)
