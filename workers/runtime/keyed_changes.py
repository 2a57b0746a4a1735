"""A step's changes to a keyed view, per key: the row it retracted and the row it added.

Table-mode sinks (Postgres, Delta) keep a view's current contents by key; what they apply per
step is, for each key the step changed, the old row (deleted) and the new one (inserted): an
update has both. Rows are compared as SQL compares them for grouping (a NaN equals a NaN), so
a row added and retracted within one step cancels out, whatever it holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from storage_engine.schema import WEIGHT

Row = dict[str, Any]


@dataclass(frozen=True)
class KeyChange:
    key: dict[str, Any]
    old: Row | None  # the row the step retracted
    new: Row | None  # the row the step added

    def inverse(self) -> KeyChange:
        return KeyChange(self.key, self.new, self.old)


class KeyBroken(ValueError):
    """The view holds more than one row of a key in a step's changes."""

    def __init__(self, key: dict[str, Any], why: str) -> None:
        super().__init__(why)
        self.key = key


def _hashable(v: Any) -> Any:
    return "NaN" if isinstance(v, float) and math.isnan(v) else v


def keyed_changes(delta: pa.Table, columns: list[str], key: list[str]) -> list[KeyChange]:
    """The changes of `delta` (rows of `columns` with `__weight`) per key; KeyBroken for a key
    with two rows added or two retracted, or a row added or retracted twice."""
    if delta.num_rows == 0:
        return []
    summed = delta.select([*columns, WEIGHT]).group_by(columns, use_threads=False)
    summed = summed.aggregate([(WEIGHT, "sum")])
    summed = summed.filter(pc.not_equal(summed[f"{WEIGHT}_sum"], 0))
    by_key: dict[tuple[Any, ...], list[tuple[Row, int]]] = {}
    rows = summed.select(columns).to_pylist()
    for row, w in zip(rows, summed[f"{WEIGHT}_sum"].to_pylist(), strict=True):
        by_key.setdefault(tuple(_hashable(row[k]) for k in key), []).append((row, w))
    out = []
    for changes in by_key.values():
        k = {c: changes[0][0][c] for c in key}
        old = [r for r, w in changes if w < 0]
        new = [r for r, w in changes if w > 0]
        if any(abs(w) > 1 for _, w in changes):
            raise KeyBroken(k, "the view has more than one copy of a row of it")
        if len(old) > 1 or len(new) > 1:
            raise KeyBroken(k, "the view has more than one row of it")
        out.append(KeyChange(k, old[0] if old else None, new[0] if new else None))
    return out


__all__ = ["KeyBroken", "KeyChange", "keyed_changes"]
