"""API tokens: random secrets stored as SHA-256 digests. The secrets carry 256 bits of
entropy, so a fast digest is enough (no password-style key stretching needed) and a lookup
is one indexed query. `TokenCache` keeps recent lookups for a few seconds so most requests
make none."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..models import ApiToken, Role, utcnow

PREFIX = "spd_"
BOOTSTRAP_NAME = "bootstrap-admin"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_secret() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def create(s: Session, name: str, role: Role, secret: str | None = None) -> tuple[ApiToken, str]:
    secret = secret or new_secret()
    row = ApiToken(name=name, role=role, token_hash=digest(secret), prefix=secret[:12])
    s.add(row)
    s.flush()
    return row, secret


LAST_USED_RESOLUTION = dt.timedelta(minutes=1)


def authenticate(s: Session, secret: str) -> ApiToken | None:
    """The token with this secret, if any. `last_used_at` is refreshed at most once a
    minute, so authenticating is a read (no write lock on SQLite) for nearly every request."""
    row = s.scalar(select(ApiToken).where(ApiToken.token_hash == digest(secret)))
    if row is not None:
        now = utcnow()
        if row.last_used_at is None or now - row.last_used_at >= LAST_USED_RESOLUTION:
            row.last_used_at = now
    return row


@dataclass(frozen=True)
class Caller:
    """Who made a request: a snapshot of their token, detached from any session."""

    id: int
    name: str
    role: Role


class TokenCache:
    """Recent `authenticate` answers per secret digest, for `ttl_s` seconds (0: off).

    A revoked token keeps working until its entry expires in each API process; revoking
    through this process forgets it at once. Unknown secrets are not cached, so a token
    created anywhere works immediately. The clock is injectable for tests."""

    MAX_ENTRIES = 10_000  # bounds memory against many distinct valid tokens

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: dict[str, tuple[float, Caller]] = {}
        self._lock = threading.Lock()

    def get(self, secret: str) -> Caller | None:
        key = digest(secret)
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                return None
            if self._clock() >= hit[0]:
                del self._entries[key]
                return None
            return hit[1]

    def put(self, secret: str, caller: Caller) -> None:
        if self.ttl_s <= 0:
            return
        with self._lock:
            if len(self._entries) >= self.MAX_ENTRIES:
                self._entries.clear()
            self._entries[digest(secret)] = (self._clock() + self.ttl_s, caller)

    def forget(self, token_id: int) -> None:
        with self._lock:
            for key in [k for k, (_, c) in self._entries.items() if c.id == token_id]:
                del self._entries[key]


def bootstrap_admin(s: Session, data_dir: Path, configured: str | None) -> str | None:
    """Make sure an admin can log in (DESIGN.md §6). A configured token is registered (its
    hash) if new. Otherwise, when no admin token exists, one is generated and written to
    `<data_dir>/admin-token` with mode 0600; returns that path's token for printing once."""
    if configured:
        if authenticate(s, configured) is None:
            # API replicas start together: another may register the same token first.
            try:
                with s.begin_nested():
                    create(s, BOOTSTRAP_NAME, Role.admin, configured)
            except IntegrityError:
                if authenticate(s, configured) is None:
                    raise
        return None
    if s.scalar(select(ApiToken.id).where(ApiToken.role == Role.admin).limit(1)) is not None:
        return None
    _, secret = create(s, BOOTSTRAP_NAME, Role.admin)
    path = data_dir / "admin-token"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")
    os.chmod(path, 0o600)
    return secret


__all__ = [
    "Caller",
    "TokenCache",
    "authenticate",
    "bootstrap_admin",
    "create",
    "digest",
    "new_secret",
]
