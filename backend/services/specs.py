"""Checking a user's pipeline spec before it is stored: the spec's own rules
(`pipeline_spec.model`), its SQL planned (`spindle_sql.spec`: names, types, every error at its line
and column), plus the control plane's: file paths stay inside the configured roots. A UDF
module is parsed, never run. An operator spec's column references are checked by the job's
planner when a run starts (it needs Spark)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline_spec.model import PipelineSpec, SpecError, outside_roots, parse_spec
from pipeline_spec.udf_source import inline
from spindle_sql.spec import plan_spec

from ..errors import InvalidSpec


def validate(
    doc: dict[str, Any], roots: list[Path], object_roots: Sequence[str] = ()
) -> PipelineSpec:
    """The parsed spec, or InvalidSpec listing every offending field."""
    try:
        spec = parse_spec(doc)
    except SpecError as e:
        raise InvalidSpec("invalid pipeline spec", errors=e.errors) from None
    errors = outside_roots(spec, roots, object_roots)
    if errors:
        raise InvalidSpec("invalid pipeline spec", errors=errors)
    if spec.sql is not None:
        try:
            # A UDF module is read and parsed here, never run (pipeline_spec.udfs).
            udfs = inline(spec, roots).udfs
            plan_spec(spec, udf_source=udfs.code if udfs is not None else None)
        except SpecError as e:
            raise InvalidSpec("invalid pipeline spec", errors=e.errors) from None
    return spec


__all__ = ["validate"]
