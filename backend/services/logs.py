"""Run logs: the driver's output, one file per run under the pipeline's directory."""

from __future__ import annotations

import os
from pathlib import Path


def tail(path: Path | str | None, max_bytes: int = 8192) -> str:
    """The last `max_bytes` of a log file ("" if it does not exist)."""
    if not path or not os.path.exists(path):
        return ""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(size - max_bytes, 0))
        return f.read().decode("utf-8", "replace")


__all__ = ["tail"]
