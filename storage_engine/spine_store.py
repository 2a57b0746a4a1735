"""What a spine needs of its storage location (`SpineStore`, which `StorageLocation`
implements), and the memory budget its in-memory batches count against: the spine depends
on this protocol, not on the location."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Protocol

import pyarrow as pa

from .batch import Batch
from .file_format import BatchFile
from .merging import Merger
from .schema import ZSetSchema
from .settings import EngineSettings


class MemoryBudget:
    """Bytes of in-memory batches held by all spines of a location."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit = limit_bytes
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    def add(self, n: int) -> None:
        with self._lock:
            self._used += n

    def over(self) -> bool:
        return self._used > self.limit


class SpineStore(Protocol):
    """What a spine needs of its storage location (`location.StorageLocation`)."""

    @property
    def settings(self) -> EngineSettings: ...

    @property
    def budget(self) -> MemoryBudget: ...

    @property
    def merger(self) -> Merger: ...

    def write_batch(self, batch: Batch, durable: bool = True) -> BatchFile: ...

    def write_batch_stream(
        self, schema: ZSetSchema, chunks: Iterable[pa.RecordBatch], durable: bool = True
    ) -> BatchFile | None: ...

    def retire_files(self, names: Sequence[str]) -> None: ...

    def discard_file(self, f: BatchFile) -> None: ...
