from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import Field

from pipeline_spec.fields import NAME_RE

from ..models import DesiredState, PipelineState, RunState
from .common import Body, Out

# What names a checkpoint in a request: `latest`, a uuid, a step or an identifier.
CHECKPOINT_REF_RE = r"^[A-Za-z0-9_.:-]{1,255}$"


class PipelineCreate(Body):
    """A pipeline spec (docs/pipeline-spec.schema.json) plus an optional description. The
    spec's own `name` is the pipeline's name."""

    spec: dict[str, Any] = Field(description="the pipeline spec, as in a YAML/JSON spec file")
    description: str = Field("", max_length=2000)


class PipelineUpdate(PipelineCreate):
    """Replace the spec (only while stopped); the name cannot change."""


class PipelineFork(Body):
    """A new pipeline from another's checkpoint (`POST /pipelines/{name}/fork`)."""

    name: str = Field(pattern=NAME_RE, description="the new pipeline's name (a unique slug)")
    checkpoint: str = Field(
        pattern=CHECKPOINT_REF_RE,
        description="the origin's checkpoint: a uuid, an identifier, a step, or `latest`",
    )
    spec: dict[str, Any] | None = Field(
        None,
        description="the fork's spec (its `name` is the fork's name, or absent); default the "
        "origin's. Operators it changes start empty, the others keep their state",
    )
    description: str = Field("", max_length=2000)
    start: bool = Field(False, description="start the fork at once")


class Lineage(Out):
    """Where a forked pipeline came from."""

    pipeline: str = Field(description="the origin pipeline's name (it may be deleted since)")
    checkpoint: str = Field(description="the origin's checkpoint uuid (the fork's first)")
    step: int
    forked_at: dt.datetime


class SpecValidation(Out):
    valid: bool
    name: str


class RunBrief(Out):
    id: int
    number: int
    state: RunState
    started_at: dt.datetime | None
    last_step: int | None
    restart_count: int


class PipelineOut(Out):
    name: str
    description: str
    spec: dict[str, Any]
    desired_state: DesiredState
    state: PipelineState
    error: str | None
    restore_point: str | None
    durability_error: str | None = Field(
        None,
        description="the newest durability problem its run reported (a failed checkpoint or "
        "upload naming the step, the object store unreachable, fencing); null once a "
        "checkpoint is durable again",
    )
    durability_error_at: dt.datetime | None = None
    created_at: dt.datetime
    updated_at: dt.datetime
    current_run: RunBrief | None = None
    last_step: int | None = None
    checkpoints: int = 0
    forked_from: Lineage | None = Field(
        None, description="the pipeline and checkpoint it was forked from; null if not a fork"
    )


class RunOut(Out):
    id: int
    number: int
    state: RunState
    from_checkpoint: str
    drop_state: list[str] | None = None
    restored_checkpoint: str | None
    restart_count: int
    created_at: dt.datetime
    started_at: dt.datetime | None
    ended_at: dt.datetime | None
    heartbeat_at: dt.datetime | None
    first_step: int | None
    last_step: int | None
    exit_code: int | None
    exit_reason: str | None


class LogOut(Out):
    run: int | None
    lines: list[str]
