"""Shared test configuration: the quick/full profile."""

from __future__ import annotations

import os

QUICK = os.environ.get("SPINDLE_TEST_PROFILE", "full") == "quick"


def trials(full: int, quick: int) -> int:
    """How many randomized trials a test runs in the current profile."""
    return quick if QUICK else full
