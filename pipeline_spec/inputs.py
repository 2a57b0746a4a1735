"""A spec's input tables as one list, `tables`, however the spec gives them.

Specs of earlier releases give the first input table as `source` and the others, if any,
in `tables`; such a spec still loads, its tables normalised into one list (`as_one_list`),
and its errors still name the fields it was written with (`written_path`). The published
JSON Schema takes both forms (`take_source_too`)."""

from __future__ import annotations

import copy
from typing import Any

LEGACY = "source"  # the first input table's field in specs of earlier releases
TABLES = "tables"


def gives_source(doc: Any) -> bool:
    """Whether a spec document gives its first input table as `source`."""
    return isinstance(doc, dict) and LEGACY in doc


def as_one_list(doc: Any) -> Any:
    """`doc` with `source`, if given, as the first of `tables`."""
    if not gives_source(doc):
        return doc
    out = dict(doc)
    first = out.pop(LEGACY)
    rest = out.get(TABLES, [])
    out[TABLES] = [first, *rest] if isinstance(rest, list) else rest
    return out


def written_path(loc: tuple[Any, ...], gave_source: bool) -> tuple[Any, ...]:
    """An error's location in the normalised spec as the spec was written: with `source`
    given, `tables.0` is `source` and `tables.<i>` was `tables.<i - 1>`."""
    if not gave_source or len(loc) < 2 or loc[0] != TABLES or not isinstance(loc[1], int):
        return loc
    if loc[1] == 0:
        return (LEGACY, *loc[2:])
    return (TABLES, loc[1] - 1, *loc[2:])


def take_source_too(schema: dict[str, Any]) -> None:
    """The spec's JSON Schema, changed in place to take `source` as earlier releases wrote
    it: one input table, with `tables` then optional (the others)."""
    props = schema["properties"]
    props[LEGACY] = {
        **copy.deepcopy(props[TABLES]["items"]),
        "description": "specs of earlier releases: the first input table (`tables` then "
        "holds the others)",
        "deprecated": True,
    }
    schema["required"] = [r for r in schema.get("required", []) if r != TABLES]
    # Each branch names its property again (as `true`, no further constraint): strict JSON
    # Schema validators (the console's Ajv) refuse `required` of a property not defined beside it.
    schema["anyOf"] = [{"properties": {k: True}, "required": [k]} for k in (TABLES, LEGACY)]


__all__ = ["as_one_list", "gives_source", "take_source_too", "written_path"]
