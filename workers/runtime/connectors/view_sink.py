"""The `view` sink: the integrated output of an operator kept in a spine of the pipeline's
storage location, so it is checkpointed with the state and rolled back by the restore
itself; readable by key prefix or by page."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal, localcontext
from typing import Any

import pyarrow as pa

from pipeline_spec.model import ViewSink as ViewSinkSpec
from storage_engine import Batch, Spine, StorageLocation, ZSetSchema
from storage_engine.schema import WEIGHT

from .sink import SinkContext


class ViewSink:
    """The integrated output of an operator, in a spine checkpointed with the state."""

    rolls_back = True  # by the restore of the state it is checkpointed with

    def __init__(self, spec: ViewSinkSpec, schema: pa.Schema, location: StorageLocation) -> None:
        self.name = spec.name
        self._last = 0  # the spine does not say which step it holds: this run's
        self.schema = ZSetSchema(tuple(schema), ())
        self.spine: Spine = location.spine(f"view.{spec.name}", self.schema)

    def rollback(self, step: int) -> None:
        self._last = min(self._last, step)  # the spine was restored with the checkpoint

    def sync(self) -> None:
        pass  # checkpointed with the state

    def last_step(self) -> int:
        return self._last

    def write(self, step: int, delta: pa.Table) -> None:
        self._last = step
        if delta.num_rows:
            self.spine.insert(Batch.from_arrow(self.schema, delta))

    def get(self, key: Sequence[Any]) -> list[dict[str, Any]]:
        """Rows whose leading columns equal `key`."""
        k = tuple(key)
        if not k:
            raise ValueError("a view lookup needs at least one key column value")
        hi = (*k[:-1], _successor(k[-1], self.schema.keys[len(k) - 1].type))
        rows = self.spine.range(k, hi).to_table().to_pylist()
        return [{n: r[n] for n in self.schema.key_names} for r in rows if r[WEIGHT] > 0]

    def page(self, offset: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        seen = 0
        for b in self.spine.scan():
            for r in b.to_table().to_pylist():
                if r[WEIGHT] <= 0:
                    continue
                if seen >= offset:
                    out.append({n: r[n] for n in self.schema.key_names})
                    if len(out) >= limit:
                        return out
                seen += 1
        return out

    def forget_through(self, step: int) -> None:
        pass  # checkpointed with the state

    def close(self) -> None:
        pass


def _successor(v: Any, t: pa.DataType) -> Any:
    """The smallest value of type `t` above `v`."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v + 1
    if isinstance(v, str):
        return v + "\x00"
    if isinstance(v, Decimal) and pa.types.is_decimal(t):  # one unit of its scale up
        with localcontext(prec=80):  # exact for any decimal128
            return v + Decimal(1).scaleb(-t.scale)
    raise ValueError(f"cannot look a view up by a key of type {type(v).__name__}")


def open_sink(spec: ViewSinkSpec, ctx: SinkContext) -> ViewSink:
    return ViewSink(spec, ctx.schema, ctx.location)


__all__ = ["ViewSink", "open_sink"]
