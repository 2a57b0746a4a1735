"""The spec's shared field types: names, bounded durations and counts, file paths, and the
base model every part of a spec derives from (unknown fields are errors)."""

from __future__ import annotations

import os
import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Field,
    WithJsonSchema,
)

DSN_VARIABLE = re.compile(r"\$\{(\w+)\}")
DSN_VARIABLE_PREFIX = "SPINDLE_SINK_"


def expand_sink_variables(text: str) -> str:
    """${VAR} replaced with the variable's value, only for `SPINDLE_SINK_*` credentials (the
    spec refuses any other name; this is the second check)."""

    def value(m: re.Match[str]) -> str:
        name = m.group(1)
        return os.environ.get(name, "") if name.startswith(DSN_VARIABLE_PREFIX) else ""

    return DSN_VARIABLE.sub(value, text)


NAME_RE = r"^[a-z0-9][a-z0-9_-]{0,62}$"
OP_RE = r"^[A-Za-z0-9_.-]{1,128}$"
# A run's `drop_state` entry: an operator's id, or `*` (every one whose state does not fit).
DROP_STATE_RE = r"^(\*|[A-Za-z0-9_.-]{1,128})$"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m|h|d)\s*$")
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _seconds(v: Any) -> Any:
    """'250ms', '10s', '5m', '1h', '7d' or a number of seconds."""
    if isinstance(v, str):
        m = _DURATION.match(v)
        if not m:
            raise ValueError(f"{v!r} is not a duration like 500ms, 10s, 5m, 1h or 7d")
        return float(m.group(1)) * _UNIT_S[m.group(2)]
    return v


def _duration_schema(bound: str) -> WithJsonSchema:
    # Published as what a user may write: seconds, or a duration string.
    return WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", bound: 0},
                {"type": "string", "pattern": _DURATION.pattern},
            ]
        }
    )


# Every number a spec holds is bounded: what the control plane stores, and reads back for
# a PUT, is what was validated (an unbounded integer overflowed the database, 1e999 was
# stored as infinity and read back as null).
MAX_SECONDS = 10 * 365 * 86400.0  # ten years
MAX_COUNT = 2**53  # exact in JSON's numbers and in a float
MAX_ROWS = 100_000_000  # per step
Seconds = Annotated[
    float,
    BeforeValidator(_seconds),
    Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False),
    _duration_schema("minimum"),
]
PositiveSeconds = Annotated[
    float,
    BeforeValidator(_seconds),
    Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False),
    _duration_schema("exclusiveMinimum"),
]

# A size: bytes, or pydantic's `ByteSize` strings ('64MiB' = 64 * 2**20, '64MB' = 64 * 10**6).
MemorySize = Annotated[
    ByteSize,
    Field(ge=4 << 20, le=1 << 40),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 4 << 20, "maximum": 1 << 40},
                {"type": "string", "pattern": r"^\s*(\d*\.?\d+)\s*(\w+)?$"},
            ]
        }
    ),
]


def _no_nul(path: str) -> str:
    if "\x00" in path:
        raise ValueError("a path cannot hold a NUL byte")
    return path


FilePath = Annotated[
    str,
    AfterValidator(_no_nul),
    Field(
        min_length=1,
        max_length=4096,
        description="a path inside the configured file roots (relative ones start at the "
        "first root)",
    ),
]


# A SQL table's name: a plain SQL identifier.
TABLE_RE = r"^[a-z_][a-z0-9_]{0,62}$"


class SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


TABLE_DOC = "the name SQL views read this source's rows by (pipelines with `sql`)"


class EventTime(SpecModel):
    """A SQL table's event-time column and how late its rows may come (docs/sql.md,
    Watermarks): the watermark is the newest event time so far minus `lateness`; rows
    below it are dropped, and state no later row can reach is forgotten."""

    column: str = Field(min_length=1, max_length=128, description="a timestamp column")
    lateness: Seconds = Field(0.0, description="how far behind the newest event time a row may be")


EVENT_TIME_DOC = "pipelines with `sql`: the table's event-time column and lateness"


def check_sink_variables(text: str) -> str:
    """`text` if every `${VAR}` it names is a `SPINDLE_SINK_*` variable (the only ones a spec
    may send to a server it names: `expand_sink_variables`)."""
    for name in DSN_VARIABLE.findall(text):
        if not name.startswith(DSN_VARIABLE_PREFIX):
            raise ValueError(
                f"${{{name}}}: only variables named {DSN_VARIABLE_PREFIX}* may be used"
            )
    return text
