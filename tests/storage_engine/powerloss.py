"""A FileLayer that simulates power loss (after LevelDB's FaultInjectionTestEnv).

`PowerLossFileLayer(root)` performs every operation on the real directory tree below `root`
and keeps a model of what the disk would hold after a power cut:

- a file's content is durable as of its last `WritableFile.sync()`;
- a directory's entries (name -> file or directory identity) are durable as of its last
  `sync_dir()`; a fresh `mkdir`'d directory starts with no durable entries, and is itself
  durable only once its parent is synced;
- everything that existed below `root` when the layer was created is durable.

`crash()` rewrites the tree to that durable image: names created or renamed since their
directory's last sync disappear (or revert to the previous durable entry: a rename over
`checkpoints.manifest` that was not dir-synced brings back the old manifest), removed names
that were not dir-synced come back with their durable content, and file contents revert to
their last synced bytes. A file never synced comes back empty, or (variant "prefix") with a
random prefix of the bytes written to it; a synced file may likewise keep a random prefix of
what was appended after the sync.

`crash_after=N` makes the N-th mutating call (create, write, sync, rename, remove, mkdir,
rmtree, sync_dir) raise `SimulatedCrash` without taking effect; every later mutating call
raises too (the machine is off), so a test can enumerate crash points. Reads keep working.
Fsync itself is not performed (durability is simulated), which keeps the trials fast.
"""

from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass, field

import numpy as np

from storage_engine import PosixFileLayer

MUTATING = ("create", "write", "sync", "rename", "remove", "mkdir", "rmtree", "sync_dir")


class SimulatedCrash(Exception):
    """The simulated machine lost power; no further durable operation takes effect."""


@dataclass(eq=False)
class _File:
    data: bytearray = field(default_factory=bytearray)
    synced: bytes | None = None  # content at the last sync(); None: never synced


@dataclass(eq=False)
class _Dir:
    entries: dict[str, _File | _Dir] = field(default_factory=dict)
    durable: dict[str, _File | _Dir] = field(default_factory=dict)  # as of the last sync_dir


class _PowerLossFile:
    def __init__(self, layer: PowerLossFileLayer, path: str, node: _File) -> None:
        self.path = path
        self._layer = layer
        self._node = node
        self._f = open(path, "wb")  # noqa: SIM115 - lifetime managed by close()

    def write(self, data: bytes | memoryview) -> None:
        with self._layer._op("write", self.path):
            self._f.write(data)
            self._node.data += bytes(data)

    def tell(self) -> int:
        return self._f.tell()

    def flush(self) -> None:  # the OS has the bytes; the model's disk does not
        self._f.flush()

    def sync(self) -> None:
        with self._layer._op("sync", self.path):
            self._f.flush()
            self._node.synced = bytes(self._node.data)

    def close(self) -> None:
        self._f.close()


class PowerLossFileLayer:
    def __init__(self, root: str, crash_after: int | None = None) -> None:
        self.root = os.path.abspath(root)
        self.crash_after = crash_after
        self.ops = 0
        self.crashed = False
        self.log: list[tuple[int, str, str]] = []  # (op number, op, path), for diagnostics
        self._real = PosixFileLayer()
        self._mutex = threading.RLock()
        self._tree = self._scan(self.root)

    # -- the model -----------------------------------------------------------------------

    def _scan(self, path: str) -> _Dir:
        d = _Dir()
        for name in sorted(os.listdir(path)):
            p = os.path.join(path, name)
            if os.path.isdir(p):
                d.entries[name] = self._scan(p)
            else:
                data = open(p, "rb").read()  # noqa: SIM115
                d.entries[name] = _File(bytearray(data), data)
        d.durable = dict(d.entries)
        return d

    def _parts(self, path: str) -> list[str]:
        rel = os.path.relpath(os.path.abspath(path), self.root)
        if rel == ".":
            return []
        if rel.startswith(".."):
            raise ValueError(f"{path} is outside the simulated disk {self.root}")
        return rel.split(os.sep)

    def _dir(self, path: str) -> _Dir:
        node: _File | _Dir = self._tree
        for p in self._parts(path):
            assert isinstance(node, _Dir)
            node = node.entries[p]
        assert isinstance(node, _Dir), path
        return node

    def _parent(self, path: str) -> tuple[_Dir, str]:
        parts = self._parts(path)
        return self._dir(os.path.join(self.root, *parts[:-1])), parts[-1]

    class _Op:
        def __init__(self, layer: PowerLossFileLayer, op: str, path: str) -> None:
            self.layer, self.op, self.path = layer, op, path

        def __enter__(self) -> None:
            self.layer._mutex.acquire()
            try:
                self.layer._tick(self.op, self.path)
            except BaseException:
                self.layer._mutex.release()
                raise

        def __exit__(self, *exc: object) -> None:
            self.layer._mutex.release()

    def _op(self, op: str, path: str) -> PowerLossFileLayer._Op:
        return PowerLossFileLayer._Op(self, op, path)

    def _tick(self, op: str, path: str) -> None:
        if self.crashed:
            raise SimulatedCrash(f"{op} {path}: the machine is off")
        self.ops += 1
        if self.crash_after is not None and self.ops >= self.crash_after:
            self.crashed = True
            raise SimulatedCrash(f"power loss at operation #{self.ops}: {op} {path}")
        self.log.append((self.ops, op, path))

    # -- FileLayer -----------------------------------------------------------------------

    def create(self, path: str) -> _PowerLossFile:
        with self._op("create", path):
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if isinstance(node, _File):
                node.data = bytearray()  # O_TRUNC keeps the inode; durable content unchanged
            else:
                node = _File()
                parent.entries[name] = node
            return _PowerLossFile(self, path, node)

    def map(self, path: str) -> memoryview:
        return self._real.map(path)

    def read(self, path: str) -> bytes:
        return self._real.read(path)

    def rename(self, src: str, dst: str) -> None:
        with self._op("rename", f"{src} -> {dst}"):
            self._real.rename(src, dst)
            sp, sn = self._parent(src)
            dp, dn = self._parent(dst)
            dp.entries[dn] = sp.entries.pop(sn)

    def remove(self, path: str) -> None:
        with self._op("remove", path):
            self._real.remove(path)
            parent, name = self._parent(path)
            del parent.entries[name]

    def mkdir(self, path: str) -> None:
        with self._op("mkdir", path):
            self._real.mkdir(path)
            node = self._tree
            for p in self._parts(path):
                nxt = node.entries.get(p)
                if nxt is None:
                    nxt = node.entries[p] = _Dir()
                assert isinstance(nxt, _Dir)
                node = nxt

    def rmtree(self, path: str) -> None:
        with self._op("rmtree", path):
            self._real.rmtree(path)
            parent, name = self._parent(path)
            del parent.entries[name]

    def sync_dir(self, path: str) -> None:
        with self._op("sync_dir", path):
            d = self._dir(path)
            d.durable = dict(d.entries)

    def listdir(self, path: str) -> list[str]:
        return self._real.listdir(path)

    def exists(self, path: str) -> bool:
        return self._real.exists(path)

    def isdir(self, path: str) -> bool:
        return self._real.isdir(path)

    def size(self, path: str) -> int:
        return self._real.size(path)

    # -- the crash -----------------------------------------------------------------------

    def durable_image(
        self, variant: str = "empty", rng: np.random.Generator | None = None
    ) -> dict[str, bytes | None]:
        """{relative path: content, or None for a directory} after a power cut now."""
        rng = rng or np.random.default_rng(0)
        out: dict[str, bytes | None] = {}

        def content(f: _File) -> bytes:
            base = f.synced or b""
            if variant != "prefix":
                return base
            if bytes(f.data[: len(base)]) != base:  # truncated and rewritten since the sync
                return base
            tail = bytes(f.data[len(base) :])
            return base + tail[: int(rng.integers(0, len(tail) + 1))]

        def walk(d: _Dir, rel: str) -> None:
            for name, node in sorted(d.durable.items()):
                p = os.path.join(rel, name) if rel else name
                if isinstance(node, _Dir):
                    out[p] = None
                    walk(node, p)
                else:
                    out[p] = content(node)

        walk(self._tree, "")
        return out

    def crash(
        self, variant: str = "empty", rng: np.random.Generator | None = None
    ) -> dict[str, bytes | None]:
        """Power off (if not already) and rewrite the real tree to the durable image.

        Whoever used the layer must have closed its files and released the directory lock
        (close the StorageLocation) first. Returns the image that was written.
        """
        with self._mutex:
            self.crashed = True
            image = self.durable_image(variant, rng)
            for name in os.listdir(self.root):
                p = os.path.join(self.root, name)
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p)
                else:
                    os.remove(p)
            for rel, data in sorted(image.items()):
                p = os.path.join(self.root, rel)
                if data is None:
                    os.mkdir(p)
                else:
                    with open(p, "wb") as f:
                        f.write(data)
            return image
