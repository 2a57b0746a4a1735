from __future__ import annotations

from dataclasses import dataclass

from ..db import Database
from ..services.queue import TaskQueue
from ..settings import Settings


@dataclass
class Context:
    """What the routers need, injected once at app creation (tests substitute parts)."""

    settings: Settings
    db: Database
    queue: TaskQueue
