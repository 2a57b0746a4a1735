from __future__ import annotations

import datetime as dt
from typing import Any

from ..models import OperationKind, OperationStatus
from .common import Out


class OperationOut(Out):
    id: str
    pipeline: str
    kind: OperationKind
    params: dict[str, Any]
    status: OperationStatus
    result: dict[str, Any] | None
    error: str | None
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
