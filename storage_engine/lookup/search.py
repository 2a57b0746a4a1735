"""A static search tree over a sorted integer column: `np.searchsorted` for many probes,
with fewer cache misses.

A binary search of a large array misses the cache at each of its last ten or so steps. The
tree cuts the column into nodes of 8 keys (one 64-byte cache line), the nodes' largest keys
into nodes of 8 again, until the top fits in the L2 cache (`_TOP` keys). A lookup binary
searches the top, then reads one node per level below it: a probe's whole path costs about
one cache miss per level, and NumPy gathers the nodes of all probes at once (its gain over
`np.searchsorted` is measured in docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[Any]
IntArray = npt.NDArray[np.int64]

_FANOUT = 8  # keys per node: one cache line of 8-byte keys
_TOP = 1 << 15  # the top level's keys: 256 KiB of int64, within L2
_BYTE_SUM = np.uint64(0x0101010101010101)  # times 8 bytes of 0/1: their sum in the top byte
_STEPS = 4  # keys past a run's known end that `run_ends` compares one by one


class SearchTree:
    """`lower_bound(probes)` equals `np.searchsorted(keys, probes, side="left")`.

    `keys` is kept as a view of the tree's padded copy (the last node filled with the
    type's largest value), so the tree costs the column no second copy if callers use
    `tree.keys` in its place."""

    def __init__(self, keys: Array) -> None:
        self.size = len(keys)
        levels = []
        level = _padded(keys)
        self.keys: Array = level[: self.size]
        while True:
            nodes = level.reshape(-1, _FANOUT)
            levels.append(nodes)
            fences = nodes[:, -1]
            if len(fences) <= _TOP:
                break
            level = _padded(fences)
        self._levels = levels[::-1]  # top first
        self._top = np.ascontiguousarray(fences)

    @property
    def nbytes(self) -> int:
        return sum(int(lv.nbytes) for lv in self._levels) + int(self._top.nbytes)

    def lower_bound(self, probes: Array) -> IntArray:
        """For each probe, the number of keys smaller than it."""
        node, keys = self._leaves(probes)
        out: IntArray = np.minimum(node * _FANOUT + _count(keys < probes[:, None]), self.size)
        return out

    def equal_range(self, probes: Array) -> tuple[IntArray, IntArray]:
        """For each probe, the keys smaller than it and the keys at most equal to it (the
        "left" and "right" `np.searchsorted`): its equal keys are [lo, hi). Both come from
        the one node a lookup reads, unless a run of equal keys goes on past its end."""
        node, keys = self._leaves(probes)
        start = node * _FANOUT
        lo = np.minimum(start + _count(keys < probes[:, None]), self.size)
        at_most = _count(keys <= probes[:, None])
        hi = np.minimum(start + at_most, self.size)
        # a node's keys all equal to the probe: the run may go on in the next nodes
        more = np.flatnonzero((at_most == _FANOUT) & (hi < self.size))
        if len(more):
            hi[more] = run_ends(self.keys, hi[more], probes[more])
        return lo, hi

    def _leaves(self, probes: Array) -> tuple[IntArray, Array]:
        """For each probe, the first bottom node whose largest key is not smaller than it
        (the last node if none), and that node's keys, one row per probe."""
        node = np.searchsorted(self._top, probes, side="left")
        keys = self._top
        for nodes in self._levels:
            np.minimum(node, len(nodes) - 1, out=node)  # past every key: the last node
            keys = np.take(nodes, node, axis=0)
            if nodes is not self._levels[-1]:
                node *= _FANOUT
                node += _count(keys < probes[:, None])
        return node, keys


def run_ends(keys: Array, ends: IntArray, values: Array) -> IntArray:
    """Each `ends[i]`, a position just past a key equal to `values[i]` in sorted `keys`,
    moved past the keys after it that equal `values[i]` too: the end of that run.

    A key has few rows (one per value) in most state, so the next keys are compared one at
    a time, for fewer runs each time; runs longer than `_STEPS` get a binary search (a
    search per probe costs as much as a lookup's first, cache-cold one)."""
    n = len(keys)
    hi = ends.copy()
    at = np.flatnonzero(hi < n)
    for _ in range(_STEPS):
        at = at[keys[hi[at]] == values[at]]
        if not len(at):
            return hi
        hi[at] += 1
        at = at[hi[at] < n]
    if len(at):
        hi[at] = np.searchsorted(keys, values[at], side="right")
    return hi


def _count(flags: Array) -> IntArray:
    """The number of True in each row of 8 booleans (a node's comparisons)."""
    counts = flags.view(np.uint64).ravel() * _BYTE_SUM
    counts >>= np.uint64(56)
    out: IntArray = counts.view(np.int64)
    return out


def _padded(keys: Array) -> Array:
    """`keys` copied into a whole number of nodes, the rest filled with the largest value
    of their type (which sorts last, so it is never counted as smaller than a probe)."""
    n = len(keys)
    out = np.empty(max(_FANOUT, -(-n // _FANOUT) * _FANOUT), dtype=keys.dtype)
    out[:n] = keys
    out[n:] = np.iinfo(keys.dtype).max
    return out
