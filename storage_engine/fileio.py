"""The one narrow layer through which the engine touches the file system.

Everything durable goes through a `FileLayer`, so tests can substitute a version that
records what was fsynced and simulates a power loss (see tests/storage_engine/powerloss.py), or
one that fails writes. The production layer is `PosixFileLayer`.

Durability rules the engine follows (and the fault layer enforces):
- a file's bytes are durable only after `WritableFile.sync()` (which may come after the file
  was flushed, closed for writing and renamed: the handle follows the file);
- a new name (create, rename, mkdir, remove) is durable only after `sync_dir()` on its parent.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Protocol


class WritableFile(Protocol):
    path: str

    def write(self, data: bytes | memoryview) -> None: ...

    def tell(self) -> int: ...

    def flush(self) -> None:
        """Hand buffered bytes to the OS (so readers of the file see them); not durable."""
        ...

    def sync(self) -> None: ...

    def close(self) -> None: ...


class FileLayer(Protocol):
    def create(self, path: str) -> WritableFile:
        """Create (truncate) `path` for writing."""
        ...

    def map(self, path: str) -> memoryview:
        """Read-only, zero-copy view of the whole file (empty files give an empty view)."""
        ...

    def read(self, path: str) -> bytes: ...

    def rename(self, src: str, dst: str) -> None:
        """Atomic replace of `dst` by `src` (same directory)."""
        ...

    def remove(self, path: str) -> None: ...

    def link(self, src: str, dst: str) -> None:
        """A hard link `dst` to the file `src` (the same file system): a fork's share of an
        immutable file, durable once `dst`'s directory is synced (see forks.py)."""
        ...

    def mkdir(self, path: str) -> None: ...

    def rmtree(self, path: str) -> None: ...

    def sync_dir(self, path: str) -> None: ...

    def listdir(self, path: str) -> list[str]: ...

    def exists(self, path: str) -> bool: ...

    def isdir(self, path: str) -> bool: ...

    def size(self, path: str) -> int: ...


def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """Linux's sync_file_range(2), or None where the C library has none."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_START_WRITEBACK = _sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2  # start writing the range's dirty pages; do not wait
# Written bytes between two writeback starts: RocksDB's recommended `bytes_per_sync`.
WRITEBACK_BYTES = 1 << 20


class _PosixFile:
    """A file being written. Every `WRITEBACK_BYTES` it asks the kernel to start writing
    back what was written so far (RocksDB's `bytes_per_sync`), so the final fsync of a
    large file (a merge output) waits for its last pages, not all of them. Some disks gain
    nothing from it, since an fsync's cost grows with the file's size either way: hence
    merge outputs are fsynced off the merge, see `write_batch`. A hint only: durability
    still comes from `sync()`, and a failed hint is ignored (the fsync reports the
    error)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._f = open(path, "wb")  # noqa: SIM115 - lifetime managed by close()
        self._unhinted = 0  # bytes written since writeback was last started
        self._hinted_to = 0  # writeback was started for bytes [0, _hinted_to)

    def write(self, data: bytes | memoryview) -> None:
        self._unhinted += self._f.write(data)
        if _START_WRITEBACK is not None and self._unhinted >= WRITEBACK_BYTES:
            self._f.flush()
            end = self._f.tell()
            _START_WRITEBACK(
                self._f.fileno(), self._hinted_to, end - self._hinted_to, _SYNC_FILE_RANGE_WRITE
            )
            self._hinted_to, self._unhinted = end, 0

    def tell(self) -> int:
        return self._f.tell()

    def flush(self) -> None:
        self._f.flush()

    def sync(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


class PosixFileLayer:
    """The real file system."""

    def create(self, path: str) -> WritableFile:
        return _PosixFile(path)

    def map(self, path: str) -> memoryview:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return memoryview(b"")
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return memoryview(m)

    def read(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def remove(self, path: str) -> None:
        os.remove(path)

    def link(self, src: str, dst: str) -> None:
        os.link(src, dst)

    def mkdir(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def rmtree(self, path: str) -> None:
        shutil.rmtree(path)

    def sync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def size(self, path: str) -> int:
        return os.path.getsize(path)


def write_durably(fs: FileLayer, path: str, chunks: list[bytes]) -> None:
    """Write `path` atomically: `path.mut`, fsync, rename, fsync the directory.

    A failed fsync is never retried on the same file (the kernel may have dropped the dirty
    pages and cleared the error); the partial `.mut` is removed and the error propagates so
    the caller can rewrite from scratch or give up.
    """
    tmp = path + ".mut"
    f = fs.create(tmp)
    try:
        for c in chunks:
            f.write(c)
        f.sync()
    except BaseException:
        f.close()
        _remove_quietly(fs, tmp)
        raise
    f.close()
    fs.rename(tmp, path)
    fs.sync_dir(os.path.dirname(path) or ".")


def _remove_quietly(fs: FileLayer, path: str) -> None:
    with contextlib.suppress(OSError):
        fs.remove(path)
