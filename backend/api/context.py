from __future__ import annotations

from dataclasses import dataclass, field

from ..db import Database
from ..services.queue import TaskQueue
from ..services.tokens import TokenCache
from ..settings import Settings


@dataclass
class Context:
    """What the routers need, injected once at app creation (tests substitute parts)."""

    settings: Settings
    db: Database
    queue: TaskQueue
    tokens: TokenCache = field(default_factory=lambda: TokenCache(0))
