"""Run tokens: a driver's credential for its own run's endpoints of the REST API (its
control plane over HTTP, `api/routers/runs.py`). One per run, issued as the run's driver
is prepared and revoked when the run ends (`lifecycle`); stored as a SHA-256 digest, as API
tokens are (`tokens`). Unlike those, never cached: a revoked run token fails at once."""

from __future__ import annotations

import secrets

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ..models import Run, RunToken, utcnow
from .tokens import digest

PREFIX = "spr_"


def issue(s: Session, run: Run) -> str:
    """A new secret for `run`, replacing any it had (a repeated launch of the same run)."""
    secret = PREFIX + secrets.token_urlsafe(32)
    row = s.get(RunToken, run.id)
    if row is None:
        s.add(RunToken(run_id=run.id, token_hash=digest(secret)))
    else:
        row.token_hash, row.created_at, row.revoked_at = digest(secret), utcnow(), None
    s.flush()
    return secret


def revoke(s: Session, run: Run) -> None:
    s.execute(
        update(RunToken)
        .where(RunToken.run_id == run.id, RunToken.revoked_at.is_(None))
        .values(revoked_at=utcnow())
    )


def find(s: Session, secret: str) -> RunToken | None:
    """The token with this secret, revoked or not."""
    return s.scalar(select(RunToken).where(RunToken.token_hash == digest(secret)))


__all__ = ["PREFIX", "find", "issue", "revoke"]
