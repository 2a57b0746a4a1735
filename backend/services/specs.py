"""Checking a user's pipeline spec before it is stored: the spec's own rules
(`workers.spec`), plus the control plane's: file paths stay inside the configured roots.
Column references are checked by the job's planner when a run starts (it needs Spark)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from workers.spec import FilesSink, FilesSource, PipelineSpec, SpecError, parse_spec

from ..errors import InvalidSpec


def resolve_path(path: str, roots: list[Path]) -> Path | None:
    """`path` (relative ones against the first root) with symlinks resolved, if it lies
    inside one of `roots`; else None."""
    full = Path(os.path.realpath(roots[0] / path))
    for root in roots:
        r = Path(os.path.realpath(root))
        if full == r or r in full.parents:
            return full
    return None


def validate(doc: dict[str, Any], roots: list[Path]) -> PipelineSpec:
    """The parsed spec, or InvalidSpec listing every offending field."""
    try:
        spec = parse_spec(doc)
    except SpecError as e:
        raise InvalidSpec("invalid pipeline spec", errors=e.errors) from None
    errors: list[tuple[str, str]] = []
    where = ", ".join(str(r) for r in roots)
    if isinstance(spec.source, FilesSource) and resolve_path(spec.source.path, roots) is None:
        errors.append(("source.path", f"must lie inside the configured file roots ({where})"))
    for i, sink in enumerate(spec.sinks):
        if isinstance(sink, FilesSink) and resolve_path(sink.path, roots) is None:
            errors.append(
                (f"sinks.{i}.path", f"must lie inside the configured file roots ({where})")
            )
    if errors:
        raise InvalidSpec("invalid pipeline spec", errors=errors)
    return spec


__all__ = ["resolve_path", "validate"]
