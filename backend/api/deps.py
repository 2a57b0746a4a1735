"""Dependencies shared by the routers: the context, a database session, the caller's
token with a minimum role, and the addressed pipeline."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import select
from sqlalchemy.orm import Session

from ..errors import Forbidden, NotFound, Unauthorized
from ..models import ApiToken, Pipeline, Role
from ..services import tokens
from .context import Context


def get_context(request: Request) -> Context:
    ctx = request.app.state.ctx
    assert isinstance(ctx, Context)
    return ctx


Ctx = Annotated[Context, Depends(get_context)]


def get_session(ctx: Ctx) -> Iterator[Session]:
    with ctx.db.session() as s:
        yield s


# Function scope: the session commits when the endpoint returns, before the response is
# sent, so a client that got a 2xx can rely on the write.
DB = Annotated[Session, Depends(get_session, scope="function")]

_bearer = HTTPBearer(auto_error=False, description="an API token: `Authorization: Bearer spd_...`")


def require(role: Role) -> Callable[..., ApiToken]:
    def check(
        ctx: Ctx, cred: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
    ) -> ApiToken:
        if cred is None or cred.scheme.lower() != "bearer" or not cred.credentials:
            raise Unauthorized("an API token is required: Authorization: Bearer <token>")
        # Its own short transaction: the request's session never carries the token's write.
        with ctx.db.session() as s:
            tok = tokens.authenticate(s, cred.credentials)
        if tok is None:
            raise Unauthorized("unknown or revoked API token")
        if tok.role.rank < role.rank:
            raise Forbidden(f"this needs the {role.value} role; the token has {tok.role.value}")
        return tok

    return check


Viewer = Annotated[ApiToken, Depends(require(Role.viewer))]
Operator = Annotated[ApiToken, Depends(require(Role.operator))]
Admin = Annotated[ApiToken, Depends(require(Role.admin))]


def pipeline_by_name(s: Session, name: str) -> Pipeline:
    p = s.scalar(select(Pipeline).where(Pipeline.name == name))
    if p is None:
        raise NotFound(f"no pipeline named {name!r}")
    return p
