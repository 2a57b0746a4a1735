"""Byte-budgeted LRU of decoded blocks, shared by every batch file of a storage location.

Entries are keyed by (file id, block number). `get` loads through the caller's loader on a
miss; `prefetch` schedules loads on a small thread pool so a step can announce the blocks
it will need (seed 002: prefetch from the keys of the incoming batch).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    prefetched: int = 0


class BufferCache:
    def __init__(self, budget_bytes: int, prefetch_threads: int = 2) -> None:
        self.budget_bytes = budget_bytes
        self.stats = CacheStats()
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=prefetch_threads, thread_name_prefix="prefetch")
        self._inflight: dict[Hashable, Future[Any]] = {}

    @property
    def used_bytes(self) -> int:
        return self._bytes

    def get(self, key: Hashable, loader: Callable[[], tuple[Any, int]]) -> Any:
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                self.stats.hits += 1
                return hit[0]
            pending = self._inflight.get(key)
        if pending is not None:
            return pending.result()
        value, size = loader()
        with self._lock:
            self.stats.misses += 1
            self._insert(key, value, size)
        return value

    def contains(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._entries

    def prefetch(self, items: list[tuple[Hashable, Callable[[], tuple[Any, int]]]]) -> None:
        """Hint: load these blocks in the background if they are not cached already."""
        for key, loader in items:
            with self._lock:
                if key in self._entries or key in self._inflight:
                    continue
                fut = self._pool.submit(self._load_prefetch, key, loader)
                self._inflight[key] = fut

    def _load_prefetch(self, key: Hashable, loader: Callable[[], tuple[Any, int]]) -> Any:
        try:
            value, size = loader()
            with self._lock:
                self.stats.prefetched += 1
                self._insert(key, value, size)
            return value
        finally:
            with self._lock:
                self._inflight.pop(key, None)

    def _insert(self, key: Hashable, value: Any, size: int) -> None:
        if key in self._entries:
            self._bytes -= self._entries.pop(key)[1]
        self._entries[key] = (value, size)
        self._bytes += size
        while self._bytes > self.budget_bytes and len(self._entries) > 1:
            _, (_, s) = self._entries.popitem(last=False)
            self._bytes -= s
            self.stats.evictions += 1

    def evict_file(self, file_id: Hashable) -> None:
        """Drop every block of a file (it was deleted or replaced)."""
        with self._lock:
            for k in [k for k in self._entries if isinstance(k, tuple) and k[0] == file_id]:
                self._bytes -= self._entries.pop(k)[1]

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
