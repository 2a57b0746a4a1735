"""The shape of a Z-set: key columns, value columns and the int64 weight column."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

WEIGHT = "__weight"
"""Name of the weight column in every batch. Reserved: no key or value may use it."""

_FIXED_WIDTH_KINDS = (
    pa.types.is_integer,
    pa.types.is_timestamp,
    pa.types.is_date,
    pa.types.is_boolean,
)


def _is_numpy_sortable(t: pa.DataType) -> bool:
    return any(pred(t) for pred in _FIXED_WIDTH_KINDS)


@dataclass(frozen=True)
class ZSetSchema:
    """Key and value fields of a Z-set; rows sort by (key columns, value columns).

    Keys and values are ordinary Arrow fields. A Z-set without values (a set of keys with
    weights, like DBSP's OrdZSet) has an empty `values` list.
    """

    keys: tuple[pa.Field, ...]
    values: tuple[pa.Field, ...] = ()
    arrow: pa.Schema = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.keys:
            raise ValueError("a Z-set schema needs at least one key column")
        names = [f.name for f in (*self.keys, *self.values)]
        if WEIGHT in names:
            raise ValueError(f"column name {WEIGHT!r} is reserved for weights")
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate column names in {names}")
        object.__setattr__(
            self,
            "arrow",
            pa.schema([*self.keys, *self.values, pa.field(WEIGHT, pa.int64(), False)]),
        )

    @classmethod
    def of(
        cls,
        keys: Sequence[tuple[str, pa.DataType]],
        values: Sequence[tuple[str, pa.DataType]] = (),
    ) -> ZSetSchema:
        return cls(tuple(pa.field(n, t) for n, t in keys), tuple(pa.field(n, t) for n, t in values))

    @classmethod
    def from_arrow(cls, schema: pa.Schema, num_keys: int) -> ZSetSchema:
        fields = [schema.field(i) for i in range(len(schema)) if schema.field(i).name != WEIGHT]
        return cls(tuple(fields[:num_keys]), tuple(fields[num_keys:]))

    @property
    def key_names(self) -> list[str]:
        return [f.name for f in self.keys]

    @property
    def value_names(self) -> list[str]:
        return [f.name for f in self.values]

    @property
    def row_names(self) -> list[str]:
        """Columns that identify a row (keys then values), in sort order."""
        return [*self.key_names, *self.value_names]

    @property
    def numpy_sortable(self) -> bool:
        """True when every row column is fixed-width integral, so NumPy kernels apply."""
        return all(_is_numpy_sortable(f.type) for f in (*self.keys, *self.values))

    @property
    def key_schema(self) -> pa.Schema:
        return pa.schema(list(self.keys))

    def fingerprint(self) -> str:
        """Stable digest of names, types and the key/value split (not of nullability)."""
        text = ";".join(
            [f"k:{f.name}:{f.type}" for f in self.keys]
            + [f"v:{f.name}:{f.type}" for f in self.values]
        )
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
