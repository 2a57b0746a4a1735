"""What the servers here share: free loopback ports, and children that die with the test.

Imports only the standard library."""

from __future__ import annotations

import ctypes
import random
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path


def free_ports(n: int) -> list[int]:
    """`n` distinct ports free on 127.0.0.1, taken below the kernel's ephemeral range when it
    leaves room, so that outgoing connections (the server's own, between its components)
    cannot take them while the server is stopped or still starting up."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        ephemeral_low = int(text.split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    low = 10000
    candidates = list(range(low, ephemeral_low)) if ephemeral_low - low >= 1000 else []
    random.shuffle(candidates)
    held: list[socket.socket] = []
    try:
        for port in [*candidates, *[0] * n]:
            if len(held) == n:
                break
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            held.append(s)
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def _pdeathsig_setter() -> Callable[[], None] | None:
    """Linux: a preexec_fn that has the kernel SIGKILL the server when the thread that started
    it exits (so a killed pytest leaves no orphan server; used for starts from the main thread
    only). Everything is looked up here, before the fork: the child makes one libc call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig, sigkill = 1, int(signal.SIGKILL)

    def preexec() -> None:  # pragma: no cover - runs in the child between fork and exec
        prctl(pr_set_pdeathsig, sigkill)

    return preexec


DIE_WITH_PARENT = _pdeathsig_setter()

__all__ = ["DIE_WITH_PARENT", "free_ports"]
