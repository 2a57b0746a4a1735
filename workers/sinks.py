"""Sinks: where operators' output deltas go, each idempotent by step and able to roll back.

A sink receives, per step, the operator's output delta (rows plus `__weight`) and writes it
tagged with the step. `rollback(step)` removes everything written for later steps: a run
restored from the checkpoint of step S calls it before producing step S + 1 again, so a
crash between a sink write and the next checkpoint never duplicates output.

- `files`: one file per step, `step-<step:012d>.parquet|jsonl`, written to a temporary name
  and renamed (rewriting a step replaces it).
- `postgres`: change rows (the output columns, `step`, `weight`) and a progress row, in one
  transaction per step.
- `view`: the integrated output kept in a spine of the pipeline's storage location, so it is
  checkpointed with the state and rolled back by the restore itself; readable by key prefix
  or by page.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from storage_engine import Batch, Spine, StorageLocation, ZSetSchema
from storage_engine.schema import WEIGHT

from .spec import DSN_VARIABLE, DSN_VARIABLE_PREFIX
from .spec import FilesSink as FilesSinkSpec
from .spec import PostgresSink as PostgresSinkSpec
from .spec import ViewSink as ViewSinkSpec

STEP = "__step"
_STEP_FILE = re.compile(r"^step-(\d{12})\.(parquet|jsonl)$")


class Sink(Protocol):
    name: str

    def rollback(self, step: int) -> None:
        """Forget everything written for steps after `step`."""

    def write(self, step: int, delta: pa.Table) -> None: ...

    def close(self) -> None: ...


class FilesSink:
    def __init__(self, spec: FilesSinkSpec, base_dir: str = ".") -> None:
        self.name = spec.name
        self.path = os.path.join(base_dir, spec.path)
        self.format = spec.format
        os.makedirs(self.path, exist_ok=True)

    def steps(self) -> list[int]:
        return sorted(int(m.group(1)) for n in os.listdir(self.path) if (m := _STEP_FILE.match(n)))

    def rollback(self, step: int) -> None:
        for n in os.listdir(self.path):
            m = _STEP_FILE.match(n)
            if (m and int(m.group(1)) > step) or n.endswith(".tmp"):
                os.remove(os.path.join(self.path, n))

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
                    f.write(json.dumps(row, default=str) + "\n")
        os.replace(tmp, final)

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

    def close(self) -> None:
        pass


_PG_TYPES = {
    pa.types.is_boolean: "boolean",
    pa.types.is_integer: "bigint",
    pa.types.is_floating: "double precision",
    pa.types.is_string: "text",
    pa.types.is_large_string: "text",
    pa.types.is_timestamp: "timestamptz",
    pa.types.is_date: "date",
}


def _pg_type(t: pa.DataType) -> str:
    for test, name in _PG_TYPES.items():
        if test(t):
            return name
    if pa.types.is_decimal(t):
        return "numeric"
    raise ValueError(f"no Postgres column type for Arrow type {t}")


def _expand_env(dsn: str) -> str:
    """${VAR} replaced with the variable's value, only for sink credentials (the spec
    refuses any other name; this is the second check)."""

    def value(m: re.Match[str]) -> str:
        name = m.group(1)
        return os.environ.get(name, "") if name.startswith(DSN_VARIABLE_PREFIX) else ""

    return DSN_VARIABLE.sub(value, dsn)


class PostgresSink:
    def __init__(self, spec: PostgresSinkSpec, schema: pa.Schema) -> None:
        import psycopg

        self.name = spec.name
        self.table = spec.table
        self.columns = [f.name for f in schema]
        self._conn = psycopg.connect(_expand_env(spec.dsn), autocommit=False)
        cols = ", ".join(f'"{f.name}" {_pg_type(f.type)}' for f in schema)
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(
                f'CREATE TABLE IF NOT EXISTS "{self.table}" '
                f"({cols}, step bigint NOT NULL, weight bigint NOT NULL)"
            )
            cur.execute(f'CREATE INDEX IF NOT EXISTS "{self.table}_step" ON "{self.table}" (step)')
            cur.execute(
                "CREATE TABLE IF NOT EXISTS spindle_sink_progress "
                "(sink text PRIMARY KEY, step bigint NOT NULL)"
            )

    def rollback(self, step: int) -> None:
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(f'DELETE FROM "{self.table}" WHERE step > %s', (step,))
            cur.execute(
                "INSERT INTO spindle_sink_progress (sink, step) VALUES (%s, %s) "
                "ON CONFLICT (sink) DO UPDATE SET step = excluded.step",
                (self._key, step),
            )

    @property
    def _key(self) -> str:
        return f"{self.table}"

    def write(self, step: int, delta: pa.Table) -> None:
        cols = ", ".join(f'"{c}"' for c in self.columns)
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(f'DELETE FROM "{self.table}" WHERE step = %s', (step,))  # idempotent
            if delta.num_rows:
                with cur.copy(f'COPY "{self.table}" ({cols}, step, weight) FROM STDIN') as cp:
                    for row in delta.to_pylist():
                        cp.write_row([*(row[c] for c in self.columns), step, row[WEIGHT]])
            cur.execute(
                "INSERT INTO spindle_sink_progress (sink, step) VALUES (%s, %s) "
                "ON CONFLICT (sink) DO UPDATE SET step = excluded.step",
                (self._key, step),
            )

    def close(self) -> None:
        self._conn.close()


class ViewSink:
    """The integrated output of an operator, in a spine checkpointed with the state."""

    def __init__(self, spec: ViewSinkSpec, schema: pa.Schema, location: StorageLocation) -> None:
        self.name = spec.name
        self.schema = ZSetSchema(tuple(schema), ())
        self.spine: Spine = location.spine(f"view.{spec.name}", self.schema)

    def rollback(self, step: int) -> None:
        pass  # the spine was restored with the checkpoint

    def write(self, step: int, delta: pa.Table) -> None:
        if delta.num_rows:
            self.spine.insert(Batch.from_arrow(self.schema, delta))

    def get(self, key: Sequence[Any]) -> list[dict[str, Any]]:
        """Rows whose leading columns equal `key`."""
        k = tuple(key)
        if not k:
            raise ValueError("a view lookup needs at least one key column value")
        hi = (*k[:-1], _successor(k[-1]))
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

    def close(self) -> None:
        pass


def _successor(v: Any) -> Any:
    if isinstance(v, int) and not isinstance(v, bool):
        return v + 1
    if isinstance(v, str):
        return v + "\x00"
    raise ValueError(f"cannot look a view up by a key of type {type(v).__name__}")
