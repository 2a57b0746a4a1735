"""A range of a sorted batch's keys, as a view's lookups name them: the rows whose leading
key columns equal `prefix` and whose next key column lies in `[ge, lt)`, either bound open
(None). `KeyRange((5,))` is every row starting with 5; `KeyRange((), ge=10, lt=20)` the rows
whose first column is in [10, 20); `KeyRange((5,), ge="a")` those starting with 5 whose
second column is "a" or above.

A batch file reads only the blocks whose key range meets it (`skips_block`, `ends_before`);
`select` cuts a sorted record batch by binary search, so a lookup in a large in-memory batch
costs a few dozen comparisons, not one per row."""

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

    def _lo(self) -> tuple[Any, ...] | None:
        if self.ge is not None:
            return (*self.prefix, self.ge)
        return self.prefix or None

    def skips_block(self, last: tuple[Any, ...]) -> bool:
        """Whether a block whose last key is `last` lies wholly below the range."""
        lo = self._lo()
        return lo is not None and kernels.compare_rows(last[: len(lo)], lo) < 0

    def ends_before(self, first: tuple[Any, ...]) -> bool:
        """Whether a block whose first key is `first` (and every later one) lies wholly
        above the range."""
        if self.lt is not None:
            hi = (*self.prefix, self.lt)
            return kernels.compare_rows(first[: len(hi)], hi) >= 0
        n = len(self.prefix)
        return n > 0 and kernels.compare_rows(first[:n], self.prefix) > 0

    def select(self, rb: pa.RecordBatch, names: Sequence[str]) -> pa.RecordBatch:
        """The rows of `rb` (sorted by `names`) in the range."""
        lo = self._lo()
        start = kernels.count_below(rb, names, lo) if lo is not None else 0
        if self.lt is not None:
            stop = kernels.count_below(rb, names, (*self.prefix, self.lt))
        elif self.prefix:
            stop = kernels.count_at_most(rb, names, self.prefix)
        else:
            stop = rb.num_rows
        return rb.slice(start, max(stop - start, 0))

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
