from __future__ import annotations

import datetime as dt

from pydantic import Field

from ..models import Role
from .common import Body, Out


class TokenCreate(Body):
    name: str = Field(min_length=1, max_length=100)
    role: Role


class TokenOut(Out):
    id: int
    name: str
    role: Role
    prefix: str
    created_at: dt.datetime
    last_used_at: dt.datetime | None


class TokenCreated(TokenOut):
    token: str = Field(description="the secret; shown only in this response")
