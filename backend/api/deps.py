"""Dependencies shared by the routers: the context, a database session, the caller's
token with a minimum role (or, for a run's endpoints, its run token), and the addressed
pipeline."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import select
from sqlalchemy.orm import Session

from ..errors import Forbidden, NotFound, Unauthorized
from ..models import Pipeline, Role
from ..schemas.common import INT32_MAX
from ..services import run_tokens, tokens
from ..services.tokens import Caller
from .context import Context


# Dependencies that do not block are `async def`: FastAPI runs sync ones in a thread pool,
# a hop that costs more than they do.
async def get_context(request: Request) -> Context:
    ctx = request.app.state.ctx
    assert isinstance(ctx, Context)
    return ctx


Ctx = Annotated[Context, Depends(get_context)]


async def get_session(ctx: Ctx) -> AsyncIterator[Session]:
    # Opening a session does no I/O; only ending it (commit or rollback) may block.
    s = ctx.db.sessions()
    try:
        yield s
    except BaseException:
        await run_in_threadpool(_end, s, False)
        raise
    await run_in_threadpool(_end, s, True)


def _end(s: Session, commit: bool) -> None:
    try:
        if commit:
            s.commit()
        else:
            s.rollback()
    finally:
        s.close()


# Function scope: the session commits when the endpoint returns, before the response is
# sent, so a client that got a 2xx can rely on the write.
DB = Annotated[Session, Depends(get_session, scope="function")]

_bearer = HTTPBearer(auto_error=False, description="an API token: `Authorization: Bearer spd_...`")


def _authenticate(ctx: Context, secret: str) -> Caller | None:
    # Its own short transaction: the request's session never carries the token's write.
    with ctx.db.session() as s:
        tok = tokens.authenticate(s, secret)
        return None if tok is None else Caller(tok.id, tok.name, tok.role)


def require(role: Role) -> Callable[..., Awaitable[Caller]]:
    async def check(
        ctx: Ctx, cred: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
    ) -> Caller:
        if cred is None or cred.scheme.lower() != "bearer" or not cred.credentials:
            raise Unauthorized("an API token is required: Authorization: Bearer <token>")
        caller = ctx.tokens.get(cred.credentials)
        if caller is None:
            caller = await run_in_threadpool(_authenticate, ctx, cred.credentials)
            if caller is None:
                raise Unauthorized("unknown or revoked API token")
            ctx.tokens.put(cred.credentials, caller)
        if caller.role.rank < role.rank:
            raise Forbidden(f"this needs the {role.value} role; the token has {caller.role.value}")
        return caller

    return check


Viewer = Annotated[Caller, Depends(require(Role.viewer))]
Operator = Annotated[Caller, Depends(require(Role.operator))]
Admin = Annotated[Caller, Depends(require(Role.admin))]


RunId = Annotated[int, Path(ge=1, le=INT32_MAX, description="the run's id")]


def _run_of_token(ctx: Context, secret: str) -> tuple[int, bool] | None:
    with ctx.db.session() as s:
        row = run_tokens.find(s, secret)
        return None if row is None else (row.run_id, row.revoked_at is not None)


async def require_run(
    ctx: Ctx, run_id: RunId, cred: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> int:
    """The addressed run, if the caller holds its token (a live run's: revoked when the
    run ends). Never cached, so a revocation holds at once."""
    if cred is None or cred.scheme.lower() != "bearer" or not cred.credentials:
        raise Unauthorized("a run token is required: Authorization: Bearer <token>")
    found = await run_in_threadpool(_run_of_token, ctx, cred.credentials)
    if found is None:
        raise Unauthorized("unknown run token")
    token_run, revoked = found
    if revoked:
        raise Unauthorized("revoked run token: its run has ended")
    if token_run != run_id:
        raise Forbidden(f"this token is not run {run_id}'s")
    return run_id


OwnRun = Annotated[int, Depends(require_run)]


def pipeline_by_name(s: Session, name: str) -> Pipeline:
    p = s.scalar(select(Pipeline).where(Pipeline.name == name))
    if p is None:
        raise NotFound(f"no pipeline named {name!r}")
    return p
