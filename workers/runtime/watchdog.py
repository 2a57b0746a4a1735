"""The driver's hang watchdog. The control plane's heartbeat proves that the driver process
lives, not that its query progresses: a query stuck in Spark (a stalled JVM, a task that
never ends) leaves a live process that takes no step while input waits. The watchdog, a
thread of its own, notices that after `timeout_s` and calls `on_hang` (the runner then ends
the process at once, as a crash: a restart from the last checkpoint is always safe, and a
hung step could not be drained anyway).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class HangWatchdog:
    def __init__(
        self,
        timeout_s: float,
        last_progress: Callable[[], float],
        started: Callable[[], bool],
        input_waiting: Callable[[], bool],
        paused: Callable[[], bool],
        on_hang: Callable[[str], None],
        startup_s: float = 600.0,
    ) -> None:
        self.timeout_s = timeout_s
        # Spark's start-up before the run's first step may take long on a loaded machine:
        # until then the limit is the longer `startup_s`.
        self.startup_s = max(startup_s, timeout_s)
        self._last_progress = last_progress  # time.monotonic() of the last step (or start)
        self._started = started  # has the run taken a step yet?
        self._input_waiting = input_waiting
        self._paused = paused
        self._on_hang = on_hang
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="spindle-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        every = min(1.0, self.timeout_s / 4)
        while not self._stop.wait(every):
            if self._paused():
                continue
            idle = time.monotonic() - self._last_progress()
            limit = self.timeout_s if self._started() else self.startup_s
            if idle > limit and self._input_waiting():
                self._on_hang(
                    f"no step for {idle:.0f} s while input is waiting (timeout "
                    f"{limit:g} s): the query is stuck"
                )
                return


__all__ = ["HangWatchdog"]
