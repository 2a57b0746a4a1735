"""Merging sorted batches: the k-way merge of chunk streams that large merges and scans run
(`merge_stream`), and the location's merger threads that run the spines' merges (`Merger`).
A spine plans its own merges (its size tiers, in spine.py); the kernels that merge two
record batches are in kernels.py.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from . import kernels
from .schema import ZSetSchema


def merge_stream(
    sources: Sequence[Iterator[kernels.Keyed]], schema: ZSetSchema
) -> Iterator[pa.RecordBatch]:
    """K-way merge of sorted, consolidated chunk streams into consolidated chunks, in order.

    Holds one chunk per source: each round emits every buffered row <= the smallest "last row"
    among sources that still have more to read, so equal rows always meet in one round.
    A chunk's key encoding (None: unknown) is sliced along with it.
    """
    names = schema.row_names
    its = list(sources)
    bufs: list[kernels.Keyed | None] = [next(it, None) for it in its]
    done = [b is None for b in bufs]
    while True:
        live = [i for i, b in enumerate(bufs) if b is not None and b[0].num_rows]
        if not live:
            return
        tails = [_last_row(bufs[i], names) for i in live if not done[i]]
        parts: list[kernels.Keyed] = []
        if not tails:
            parts = [b for b in (bufs[i] for i in live) if b is not None]
            for i in live:
                bufs[i] = None
        else:
            cut = tails[0]
            for t in tails[1:]:
                if kernels.compare_rows(t, cut) < 0:
                    cut = t
            for i in live:
                b = bufs[i]
                assert b is not None
                rb, enc = b
                n = kernels.count_at_most(rb, names, cut)
                if n:
                    parts.append((rb.slice(0, n), None if enc is None else enc.slice(0, n)))
                    bufs[i] = (rb.slice(n), None if enc is None else enc.slice(n))
        out = kernels.merge_keyed([p for p, _ in parts], schema, [e for _, e in parts])[0]
        if out.num_rows:
            yield out
        for i, b in enumerate(bufs):
            while not done[i] and (b is None or b[0].num_rows == 0):
                b = next(its[i], None)
                if b is None:
                    done[i] = True
                bufs[i] = b


def _last_row(chunk: kernels.Keyed | None, names: list[str]) -> tuple[Any, ...]:
    assert chunk is not None
    rb = chunk[0]
    return kernels.row_tuple(rb, names, rb.num_rows - 1)


class Merger:
    """Background threads per location running merge tasks for all its spines.

    A spine plans merges of disjoint groups (entries are marked busy), so several can run
    at once: with two threads, the small merges of new batches need not wait behind a
    large merge that is writing a file.
    """

    def __init__(self, threads: int = 1) -> None:
        self._q: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._threads = [
            threading.Thread(target=self._run, name=f"spine-merger-{i}", daemon=True)
            for i in range(threads)
        ]
        for t in self._threads:
            t.start()

    def submit(self, task: Callable[[], None]) -> None:
        self._q.put(task)

    def _run(self) -> None:
        while True:
            task = self._q.get()
            if task is None:
                return
            # Tasks record their own failures on their spine; this only keeps one escaped
            # exception from silently stopping every later merge of the location.
            with contextlib.suppress(BaseException):
                task()

    def close(self) -> None:
        for _ in self._threads:
            self._q.put(None)
        for t in self._threads:
            t.join()
