"""Postgres sinks: a view's changes, or its current contents, in a table of the user's server.

Both modes write a step in one transaction with the sink's progress row
(`spindle_sink_progress`, keyed by pipeline and sink; a table has one writer):

- `changes`: one row per change, the view's columns plus `step` and `weight`; a rollback
  deletes the rows of later steps.
- `table`: the view's current contents, one row per key (`key`, the table's primary key):
  a change retracting a row deletes its key's row, a change adding one inserts it (a
  retraction and an addition of one key in a step: an update). Each step's changes are kept
  in `spindle_sink_undo` so that a rollback can apply them in reverse, latest step first,
  until the oldest checkpoint passes them (`forget_through`).

Decimal columns are `numeric(p, s)`. A table that exists already must hold them as they are:
a numeric of a smaller scale or fewer integral digits (Postgres would round silently, or
overflow) is refused when the sink opens; an unconstrained `numeric` is taken.

A step that breaks the table mode's contract (two rows of one key, a NULL key, a retracted
row the table does not hold) fails with `SinkError` naming the key and the view, not a
silently diverging table.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from typing import Any, NoReturn

import pyarrow as pa

from pipeline_spec.fields import expand_sink_variables
from pipeline_spec.model import PostgresSink as PostgresSinkSpec
from storage_engine.schema import WEIGHT

from ..keyed_changes import KeyBroken, KeyChange, keyed_changes
from .sink import SinkConflictError, SinkContext, SinkError

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
        return f"numeric({t.precision},{t.scale})"
    raise ValueError(f"no Postgres column type for Arrow type {t}")


class _PostgresTable(ABC):
    """A connection to the sink's server, the sink's progress row, and the table's one
    writer."""

    rolls_back = True

    def __init__(self, spec: PostgresSinkSpec, schema: pa.Schema, pipeline: str) -> None:
        import psycopg

        self.name = spec.name
        self.table = spec.table
        self.schema = schema
        self.columns = [f.name for f in schema]
        # Progress is the pipeline's sink's, not the table's: two pipelines writing one table
        # would undo each other's steps on rollback, so a table has one writer.
        self._key = f"{pipeline}/{spec.name}"
        self._conn = psycopg.connect(expand_sink_variables(spec.dsn), autocommit=False)
        self._cols = ", ".join(f'"{c}"' for c in self.columns)
        with self._conn.transaction(), self._conn.cursor() as cur:
            self._create(cur, ", ".join(f'"{f.name}" {_pg_type(f.type)}' for f in schema))
            self._check_numeric(cur)
            cur.execute(
                "CREATE TABLE IF NOT EXISTS spindle_sink_progress "
                '(sink text PRIMARY KEY, step bigint NOT NULL, "table" text)'
            )
            cur.execute('ALTER TABLE spindle_sink_progress ADD COLUMN IF NOT EXISTS "table" text')
            # Rows of releases that keyed progress by table name alone.
            cur.execute(
                'DELETE FROM spindle_sink_progress WHERE sink = %s AND "table" IS NULL',
                (self.table,),
            )
            cur.execute(
                'SELECT sink FROM spindle_sink_progress WHERE "table" = %s AND sink <> %s',
                (self.table, self._key),
            )
            other = cur.fetchone()
            if other is not None:
                raise SinkConflictError(
                    f"table {self.table!r} is written by {other[0]} (pipeline/sink); a table "
                    "takes one sink's rows: pick another table, or delete that sink's row "
                    "from spindle_sink_progress once it no longer writes there"
                )

    def _check_numeric(self, cur: Any) -> None:
        """A table that exists already must hold every decimal column's values as they are:
        Postgres would round a value to a smaller numeric scale without a word."""
        cur.execute(
            "SELECT column_name, data_type, numeric_precision, numeric_scale "
            "FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = %s",
            (self.table,),
        )
        found = {name: (kind, p, s) for name, kind, p, s in cur.fetchall()}
        for f in self.schema:
            if not pa.types.is_decimal(f.type) or f.name not in found:
                continue
            kind, p, s = found[f.name]
            if kind == "numeric" and (
                p is None or (s >= f.type.scale and p - s >= f.type.precision - f.type.scale)
            ):
                continue
            shown = kind if p is None else f"{kind}({p},{s})"
            raise SinkError(
                f"sink {self.name!r}: column {f.name!r} of table {self.table!r} is {shown}, "
                f"which cannot hold every value of the view's decimal({f.type.precision},"
                f"{f.type.scale}) without rounding or overflow: make it "
                f"{_pg_type(f.type)} or wider"
            )

    @abstractmethod
    def _create(self, cur: Any, cols: str) -> None:
        """Create the mode's tables if missing (`cols`: the view's columns as DDL)."""

    def _progress(self, cur: Any, step: int) -> None:
        cur.execute(
            'INSERT INTO spindle_sink_progress (sink, step, "table") VALUES (%s, %s, %s) '
            'ON CONFLICT (sink) DO UPDATE SET step = excluded.step, "table" = excluded."table"',
            (self._key, step, self.table),
        )

    def _copy(self, cur: Any, rows: list[dict[str, Any]]) -> None:
        with cur.copy(f'COPY "{self.table}" ({self._cols}) FROM STDIN') as cp:
            for row in rows:
                cp.write_row([row[c] for c in self.columns])

    def last_step(self) -> int:
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute("SELECT step FROM spindle_sink_progress WHERE sink = %s", (self._key,))
            row = cur.fetchone()
        return 0 if row is None else int(row[0])

    def sync(self) -> None:
        return  # each step is one committed transaction

    def forget_through(self, step: int) -> None:
        return  # change rows are the sink's output, not an undo log

    def close(self) -> None:
        self._conn.close()


class PostgresSink(_PostgresTable):
    """`changes` mode: the view's change rows, tagged with their step and weight."""

    def _create(self, cur: Any, cols: str) -> None:
        cur.execute(
            f'CREATE TABLE IF NOT EXISTS "{self.table}" '
            f"({cols}, step bigint NOT NULL, weight bigint NOT NULL)"
        )
        cur.execute(f'CREATE INDEX IF NOT EXISTS "{self.table}_step" ON "{self.table}" (step)')

    def rollback(self, step: int) -> None:
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(f'DELETE FROM "{self.table}" WHERE step > %s', (step,))
            self._progress(cur, step)

    def write(self, step: int, delta: pa.Table) -> None:
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(f'DELETE FROM "{self.table}" WHERE step = %s', (step,))  # idempotent
            if delta.num_rows:
                with cur.copy(f'COPY "{self.table}" ({self._cols}, step, weight) FROM STDIN') as cp:
                    for row in delta.to_pylist():
                        cp.write_row([*(row[c] for c in self.columns), step, row[WEIGHT]])
            self._progress(cur, step)


class PostgresTableSink(_PostgresTable):
    """`table` mode: the view's current contents, one row per `key`."""

    def __init__(self, spec: PostgresSinkSpec, schema: pa.Schema, pipeline: str) -> None:
        missing = [k for k in spec.key if k not in schema.names]
        if missing:
            raise ValueError(
                f"sink {spec.name!r}: key column(s) {', '.join(missing)} not in the view's "
                f"columns ({', '.join(schema.names)})"
            )
        self.key = list(spec.key)
        super().__init__(spec, schema, pipeline)

    def _create(self, cur: Any, cols: str) -> None:
        pk = ", ".join(f'"{k}"' for k in self.key)
        cur.execute(f'CREATE TABLE IF NOT EXISTS "{self.table}" ({cols}, PRIMARY KEY ({pk}))')
        cur.execute(
            "CREATE TABLE IF NOT EXISTS spindle_sink_undo "
            "(sink text NOT NULL, step bigint NOT NULL, old jsonb, new jsonb)"
        )
        cur.execute(
            "CREATE INDEX IF NOT EXISTS spindle_sink_undo_step ON spindle_sink_undo (sink, step)"
        )

    def rollback(self, step: int) -> None:
        """Undo the steps after `step`, latest first, from their kept changes."""
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(
                "SELECT step, old, new FROM spindle_sink_undo WHERE sink = %s AND step > %s "
                "ORDER BY step DESC",
                (self._key, step),
            )
            by_step: dict[int, list[KeyChange]] = {}
            for s, old, new in cur.fetchall():
                row = old if old is not None else new
                key = {k: row[k] for k in self.key}
                by_step.setdefault(s, []).append(KeyChange(key, new, old))  # the inverse
            for s, changes in by_step.items():  # latest first
                self._apply(cur, s, changes, from_json=True)
            cur.execute(
                "DELETE FROM spindle_sink_undo WHERE sink = %s AND step > %s", (self._key, step)
            )
            self._progress(cur, step)

    def write(self, step: int, delta: pa.Table) -> None:
        try:
            changes = keyed_changes(delta, self.columns, self.key)
        except KeyBroken as e:
            self._broken(step, e.key, str(e))
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(
                "DELETE FROM spindle_sink_undo WHERE sink = %s AND step >= %s", (self._key, step)
            )
            if changes:
                self._apply(cur, step, changes)
                with cur.copy("COPY spindle_sink_undo (sink, step, old, new) FROM STDIN") as cp:
                    for c in changes:
                        cp.write_row([self._key, step, _json(c.old), _json(c.new)])
            self._progress(cur, step)

    def _apply(
        self, cur: Any, step: int, changes: list[KeyChange], from_json: bool = False
    ) -> None:
        """Retracted rows' keys deleted, then added rows inserted (`from_json`: rows as kept
        in the undo table, whose values Postgres converts back to the columns' types)."""
        gone = [c.key for c in changes if c.old is not None]
        new = [c.new for c in changes if c.new is not None]
        where = " AND ".join(f'"{k}" = %s' for k in self.key)
        if gone:
            cur.executemany(
                f'DELETE FROM "{self.table}" WHERE {where} RETURNING 1',
                [list(k.values()) for k in gone],
                returning=True,
            )
            for key, _ in zip(gone, cur.results(), strict=True):
                if cur.fetchone() is None:
                    self._broken(step, key, "its key has no row in the table to retract")
        import psycopg

        try:
            with self._conn.transaction():  # a savepoint: the error is reported, not masked
                if from_json:
                    for row in new:
                        cur.execute(
                            f'INSERT INTO "{self.table}" SELECT * FROM '
                            f'jsonb_populate_record(NULL::"{self.table}", %s::jsonb)',
                            (json.dumps(row),),
                        )
                elif new:
                    self._copy(cur, new)
        except (psycopg.errors.UniqueViolation, psycopg.errors.NotNullViolation) as e:
            raise SinkError(
                f"sink {self.name!r}, step {step}: the view's rows do not fit table "
                f"{self.table!r} keyed by ({', '.join(self.key)}): "
                f"{str(e).strip().splitlines()[0]} (two rows of one key, or a NULL key)"
            ) from None

    def _broken(self, step: int, key: dict[str, Any], why: str) -> NoReturn:
        raise SinkError(
            f"sink {self.name!r}, step {step}: key {key} of table {self.table!r}: {why}; "
            "table mode needs a key that identifies one row of the view"
        )

    def forget_through(self, step: int) -> None:
        """No rollback goes back to `step` or before: its changes and older ones go."""
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(
                "DELETE FROM spindle_sink_undo WHERE sink = %s AND step <= %s", (self._key, step)
            )


def _json(row: dict[str, Any] | None) -> str | None:
    """A row as the undo table keeps it: JSON, with the values JSON has no literal for
    (timestamps, decimals, NaN and infinities) as the text Postgres reads them back from."""
    if row is None:
        return None
    return json.dumps(
        {k: str(v) if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()},
        default=str,
    )


def open_sink(spec: PostgresSinkSpec, ctx: SinkContext) -> PostgresSink | PostgresTableSink:
    """The sink of `spec`'s mode."""
    mode = PostgresTableSink if spec.mode == "table" else PostgresSink
    return mode(spec, ctx.schema, ctx.pipeline)


__all__ = ["PostgresSink", "PostgresTableSink", "open_sink"]
