"""Reading a pipeline spec file: YAML or JSON, from a path or stdin (`-`).

The file holds the spec itself (docs/pipeline-spec.schema.json). A request body
`{"spec": {...}, "description": "..."}` is accepted too, so the JSON of `pipelines get`
or a curl payload can be fed back.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class SpecFileError(Exception):
    """The file is missing, unreadable, or not a YAML/JSON mapping."""


@dataclass(frozen=True)
class SpecFile:
    spec: dict[str, Any]
    description: str | None


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
    if "spec" in doc and "name" not in doc and isinstance(doc["spec"], dict):
        desc = doc.get("description")
        return SpecFile(doc["spec"], None if desc is None else str(desc))
    return SpecFile(doc, None)
