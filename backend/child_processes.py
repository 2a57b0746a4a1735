"""Child processes that do not outlive their parent.

Linux's `PR_SET_PDEATHSIG` has the kernel signal a child when its parent dies, however the
parent dies (SIGKILL and crashes included), which no cleanup code of the parent's can
promise. Used for pipeline drivers (SIGKILL: the reaper restarts them from their last
checkpoint) and for `serve`'s Celery worker (SIGTERM: a warm shutdown, pipelines checkpoint
first).

Contract: `die_with_parent` runs in the child between fork and exec (`preexec_fn`); the
signal comes when the thread that started the child exits, so start children from a thread
that lives as long as the parent (the main thread, or a long-lived one).
"""

from __future__ import annotations

import ctypes
import os

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int, nice: int = 0) -> None:
    """In the child, before exec: receive `sig` when the parent dies; and lower its priority
    by `nice` (inherited by its own children)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, sig)
    if nice:
        os.nice(nice)
