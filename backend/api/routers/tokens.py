"""API tokens (admin only)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response
from sqlalchemy import select

from ...errors import Conflict, NotFound
from ...models import ApiToken, Role
from ...schemas.common import INT32_MAX
from ...schemas.tokens import TokenCreate, TokenCreated, TokenOut
from ...services import tokens
from ..deps import DB, Admin, Ctx

router = APIRouter(prefix="/api/v1/tokens", tags=["tokens"])


@router.post("", response_model=TokenCreated, status_code=201)
def create(body: TokenCreate, s: DB, _: Admin) -> TokenCreated:
    """Create a token with a role; the secret is in this response only."""
    row, secret = tokens.create(s, body.name, body.role)
    return TokenCreated(**TokenOut.model_validate(row).model_dump(), token=secret)


@router.get("", response_model=list[TokenOut])
def list_tokens(s: DB, _: Admin) -> list[TokenOut]:
    """Every token: name, role, prefix, created and last used (never the secret)."""
    return [TokenOut.model_validate(t) for t in s.scalars(select(ApiToken).order_by(ApiToken.id))]


@router.delete("/{token_id}", status_code=204)
def delete(
    token_id: Annotated[int, Path(ge=1, le=INT32_MAX)], ctx: Ctx, s: DB, _: Admin
) -> Response:
    """Revoke a token (not the last admin token)."""
    row = s.get(ApiToken, token_id)
    if row is None:
        raise NotFound(f"no token {token_id}")
    if row.role == Role.admin:
        admins = s.scalars(select(ApiToken.id).where(ApiToken.role == Role.admin)).all()
        if len(admins) <= 1:
            raise Conflict("this is the last admin token; create another admin first")
    s.delete(row)
    s.commit()  # before forgetting it, so no request can cache it again
    ctx.tokens.forget(token_id)
    return Response(status_code=204)
