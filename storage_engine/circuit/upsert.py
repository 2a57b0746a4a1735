"""Upsert: a keyed table's changes, given as upserts and deletes by key, as the Z-set of its
rows' changes (issue 52: inputs whose rows are updated and deleted upstream).

Input: one row per event, in arrival order within the step (of two events of one key, the
later wins): the key columns, the value columns and an `op` column, a string: one of
`DELETE_OPS` (any case) deletes the key's row, its values ignored; anything else, NULL
included, upserts it. Weights are ignored: an event happens once.

State `<id>.rows`: the live row of every key (keys, then values), weight 1.

A step keeps each key's last event, reads those keys' live rows (one vectorised seek) and
emits each old row with -1 and each upserted row with +1 (an upsert that repeats the live
row cancels out). A delete of a key without a live row changes nothing; the last step's
such deletes are kept for the caller (`take_unmatched`: dead letters).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..batch import Batch
from ..location import StorageLocation
from ..schema import WEIGHT, ZSetSchema
from ..spine import Spine
from .operator import CircuitError, Operator, empty_delta, require_columns, to_table

DELETE_OPS = ("delete", "d")
_DELETES = pa.array(DELETE_OPS, pa.string())
_DELETED = "__deleted"  # the events' delete flag, while a step sorts them out
_ORDER = "__order"  # an event's place in the step (-1: a live row before the step)


class Upsert(Operator):
    def __init__(
        self,
        op_id: str,
        input_schema: pa.Schema,
        key: Sequence[str],
        op: str,
        input: str = "source",
    ) -> None:
        super().__init__(op_id, [input])
        if not key:
            raise CircuitError(f"{op_id}: an upsert needs key columns")
        require_columns(op_id, input_schema, [*key, op], "key")
        if not pa.types.is_string(input_schema.field(op).type):
            raise CircuitError(f"{op_id}: the op column {op!r} is a string column")
        if op in key:
            raise CircuitError(f"{op_id}: the op column {op!r} is not a key column")
        self.key, self.op = list(key), op
        self.values = [n for n in input_schema.names if n not in (*key, op, WEIGHT)]
        fields = {f.name: f for f in input_schema}
        self._zs = ZSetSchema(
            tuple(fields[k] for k in self.key), tuple(fields[v] for v in self.values)
        )
        self._schema = pa.schema([*self._zs.keys, *self._zs.values])
        self._rows: Spine | None = None
        self._unmatched: pa.Table | None = None

    @property
    def output_schema(self) -> pa.Schema:
        return self._schema

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "upsert",
            "id": self.id,
            "input": self.inputs[0],
            "key": [(f.name, str(f.type)) for f in self._zs.keys],
            "values": [(f.name, str(f.type)) for f in self._zs.values],
            "op": self.op,
        }

    def open(self, location: StorageLocation, state: Mapping[str, Any]) -> None:
        self._rows = location.spine(self.spine_name("rows"), self._zs)

    def step(self, deltas: Mapping[str, pa.Table]) -> pa.Table:
        assert self._rows is not None
        self._unmatched = None
        events = deltas[self.inputs[0]]
        if events.num_rows == 0:
            return empty_delta(self._schema)
        deleted = pc.fill_null(pc.is_in(pc.utf8_lower(events.column(self.op)), _DELETES), False)
        order = pa.array(np.arange(events.num_rows), pa.int64())
        ordered = events.append_column(_DELETED, deleted).append_column(_ORDER, order)
        last = _last_per_key(ordered, self.key)
        old = to_table(self._rows.seek(last.select(self.key)))
        upserted = last.filter(pc.invert(last.column(_DELETED))).select(self._schema.names)
        parts = [
            old.set_column(old.schema.get_field_index(WEIGHT), WEIGHT, _weights(old, -1)),
            upserted.append_column(WEIGHT, _weights(upserted, 1)),
        ]
        change = Batch.from_arrow(self._zs, pa.concat_tables(parts))
        if pc.any(deleted).as_py():
            self._unmatched = _unmatched_deletes(ordered, old, self.key, self._schema)
        self._rows.insert(change)
        return to_table(change)

    def take_unmatched(self) -> pa.Table:
        """The last step's deletes of keys that had no row (key and value columns as the
        events gave them); none once taken."""
        out = self._unmatched if self._unmatched is not None else self._schema.empty_table()
        self._unmatched = None
        return out

    def metrics(self) -> dict[str, Any]:
        assert self._rows is not None
        return {"rows": self._rows.stats().rows}


def _weights(t: pa.Table, w: int) -> pa.Array:
    return pa.array(np.full(t.num_rows, w, dtype=np.int64), pa.int64())


def _last_per_key(ordered: pa.Table, key: Sequence[str]) -> pa.Table:
    """Each key's last event of `ordered` (`_ORDER`: each event's place, 0, 1, ...)."""
    last = ordered.group_by(list(key), use_threads=False).aggregate([(_ORDER, "max")])
    return ordered.take(last.column(f"{_ORDER}_max"))


def _unmatched_deletes(
    ordered: pa.Table, old: pa.Table, key: Sequence[str], schema: pa.Schema
) -> pa.Table:
    """The deletes of `ordered` (events with their `_ORDER`) whose key had no row when they
    came: none before the step (`old`: the live rows of the step's keys) nor from an earlier
    event of the step. The live rows and the events, sorted by key and then order (a live row
    first), make each key's history a run: a delete found a row if the entry before it in
    its run is a live row or an upsert. Keys compare NULL equal to NULL, as the spine's do."""
    events = ordered.select([*key, _DELETED, _ORDER])
    rows = old.select(list(key)).cast(events.select(list(key)).schema)
    live = rows.append_column(_DELETED, pa.array(np.zeros(rows.num_rows, bool))).append_column(
        _ORDER, pa.array(np.full(rows.num_rows, -1), pa.int64())
    )
    both = pa.concat_tables([live, events])
    s = both.take(pc.sort_indices(both, [*((k, "ascending") for k in key), (_ORDER, "ascending")]))
    m = s.num_rows
    same = np.ones(max(m - 1, 0), bool)  # entry i + 1 has entry i's key
    for k in key:
        a, b = s.column(k).slice(1), s.column(k).slice(0, m - 1)
        equal = pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))
        same &= equal.to_numpy(zero_copy_only=False)
    deleted = s.column(_DELETED).to_numpy(zero_copy_only=False)
    found = np.concatenate([[False], same & ~deleted[:-1]])
    hit = s.column(_ORDER).to_numpy()[deleted & ~found]
    return ordered.take(pa.array(np.sort(hit), pa.int64())).select(schema.names)


__all__ = ["DELETE_OPS", "Upsert"]
