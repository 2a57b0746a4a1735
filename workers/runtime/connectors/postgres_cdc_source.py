"""The `postgres_cdc` source: a PostgreSQL table's rows, then its changes, through a logical
replication slot (pgoutput), as an upserted input table (`storage_engine`'s `Upsert`).

- **First run:** the slot is created with an exported snapshot, and the table is read in
  that snapshot, so the rows and the stream meet at the slot's consistent point exactly.
  The rows are kept in the run's storage (`cdc/<table>/`, a Parquet file and `snapshot.json`,
  written before any step reads them) so that a step redone after a crash reads them again;
  a run that finds them without a checkpoint reuses them (the slot is where they left it).
- **Offset:** `{"snapshot": rows of the snapshot read, "lsn": the end of the last
  transaction read}`. A step reads whole transactions, in commit order, whose commit ends in
  (start, end]: `pg_logical_slot_peek_binary_changes`, which never moves the slot, so a
  redone step reads exactly what it read.
- **The slot advances only to what no checkpoint needs** (`release_below`: the oldest
  checkpoint a run may restore, after a gc): after a crash or a restore to any kept
  checkpoint, no change is lost or applied twice. A slot found past a restored
  checkpoint's position fails the run: the changes between are gone.
- Changes are upserts (insert, update) and deletes by the spec's key; an update that left a
  TOASTed value out (its old value unknown, without `REPLICA IDENTITY FULL`) or a value that
  does not convert is a dead letter; a TRUNCATE fails the run (the pipeline cannot tell
  which rows it deleted).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource

from pipeline_spec.offsets import Offset
from pipeline_spec.postgres_cdc import OP_COLUMN, PostgresCdcSource

from ..sources import END
from ..step_ends import StepEndsSource
from .cdc_slot import LSN, SNAPSHOT, CdcSourceError, CdcTable
from .pg_text import convert
from .pgoutput import UNCHANGED, Change, Transaction, lsn_text
from .source import PartitionSplit, Rows, SourceContext, Split, columns_ddl

log = logging.getLogger("spindle.runner")
_REASON = "__reason"


class CdcInput:
    """A `postgres_cdc` table as a run's source; the driver reads every step."""

    batches = None
    reads_ahead = False
    parses_in_driver = True
    has_lines = False
    input_log = None
    on_durable = None

    def __init__(self, spec: PostgresCdcSource, ctx: SourceContext) -> None:
        self.spec, self.table = spec, spec.table
        self._storage = ctx.storage
        self.cdc = CdcTable(spec, ctx.storage)
        self.schema = self.cdc.schema
        self._ends: CdcTable | None = None

    def first_offset(self, restored: Offset) -> Offset:
        return self.cdc.first_offset(restored)

    def step_end(self, start: Offset) -> Offset:
        assert isinstance(start, dict)
        if self._ends is None:
            self._ends = CdcTable(self.spec, self._storage)
        return _step_end(self._ends, start, self.spec.max_changes_per_step)

    def driver_step_end(self, start: Offset) -> int | None:
        return None  # the query's trigger asks (`step_end`)

    def splits(self, start: Offset, end: Offset) -> list[Split]:
        assert isinstance(start, dict) and isinstance(end, dict)
        out: list[Split] = []
        if end.get(SNAPSHOT, 0) > start.get(SNAPSHOT, 0):
            out.append(PartitionSplit(SNAPSHOT, start.get(SNAPSHOT, 0), end[SNAPSHOT]))
        if end.get(LSN, 0) > start.get(LSN, 0):
            out.append(PartitionSplit(LSN, start.get(LSN, 0), end[LSN]))
        return out

    def to_batches(self, splits: list[Split]) -> None:
        pass  # read in the driver

    def read(self, splits: list[Split]) -> Rows:
        parts, letters = [], []
        for s in splits:
            assert isinstance(s, PartitionSplit)
            if s.partition == SNAPSHOT:
                parts.append(self._snapshot(s.start, s.end))
            else:
                rows, bad = self._changes(self.cdc.transactions(s.start, s.end))
                parts.append(rows)
                letters += bad
        rows = pa.concat_tables(parts) if parts else self._empty()
        rows = rows.append_column(END, pa.array([0] * rows.num_rows, pa.int64()))
        if not letters:
            return rows, None
        return rows, pa.table(
            {
                "__file": ["lsn"] * len(letters),
                "__lineno": pa.array([lsn for lsn, _, _ in letters], pa.int64()),
                "__line": [json.dumps(r, default=str) for _, r, _ in letters],
                _REASON: [why for _, _, why in letters],
            }
        )

    def _empty(self) -> pa.Table:
        return self.schema.empty_table()

    def _snapshot(self, start: int, end: int) -> pa.Table:
        t = self.cdc.snapshot_slice(start, end)
        ops = pa.array(["upsert"] * t.num_rows, pa.string())
        return t.append_column(OP_COLUMN, ops).cast(self.schema)

    def _changes(
        self, transactions: list[Transaction]
    ) -> tuple[pa.Table, list[tuple[int, dict[str, Any], str]]]:
        """The transactions' changes of the table as rows (its columns and op), and the
        dead letters: (commit end LSN, the change's values, why)."""
        names = list(self.spec.schema_)
        mine = (self.spec.source_schema, self.spec.source_table)
        rows: list[tuple[int, dict[str, Any], str]] = []  # lsn, values, op
        letters: list[tuple[int, dict[str, Any], str]] = []
        for t in transactions:
            for c in t.changes:
                if (c.relation.schema, c.relation.name) != mine:
                    continue
                if c.op == "truncate":
                    raise CdcSourceError(
                        f"{self.cdc._describe()}: the table was truncated (at "
                        f"{lsn_text(t.end_lsn)}): a TRUNCATE cannot be applied; take the "
                        "pipeline's state again (a new slot)"
                    )
                values, why = change_values(c, names)
                if why is not None:
                    letters.append((t.end_lsn, values, why))
                else:
                    rows.append((t.end_lsn, values, "delete" if c.op == "delete" else "upsert"))
        columns: dict[str, pa.Array] = {}
        bad: set[int] = set()
        for name in names:
            array, wrong = convert([v.get(name) for _, v, _ in rows], self.schema.field(name).type)
            columns[name], bad = array, bad | wrong
        columns[OP_COLUMN] = pa.array([op for _, _, op in rows], pa.string())
        table = pa.table(columns, schema=self.schema)
        if bad:
            for i in sorted(bad):
                letters.append(
                    (rows[i][0], rows[i][1], "a value does not convert to its column's type")
                )
            table = table.filter(pa.array([i not in bad for i in range(len(rows))]))
        return table, letters

    def split_reader(self) -> None:
        return None  # one slot, read by the driver

    def spark_query(
        self, start: Offset, ends: Callable[[], str]
    ) -> tuple[type[DataSource], dict[str, str]]:
        return StepEndsSource, {"ends": ends(), "start": json.dumps(start)}

    def waiting(self, offset: Offset) -> bool:
        assert isinstance(offset, dict)
        end = _step_end(self.cdc, offset, 1)
        return end != offset

    def lag(self, offset: Offset) -> dict[str, Any]:
        """The snapshot's rows not read yet; the stream's lag is not counted (None)."""
        assert isinstance(offset, dict)
        rows = self.cdc.snapshot_rows() - offset.get(SNAPSHOT, 0)
        return {"lag": rows if rows > 0 else None}

    def release_below(self, offset: Offset) -> None:
        """No run will restore a checkpoint before `offset`: the slot may advance to it."""
        if isinstance(offset, dict) and offset.get(LSN):
            try:
                self.cdc.release(offset[LSN])
            except CdcSourceError as e:  # the next gc tries again
                log.warning("advancing the slot: %s", e)

    def dead_letters(self, table: str, bad: pa.Table) -> list[dict[str, Any]]:
        return [
            {
                "table": table,
                "lsn": lsn_text(r["__lineno"]),
                "record": r["__line"],
                "reason": r[_REASON],
            }
            for r in bad.to_pylist()
        ]

    def close(self) -> None:
        self.cdc.close()
        if self._ends is not None:
            self._ends.close()


def _step_end(cdc: CdcTable, start: dict[str, int], most: int) -> dict[str, int]:
    """Where a step from `start` ends: the snapshot's next rows, then whole transactions, at
    most about `most` rows or changes (a transaction larger is one step)."""
    rows = cdc.snapshot_rows()
    if start.get(SNAPSHOT, 0) < rows:
        return {SNAPSHOT: min(rows, start.get(SNAPSHOT, 0) + most), LSN: start.get(LSN, 0)}
    end, taken = start.get(LSN, 0), 0
    for commit, changes in cdc.commits(end):
        if taken and taken + changes > most:
            break
        end, taken = commit, taken + changes
    return {SNAPSHOT: rows, LSN: end}


def change_values(c: Change, names: list[str]) -> tuple[dict[str, Any], str | None]:
    """A change's values of the table's columns, or why it has none."""
    if c.op == "delete":
        assert c.old is not None
        return {n: c.old.get(n) for n in names}, None
    assert c.new is not None
    values = {}
    for n in names:
        v = c.new.get(n)
        if v is UNCHANGED:
            v = UNCHANGED if c.old is None else c.old.get(n, UNCHANGED)
        if v is UNCHANGED:
            return (
                {k: x for k, x in c.new.items() if x is not UNCHANGED},
                f"an update without column {n!r}'s value (a TOASTed value left unchanged: "
                "set REPLICA IDENTITY FULL on the table)",
            )
        values[n] = v
    return values, None


class CdcKind:
    def columns(self, spec: PostgresCdcSource) -> str:
        return columns_ddl(spec.columns())

    def spark_options(self, spec: PostgresCdcSource, schema: pa.Schema, ddl: str) -> dict[str, str]:
        return {}  # the driver decides where steps end (`step_ends.py`)

    def line_records(self, spec: PostgresCdcSource) -> bool:
        return False

    def reads_by_name(self, spec: PostgresCdcSource) -> bool:
        return False

    def wall_clock(self, spec: PostgresCdcSource) -> bool:
        return True

    def open(self, spec: PostgresCdcSource, ctx: SourceContext) -> CdcInput:
        return CdcInput(spec, ctx)


KIND = CdcKind()

__all__ = ["KIND", "CdcInput", "change_values"]
