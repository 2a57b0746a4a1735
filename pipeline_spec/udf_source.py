"""A spec's UDF module read from its file (`udfs.path`, inside the configured file roots)
into the spec (`udfs.code`): the control plane reads it to check it and the run reads it
again as it starts, so that everything after, a partitioned run's executors included, has
the code the run started with, file or no file on their host."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .model import PipelineSpec, SpecError
from .paths import resolve_path
from .udfs import check_source


def inline(spec: PipelineSpec, roots: Sequence[Path]) -> PipelineSpec:
    """`spec` with its UDF module's file (inside `roots`) read into `udfs.code`; SpecError
    at `udfs.path` if it cannot be read or does not parse with its declarations."""
    u = spec.udfs
    if u is None or u.path is None:
        return spec
    full = resolve_path(u.path, roots)
    if full is None:
        raise SpecError([("udfs.path", "must lie inside the configured file roots")])
    try:
        code = full.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError([("udfs.path", f"cannot read {u.path}: {e}")]) from None
    problems = check_source(code, u.functions)
    if problems:
        raise SpecError([("udfs.path", "; ".join(problems))])
    return spec.model_copy(update={"udfs": u.model_copy(update={"code": code, "path": None})})


__all__ = ["inline"]
