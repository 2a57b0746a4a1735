"""The tests' one way to wait for something another thread or process does."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(cond: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> Any:
    """`cond()`'s first true value, asked every `every` seconds; AssertionError naming `what`
    (and the last value) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
