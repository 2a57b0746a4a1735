"""A byte-budgeted local disk cache of batch files that live in the object store.

A location restored lazily from the object store reads its batch files through
`RemoteSource`s: each is a sparse local file of the object's size, filled chunk by chunk
with ranged GETs the first time a chunk is read. The cache charges fetched bytes against a
budget and, over it, empties the least recently used files (truncating them back to holes).

Readers get copies (`zero_copy = False`), never views, so emptying a file can never change
bytes a reader holds. Objects are immutable, so a chunk once fetched never goes stale; the
batch file's block checksums still check every block on first use.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict

import numpy as np
import tenacity

from .objstore import ObjectStoreLike, RemoteUnavailableError

CHUNK_BYTES = 1 << 20


class RemoteFileCache:
    def __init__(
        self,
        store: ObjectStoreLike,
        directory: str,
        budget_bytes: int,
        key_prefix: str,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        self.store = store
        self.directory = directory
        self.budget = budget_bytes
        self.key_prefix = key_prefix
        self.chunk = chunk_bytes
        self._lock = threading.Lock()
        self._files: OrderedDict[str, RemoteSource] = OrderedDict()
        self.used = 0
        self.fetched_bytes = 0
        self.requests = 0
        os.makedirs(directory, exist_ok=True)
        for n in os.listdir(directory):  # a cache: nothing in it outlives the process
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, n))

    def source(self, name: str, size: int) -> RemoteSource:
        with self._lock:
            src = self._files.get(name)
            if src is None:
                src = RemoteSource(self, name, size)
                self._files[name] = src
            return src

    def _touch(self, src: RemoteSource, fetched: int) -> None:
        """Mark `src` most recently used and charge `fetched` bytes; evict others if over."""
        with self._lock:
            self._files.move_to_end(src.name)
            self.used += fetched
            self.fetched_bytes += fetched
            self.requests += 1 if fetched else 0
            victims = [s for s in self._files.values() if s is not src and s.cached_bytes]
        for v in victims:
            if self.used <= self.budget:
                break
            freed = v._empty()
            with self._lock:
                self.used -= freed

    def close(self) -> None:
        with self._lock:
            files, self._files = list(self._files.values()), OrderedDict()
        for f in files:
            f._close()


class RemoteSource:
    """The bytes of one object, fetched on demand (a `file_format.ByteSource`)."""

    zero_copy = False

    def __init__(self, cache: RemoteFileCache, name: str, size: int) -> None:
        self._cache = cache
        self.name = name
        self.size = size
        self.key = cache.key_prefix + name
        self._path = os.path.join(cache.directory, name)
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.ftruncate(self._fd, size)  # sparse: holes until fetched
        nchunks = (size + cache.chunk - 1) // cache.chunk
        self._have = np.zeros(nchunks, dtype=bool)
        self._cached = 0
        self._lock = threading.Lock()

    @property
    def cached_bytes(self) -> int:
        return self._cached

    def read(self, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        c = self._cache.chunk
        first, last = offset // c, (offset + length - 1) // c
        fetched = 0
        with self._lock:
            missing = np.flatnonzero(~self._have[first : last + 1]) + first
            # Coalesce runs of missing chunks into one ranged GET each.
            for run in np.split(missing, np.flatnonzero(np.diff(missing) != 1) + 1):
                if not len(run):
                    continue
                start = int(run[0]) * c
                stop = min((int(run[-1]) + 1) * c, self.size)
                data = self._get(start, stop - start)
                os.pwrite(self._fd, data, start)
                self._have[run] = True
                fetched += len(data)
            self._cached += fetched
            out = os.pread(self._fd, length, offset)
        self._cache._touch(self, fetched)
        return out

    def _get(self, offset: int, length: int) -> bytes:
        retry = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(3),
            wait=tenacity.wait_exponential(multiplier=0.1, max=1.0),
            retry=tenacity.retry_if_exception_type(RemoteUnavailableError),
            reraise=True,
        )
        data: bytes = retry(self._cache.store.get_bytes, self.key, offset, length)
        if len(data) != length:
            raise RemoteUnavailableError(
                f"{self._cache.store.url(self.key)}: short read at {offset} "
                f"({len(data)} of {length} bytes; was the object replaced?)"
            )
        return data

    def _empty(self) -> int:
        """Give the fetched bytes back to the file system; 0 if a reader holds the file."""
        if not self._lock.acquire(blocking=False):
            return 0
        try:
            freed = self.cached_bytes
            os.ftruncate(self._fd, 0)
            os.ftruncate(self._fd, self.size)
            self._have[:] = False
            self._cached = 0
            return freed
        finally:
            self._lock.release()

    def _close(self) -> None:
        with self._lock:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            with contextlib.suppress(OSError):
                os.remove(self._path)
