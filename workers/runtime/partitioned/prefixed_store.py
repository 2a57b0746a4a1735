"""An object store seen under a key prefix: each operator-shard's durable tier is the
pipeline's store under `shards/<operator id>/<shard>/`, with its own manifests and owner
(fencing is per operator-shard: a shard that moved fences the zombie that held it, and no
other shard)."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable

from storage_engine.objstore import ObjectInfo, ObjectStoreLike, TierSettings


class PrefixedStore:
    """`inner`'s objects under `prefix` (no leading or trailing `/`), keys relative to it."""

    def __init__(self, inner: ObjectStoreLike, prefix: str) -> None:
        self.inner = inner
        self.prefix = prefix.strip("/")

    def _k(self, key: str) -> str:
        return f"{self.prefix}/{key}"

    @property
    def settings(self) -> TierSettings:
        return self.inner.settings

    @property
    def locator(self) -> str:
        return "/".join(p for p in (self.inner.locator.rstrip("/"), self.prefix) if p)

    def sibling(self, locator: str) -> ObjectStoreLike:
        return self.inner.sibling(locator)

    def url(self, key: str) -> str:
        return self.inner.url(self._k(key))

    def ensure_bucket(self) -> None:
        self.inner.ensure_bucket()

    def put_file(self, key: str, path: str) -> None:
        self.inner.put_file(self._k(key), path)

    def put_bytes(self, key: str, data: bytes) -> None:
        self.inner.put_bytes(self._k(key), data)

    def get_bytes(self, key: str, offset: int = 0, length: int = 0) -> bytes:
        return self.inner.get_bytes(self._k(key), offset, length)

    def get_into(self, key: str, write: Callable[[bytes], object], chunk: int = 1 << 20) -> int:
        return self.inner.get_into(self._k(key), write, chunk)

    def get_file(self, key: str, path: str) -> None:
        self.inner.get_file(self._k(key), path)

    def size(self, key: str) -> int | None:
        return self.inner.size(self._k(key))

    def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        cut = len(self.prefix) + 1
        return [ObjectInfo(o.key[cut:], o.size) for o in self.inner.list(self._k(prefix))]

    def remove(self, keys: Iterable[str]) -> None:
        self.inner.remove([self._k(k) for k in keys])


__all__ = ["PrefixedStore"]
