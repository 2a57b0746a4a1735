from __future__ import annotations

import datetime as dt

from pydantic import Field

from .common import INT32_MAX, Body, Out


class CheckpointOut(Out):
    uuid: str
    identifier: str | None
    step: int
    parent: str | None
    created_at: dt.datetime
    size_bytes: int
    new_bytes: int
    duration_ms: float
    source_offset: int | None = Field(description="the `source` table's offset")
    source_offsets: dict[str, int | dict[str, int]] | None = Field(
        description="every input table's offset, by table name (`source`'s first): a count, "
        "or a Kafka table's next offset per partition (`<topic>:<partition>`)"
    )
    local_durable: bool
    remote_durable: bool
    pinned: bool


class CheckpointCreate(Body):
    identifier: str | None = Field(None, max_length=255, pattern=r"^[A-Za-z0-9_.:-]+$")


class CheckpointPatch(Body):
    pinned: bool


class GcRequest(Body):
    keep: int | None = Field(
        None,
        ge=0,
        le=INT32_MAX,
        description="delete the oldest unpinned checkpoints until this many remain",
    )


class RetentionIn(Body):
    keep_last: int | None = Field(None, ge=1, le=INT32_MAX)
    max_age_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    min_keep: int = Field(1, ge=0, le=INT32_MAX)
    auto_commit_interval_s: float | None = Field(None, gt=0, allow_inf_nan=False)


class RetentionOut(Out):
    keep_last: int | None
    max_age_s: float | None
    min_keep: int
    auto_commit_interval_s: float | None
