"""Sinks: where operators' output deltas go, each idempotent by step and able to roll back.

A sink receives, per step, the operator's output delta (rows plus `__weight`) and writes it
tagged with the step. `rollback(step)` removes everything written for later steps: a run
restored from the checkpoint of step S calls it before producing step S + 1 again, so a
crash between a sink write and the next checkpoint never duplicates output.

- `files`: one file per step, `step-<step:012d>.parquet|jsonl`, written to a temporary name
  and renamed (rewriting a step replaces it). Parquet keeps every column's type (decimal(p,
  s) too); JSON lines writes a decimal as a string of all its digits (`"1234.50"`).
- `postgres` (`postgres_sinks`): change rows (the output columns, `step`, `weight`), or the
  view's current contents by key, and a progress row, in one transaction per step.
- `delta` (`delta_sink`): the change log, or the view's current contents merged on a key, in
  a Delta Lake table, one commit per step carrying the step as Delta's transaction id.
- `kafka` (`kafka_sink`): a record per change, or per changed key (upsert), in one Kafka
  transaction per step; steps already committed to the topic are skipped, not rolled back.
- `discard`: nothing kept (Flink's `blackhole`); its rows count in the metrics.
- `view`: the integrated output kept in a spine of the pipeline's storage location, so it is
  checkpointed with the state and rolled back by the restore itself; readable by key prefix
  or by page.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, localcontext
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline_spec import model as S
from pipeline_spec.model import FilesSink as FilesSinkSpec
from pipeline_spec.model import ViewSink as ViewSinkSpec
from storage_engine import Batch, Spine, StorageLocation, ZSetSchema
from storage_engine.circuit import Stepper
from storage_engine.location_view import to_jsonable
from storage_engine.schema import WEIGHT

from .delta_sink import DeltaSink
from .kafka_sink import KafkaSink
from .postgres_sinks import PostgresSink, PostgresTableSink

STEP = "__step"
_STEP_FILE = re.compile(r"^step-(\d{12})\.(parquet|jsonl)$")


class Sink(Protocol):
    name: str

    def rollback(self, step: int) -> None:
        """Forget everything written for steps after `step`."""

    def write(self, step: int, delta: pa.Table) -> None: ...

    def sync(self) -> None:
        """Make what was written durable: called before each checkpoint."""

    def forget_through(self, step: int) -> None:
        """No rollback goes back to `step` or before (the oldest checkpoint's): what only
        such a rollback needs may go."""

    def close(self) -> None: ...


class FilesSink:
    def __init__(self, spec: FilesSinkSpec, base_dir: str = ".") -> None:
        self.name = spec.name
        os.makedirs(os.path.join(base_dir, spec.path), exist_ok=True)
        # Resolved once, as opened (and checked against the file roots): a symlink swapped
        # in later cannot redirect writes or rollback's deletions.
        self.path = os.path.realpath(os.path.join(base_dir, spec.path))
        self.format = spec.format
        self._unsynced: list[str] = []  # files written since the last `sync`

    def steps(self) -> list[int]:
        return sorted(int(m.group(1)) for n in os.listdir(self.path) if (m := _STEP_FILE.match(n)))

    def rollback(self, step: int) -> None:
        for n in os.listdir(self.path):
            m = _STEP_FILE.match(n)
            if (m and int(m.group(1)) > step) or n.endswith(".tmp"):
                os.remove(os.path.join(self.path, n))
        _fsync(self.path)

    def sync(self) -> None:
        """Make every file written so far durable (before a checkpoint covers its step)."""
        for path in self._unsynced:
            with contextlib.suppress(FileNotFoundError):  # rolled back since
                _fsync(path)
        if self._unsynced:
            _fsync(self.path)
        self._unsynced.clear()

    def write(self, step: int, delta: pa.Table) -> None:
        if delta.num_rows == 0:
            return
        name = f"step-{step:012d}.{self.format}"
        final = os.path.join(self.path, name)
        tmp = final + ".tmp"
        table = delta.append_column(STEP, pa.array([step] * delta.num_rows, pa.int64()))
        if self.format == "parquet":
            pq.write_table(table, tmp)
        else:
            with open(tmp, "w", encoding="utf-8") as f:
                for row in table.to_pylist():
                    f.write(json.dumps(row, default=_json_value) + "\n")
        os.replace(tmp, final)
        self._unsynced.append(final)

    def read_all(self) -> pa.Table | None:
        """Every change row written so far (tests, tools)."""
        files = [os.path.join(self.path, f"step-{s:012d}.{self.format}") for s in self.steps()]
        if not files:
            return None
        if self.format == "parquet":
            return pa.concat_tables([pq.read_table(f) for f in files])
        rows = []
        for f in files:
            with open(f, encoding="utf-8") as fh:
                rows += [json.loads(line) for line in fh]
        return pa.Table.from_pylist(rows)

    def forget_through(self, step: int) -> None:
        pass  # a step's file is the whole of its output

    def close(self) -> None:
        pass


def _json_value(v: Any) -> Any:
    """A value JSON has no type for: a decimal as the string of its digits (every one kept,
    `to_jsonable`), anything else (times) as its text."""
    return to_jsonable(v) if isinstance(v, Decimal) else str(v)


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DiscardSink:
    """Drops what it is given: the view is computed, and nothing is kept."""

    def __init__(self, name: str) -> None:
        self.name = name

    def rollback(self, step: int) -> None:
        pass

    def write(self, step: int, delta: pa.Table) -> None:
        pass

    def sync(self) -> None:
        pass

    def forget_through(self, step: int) -> None:
        pass

    def close(self) -> None:
        pass


class ViewSink:
    """The integrated output of an operator, in a spine checkpointed with the state."""

    def __init__(self, spec: ViewSinkSpec, schema: pa.Schema, location: StorageLocation) -> None:
        self.name = spec.name
        self.schema = ZSetSchema(tuple(schema), ())
        self.spine: Spine = location.spine(f"view.{spec.name}", self.schema)

    def rollback(self, step: int) -> None:
        pass  # the spine was restored with the checkpoint

    def sync(self) -> None:
        pass  # checkpointed with the state

    def write(self, step: int, delta: pa.Table) -> None:
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


def open_sinks(
    spec: S.PipelineSpec, circuit: Stepper, loc: StorageLocation, base_dir: str
) -> dict[str, Sink]:
    """The spec's sinks by name, each over its operator's (or view's) output schema (`files` paths
    relative to `base_dir`; `view` spines in `loc`)."""
    out: dict[str, Sink] = {}
    schemas = circuit.output_schemas
    for s in spec.sinks:
        schema = schemas[s.from_]
        if isinstance(s, S.FilesSink):
            out[s.name] = FilesSink(s, base_dir)
        elif isinstance(s, S.PostgresSink) and s.mode == "table":
            out[s.name] = PostgresTableSink(s, schema, spec.name)
        elif isinstance(s, S.PostgresSink):
            out[s.name] = PostgresSink(s, schema, spec.name)
        elif isinstance(s, S.DeltaSink):
            out[s.name] = DeltaSink(s, schema, spec.name, base_dir)
        elif isinstance(s, S.KafkaSink):
            out[s.name] = KafkaSink(s, schema, spec.name)
        elif isinstance(s, S.DiscardSink):
            out[s.name] = DiscardSink(s.name)
        else:
            out[s.name] = ViewSink(s, schema, loc)
    return out


class WrittenSteps:
    """Each sink's last step that wrote rows (a step whose view did not change writes none),
    for users to see: kept in checkpoints' metadata (`sink_steps`), so a restore rolls it
    back with the sinks and a run on another machine knows it."""

    def __init__(self, sinks: Mapping[str, Sink], restored: Mapping[str, Any]) -> None:
        self._sinks = sinks
        held = restored.get("sink_steps")
        self.steps: dict[str, int] = {
            n: v for n, v in (held if isinstance(held, dict) else {}).items() if n in sinks
        }
        self._rows: dict[str, int] = {}

    def write(self, spec: S.PipelineSpec, step: int, out: Mapping[str, pa.Table]) -> None:
        """The step's output to every sink."""
        for s in spec.sinks:
            delta = out[s.from_]
            self._sinks[s.name].write(step, delta)
            self._rows[s.name] = delta.num_rows
            if delta.num_rows:
                self.steps[s.name] = step

    def figures(self) -> dict[str, dict[str, int | None]]:
        """Per sink: `rows` written by the last step, `last_step` that wrote any."""
        return {
            n: {"rows": self._rows.get(n, 0), "last_step": self.steps.get(n)} for n in self._sinks
        }


def steps_held_beyond(sinks: dict[str, Sink], redo_through: int) -> dict[str, int]:
    """The sinks that cannot roll back (Kafka's) and hold steps after `redo_through`, the
    last step a run can redo with the input it logged: by name, the newest step each holds.
    Those steps are skipped, and their output may not be what this run would write."""
    return {
        n: s.last_step
        for n, s in sinks.items()
        if isinstance(s, KafkaSink) and s.last_step > redo_through
    }


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
