"""A range of a sorted batch's keys, as a view's lookups name them: the rows whose leading
key columns equal `prefix` and whose next key column lies in `[ge, lt)`, either bound open
(None). `KeyRange((5,))` is every row starting with 5; `KeyRange((), ge=10, lt=20)` the rows
whose first column is in [10, 20); `KeyRange((5,), ge="a")` those starting with 5 whose
second column is "a" or above.

`select` cuts a sorted record batch, and `blocks` finds the blocks of a batch file that may
hold the range in its block index, both by binary search: a lookup in a large in-memory
batch or file costs a few dozen comparisons, not one per row or per block."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from . import kernels


@dataclass(frozen=True)
class KeyRange:
    prefix: tuple[Any, ...] = ()
    ge: Any = None
    lt: Any = None

    @property
    def bounded(self) -> bool:
        """Whether the next column after the prefix has a bound."""
        return self.ge is not None or self.lt is not None

    @property
    def width(self) -> int:
        """The key columns the range constrains."""
        return len(self.prefix) + (1 if self.bounded else 0)

    def select(self, rb: pa.RecordBatch, names: Sequence[str]) -> pa.RecordBatch:
        """The rows of `rb` (sorted by `names`) in the range."""
        start, stop = self._start(rb, names), self._stop(rb, names)
        return rb.slice(start, max(stop - start, 0))

    def blocks(self, firsts: pa.RecordBatch, lasts: pa.RecordBatch, names: Sequence[str]) -> range:
        """The blocks of a sorted file that may hold rows in the range, from its block
        index (each block's first and last key, in order): those from the first whose last
        key is not below the range to the last whose first key is not above it."""
        return range(self._start(lasts, names), self._stop(firsts, names))

    def _start(self, rb: pa.RecordBatch, names: Sequence[str]) -> int:
        """How many leading rows lie below the range."""
        if self.ge is not None:
            return kernels.count_below(rb, names, (*self.prefix, self.ge))
        return kernels.count_below(rb, names, self.prefix) if self.prefix else 0

    def _stop(self, rb: pa.RecordBatch, names: Sequence[str]) -> int:
        """How many leading rows do not lie above the range."""
        if self.lt is not None:
            return kernels.count_below(rb, names, (*self.prefix, self.lt))
        if self.prefix:
            return kernels.count_at_most(rb, names, self.prefix)
        return int(rb.num_rows)

    def typed(self, keys: Sequence[pa.Field]) -> KeyRange:
        """The range with its values (given as text, as a URL's query has them) cast to the
        types of the leading key columns `keys`; ValueError naming the value otherwise."""
        if self.width > len(keys):
            raise ValueError(f"the view has {len(keys)} columns; got {self.width} key values")
        n = len(self.prefix)
        return KeyRange(
            tuple(_cast(v, f) for v, f in zip(self.prefix, keys, strict=False)),
            None if self.ge is None else _cast(self.ge, keys[n]),
            None if self.lt is None else _cast(self.lt, keys[n]),
        )


def _cast(raw: Any, f: pa.Field) -> Any:
    if raw is None:
        return None
    try:
        return pa.scalar(raw).cast(f.type).as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        raise ValueError(f"key value {raw!r} is not a {f.type} (column {f.name!r})") from None


__all__ = ["KeyRange"]
