"""The one narrow layer through which the engine touches the file system.

Everything durable goes through a `FileLayer`, so tests can substitute a version that
records what was fsynced and simulates a power loss (see tests/engine/powerloss.py), or
one that fails writes. The production layer is `PosixFileLayer`.

Durability rules the engine follows (and the fault layer enforces):
- a file's bytes are durable only after `WritableFile.sync()`;
- a new name (create, rename, mkdir, remove) is durable only after `sync_dir()` on its parent.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
from pathlib import Path
from typing import Protocol


class WritableFile(Protocol):
    path: str

    def write(self, data: bytes | memoryview) -> None: ...

    def tell(self) -> int: ...

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

    def mkdir(self, path: str) -> None: ...

    def rmtree(self, path: str) -> None: ...

    def sync_dir(self, path: str) -> None: ...

    def listdir(self, path: str) -> list[str]: ...

    def exists(self, path: str) -> bool: ...

    def isdir(self, path: str) -> bool: ...

    def size(self, path: str) -> int: ...


class _PosixFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self._f = open(path, "wb")  # noqa: SIM115 - lifetime managed by close()

    def write(self, data: bytes | memoryview) -> None:
        self._f.write(data)

    def tell(self) -> int:
        return self._f.tell()

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
