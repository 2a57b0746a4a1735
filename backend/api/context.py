from __future__ import annotations

from dataclasses import dataclass, field

from ..db import Database
from ..services.queue import TaskQueue
from ..services.tokens import TokenCache
from ..services.views import LiveViews
from ..settings import Settings
from .read_cache import ReadCache


@dataclass
class Context:
    """What the routers need, injected once at app creation (tests substitute parts)."""

    settings: Settings
    db: Database
    queue: TaskQueue
    tokens: TokenCache = field(default_factory=lambda: TokenCache(0))
    reads: ReadCache = field(default_factory=lambda: ReadCache(0))
    live: LiveViews = field(default_factory=LiveViews)  # running drivers' views
