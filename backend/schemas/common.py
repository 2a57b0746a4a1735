from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

INT32_MAX = 2**31 - 1  # the largest value an Integer column holds on every database
INT64_MAX = 2**63 - 1


class Out(BaseModel):
    """A response: built from ORM objects by attribute."""

    model_config = ConfigDict(from_attributes=True)


class VersionOut(Out):
    version: str = Field(description="the installed release (`spindle --version` prints it)")


class Body(BaseModel):
    """A request body: unknown fields are errors, so a typo is never silently ignored."""

    model_config = ConfigDict(extra="forbid")


class FieldError(BaseModel):
    field: str
    message: str


class ErrorOut(BaseModel):
    """Every error response: a stable machine-readable code and a human message."""

    code: str
    message: str
    errors: list[FieldError] = []
    details: dict[str, Any] = {}
