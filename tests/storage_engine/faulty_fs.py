"""A FileLayer that fails chosen operations with OSError(EIO), and audits fsync handling.

    fs = FaultyFileLayer()
    fs.fail("sync", nth=2)                       # the 2nd sync from now fails, once
    fs.fail("write", times=10**9)                # every write fails until cleared
    fs.fail("sync_dir", when=lambda p: ...)      # only matching paths count
    fs.clear()

Every `WritableFile` the layer hands out is recorded. After a failed `sync()` the engine must
treat the file as lost: no further write or sync on that object (the kernel may have dropped
the dirty pages and cleared the error, so a second fsync could "succeed" on missing data), and
the file must be closed and removed (its `.mut`, or the not yet referenced checkpoint
directory holding it); a retry has to create a new file.
`violations()` lists every breach of that rule.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from storage_engine import FileLayer, PosixFileLayer

OPS = ("create", "write", "sync", "close", "rename", "remove", "mkdir", "rmtree", "sync_dir")


@dataclass
class Rule:
    op: str
    nth: int = 1  # the first matching call that fails (1-based, counted from install)
    times: int = 1  # how many matching calls fail from there on
    when: Callable[[str], bool] | None = None
    seen: int = 0
    fired: int = 0

    def hit(self, op: str, path: str) -> bool:
        if op != self.op or (self.when is not None and not self.when(path)):
            return False
        self.seen += 1
        if self.seen >= self.nth and self.fired < self.times:
            self.fired += 1
            return True
        return False


@dataclass(eq=False)
class FileRecord:
    path: str  # as created
    current: str = ""  # its name now: a file may be synced after its rename
    writes: int = 0
    syncs: int = 0
    sync_failed: bool = False
    closed: bool = False
    # Removed, before or after a failed sync: a merge may remove its input while that
    # input's deferred fsync is still to run (and fail).
    removed: bool = False
    misuse: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.current = self.current or self.path


class _FaultyFile:
    def __init__(self, layer: FaultyFileLayer, inner: object, rec: FileRecord) -> None:
        self._layer, self._inner, self.rec = layer, inner, rec
        self.path = rec.path

    def write(self, data: bytes | memoryview) -> None:
        if self.rec.sync_failed:
            self.rec.misuse.append("write after a failed sync")
        self._layer._check("write", self.path)
        self._inner.write(data)  # type: ignore[attr-defined]
        self.rec.writes += 1

    def tell(self) -> int:
        return int(self._inner.tell())  # type: ignore[attr-defined]

    def flush(self) -> None:
        self._inner.flush()  # type: ignore[attr-defined]

    def sync(self) -> None:
        if self.rec.sync_failed:
            self.rec.misuse.append("sync retried on the file object whose sync failed")
        self.rec.syncs += 1
        try:
            self._layer._check("sync", self.rec.current)
        except OSError:
            self.rec.sync_failed = True
            raise
        self._inner.sync()  # type: ignore[attr-defined]

    def close(self) -> None:
        self.rec.closed = True
        self._inner.close()  # type: ignore[attr-defined]


class FaultyFileLayer:
    def __init__(self, inner: FileLayer | None = None) -> None:
        self.inner = inner or PosixFileLayer()
        self.rules: list[Rule] = []
        self.calls: Counter[str] = Counter()
        self.injected: list[tuple[str, str]] = []
        self.files: list[FileRecord] = []
        self.trace: list[tuple[str, str]] = []
        self._mutex = threading.Lock()

    def fail(
        self,
        op: str,
        *,
        nth: int = 1,
        times: int = 1,
        when: Callable[[str], bool] | None = None,
    ) -> Rule:
        assert op in OPS, op
        rule = Rule(op, nth, times, when)
        with self._mutex:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._mutex:
            self.rules.clear()

    def _check(self, op: str, path: str) -> None:
        with self._mutex:
            self.calls[op] += 1
            self.trace.append((op, path))
            for r in self.rules:
                if r.hit(op, path):
                    self.injected.append((op, path))
                    raise OSError(errno.EIO, f"injected EIO on {op}", path)

    def violations(self) -> list[str]:
        out = []
        for r in self.files:
            out += [f"{r.path}: {m}" for m in r.misuse]
            if r.sync_failed and not r.closed:
                out.append(f"{r.path}: not closed after its sync failed")
            if r.sync_failed and not r.removed:
                out.append(f"{r.path}: not removed after its sync failed")
        return out

    # -- FileLayer -----------------------------------------------------------------------

    def create(self, path: str) -> _FaultyFile:
        self._check("create", path)
        rec = FileRecord(path)
        with self._mutex:
            self.files.append(rec)
        return _FaultyFile(self, self.inner.create(path), rec)

    def map(self, path: str) -> memoryview:
        return self.inner.map(path)

    def read(self, path: str) -> bytes:
        return self.inner.read(path)

    def rename(self, src: str, dst: str) -> None:
        self._check("rename", f"{src} -> {dst}")
        self.inner.rename(src, dst)
        with self._mutex:
            for r in self.files:
                if r.current == src and not r.removed:
                    r.current = dst

    def link(self, src: str, dst: str) -> None:
        self._check("link", f"{src} -> {dst}")
        self.inner.link(src, dst)

    def remove(self, path: str) -> None:
        self._check("remove", path)
        self.inner.remove(path)
        with self._mutex:
            for r in self.files:
                if r.current == path:
                    r.removed = True

    def mkdir(self, path: str) -> None:
        self._check("mkdir", path)
        self.inner.mkdir(path)

    def rmtree(self, path: str) -> None:
        self._check("rmtree", path)
        self.inner.rmtree(path)
        prefix = path.rstrip(os.sep) + os.sep
        with self._mutex:
            for r in self.files:
                if r.current.startswith(prefix):
                    r.removed = True

    def sync_dir(self, path: str) -> None:
        self._check("sync_dir", path)
        self.inner.sync_dir(path)

    def listdir(self, path: str) -> list[str]:
        return self.inner.listdir(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def isdir(self, path: str) -> bool:
        return self.inner.isdir(path)

    def size(self, path: str) -> int:
        return self.inner.size(path)
