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
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource

from pipeline_spec.fields import expand_sink_variables
from pipeline_spec.offsets import Offset
from pipeline_spec.postgres_cdc import OP_COLUMN, PostgresCdcSource

from ..sources import END
from ..step_ends import StepEndsSource
from .pg_text import convert
from .pgoutput import UNCHANGED, Change, Decoder, PgOutputError, Transaction, lsn_int, lsn_text
from .source import PartitionSplit, Rows, SourceContext, Split, columns_ddl

log = logging.getLogger("spindle.runner")
SNAPSHOT, LSN = "snapshot", "lsn"
TIMEOUT_S = 30.0  # connecting, or waiting for the slot another reader holds
_FETCH = 10_000
_REASON = "__reason"
# A commit message's end position (bytes 10-17 of the message, big-endian) as a bigint, and
# the kinds of message that are a change (insert, update, delete, truncate).
_END = (
    "CASE WHEN get_byte(data, 0) = 67 THEN "
    "('x' || encode(substring(data from 11 for 8), 'hex'))::bit(64)::bigint END"
)
_CHANGES = ", ".join(str(ord(k)) for k in "IUDT")


class CdcSourceError(RuntimeError):
    """The database cannot be reached, the slot is gone or behind, or a change cannot be
    applied."""


class CdcTable:
    """One `postgres_cdc` table's connection to its database, in the driver."""

    def __init__(self, spec: PostgresCdcSource, storage: str) -> None:
        self.spec = spec
        self.schema = spec.arrow_schema()
        self.dir = os.path.join(storage, "cdc", spec.table)
        self._dsn = expand_sink_variables(spec.dsn)
        self._conn: Any = None
        self._lock = threading.Lock()  # one statement at a time on the connection

    def _describe(self) -> str:
        return f"postgres_cdc table {self.spec.table!r} (slot {self.spec.slot!r})"

    def _connect(self, **kwargs: Any) -> Any:
        import psycopg

        try:
            return psycopg.connect(
                self._dsn, autocommit=True, connect_timeout=int(TIMEOUT_S), **kwargs
            )
        except psycopg.Error as e:
            raise CdcSourceError(f"{self._describe()}: cannot connect: {e}") from None

    def _query(self, sql: Any, params: Any = ()) -> list[tuple[Any, ...]]:
        """`sql`'s rows; a slot another session holds is waited for (`TIMEOUT_S`)."""
        import psycopg
        from psycopg import errors

        deadline = time.monotonic() + TIMEOUT_S
        with self._lock:
            while True:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                try:
                    cur = self._conn.execute(sql, params)
                    return list(cur.fetchall()) if cur.description is not None else []
                except errors.ObjectInUse as e:
                    if time.monotonic() > deadline:
                        raise CdcSourceError(f"{self._describe()}: {e}") from None
                    time.sleep(0.1)
                except psycopg.OperationalError as e:
                    self._conn = None
                    raise CdcSourceError(f"{self._describe()}: {e}") from None
                except psycopg.Error as e:
                    raise CdcSourceError(f"{self._describe()}: {e}") from None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    # The snapshot.

    def snapshot_rows(self) -> int:
        meta = self._snapshot_meta()
        if meta is None:
            raise CdcSourceError(f"{self._describe()}: its snapshot is not in {self.dir}")
        return int(meta["rows"])

    def _snapshot_meta(self) -> dict[str, Any] | None:
        try:
            with open(os.path.join(self.dir, "snapshot.json"), encoding="utf-8") as f:
                meta: dict[str, Any] = json.load(f)
        except FileNotFoundError:
            return None
        return meta if meta.get("slot") == self.spec.slot else None

    def _slot_position(self) -> int | None:
        """Where the slot is (its confirmed position), None if it does not exist."""
        rows = self._query(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (self.spec.slot,),
        )
        return None if not rows or rows[0][0] is None else lsn_int(rows[0][0])

    def first_offset(self, restored: Offset) -> dict[str, int]:
        """A restored offset, checked against the slot; a first run's: a new snapshot (or
        the one a run before took, if nothing was checkpointed since)."""
        at = self._slot_position()
        if restored:
            assert isinstance(restored, dict)
            if at is None:
                raise CdcSourceError(f"{self._describe()}: the slot does not exist any more")
            if at > restored.get(LSN, 0):
                raise CdcSourceError(
                    f"{self._describe()}: the slot is at {lsn_text(at)}, past the "
                    f"checkpoint's {lsn_text(restored.get(LSN, 0))}: the changes between "
                    "are gone"
                )
            return dict(restored)
        meta = self._snapshot_meta()
        if meta is None or at is None or at > int(meta["lsn"]):
            meta = self._take_snapshot(slot_exists=at is not None)
        return {SNAPSHOT: 0, LSN: int(meta["lsn"])}

    def _take_snapshot(self, slot_exists: bool) -> dict[str, Any]:
        from psycopg import sql

        spec, source = self.spec, self._source_table()
        pub = spec.publication_name()
        if not self._query("SELECT 1 FROM pg_publication WHERE pubname = %s", (pub,)):
            self._query(
                sql.SQL("CREATE PUBLICATION {} FOR TABLE {} WITH (publish = {})").format(
                    sql.Identifier(pub), source, sql.Literal("insert, update, delete")
                )
            )
        if slot_exists:  # a first run's: nothing of this pipeline needs it
            self._query("SELECT pg_drop_replication_slot(%s)", (spec.slot,))
        os.makedirs(self.dir, exist_ok=True)
        repl = self._connect(replication="database")
        try:
            created = repl.execute(
                sql.SQL("CREATE_REPLICATION_SLOT {} LOGICAL pgoutput (SNAPSHOT 'export')").format(
                    sql.Identifier(spec.slot)
                )
            ).fetchone()
            lsn, snapshot = lsn_int(created[1]), created[2]
            rows = self._read_snapshot(snapshot)
        except Exception as e:
            raise CdcSourceError(f"{self._describe()}: taking the snapshot: {e}") from None
        finally:
            repl.close()
        meta = {"slot": spec.slot, "lsn": lsn, "rows": rows}
        path = os.path.join(self.dir, "snapshot.json")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(meta, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
        log.info("%s: snapshot of %d rows at %s", self._describe(), rows, lsn_text(lsn))
        return meta

    def _source_table(self) -> Any:
        from psycopg import sql

        return sql.Identifier(self.spec.source_schema, self.spec.source_table)

    def _read_snapshot(self, snapshot: str) -> int:
        """The table's rows in the exported `snapshot`, into the snapshot file; how many."""
        import psycopg
        from psycopg import sql

        names = list(self.spec.schema_)
        select = sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c)) for c in names),
            self._source_table(),
        )
        path = os.path.join(self.dir, "snapshot.parquet")
        schema = pa.schema([self.schema.field(c) for c in names])
        n = 0
        with psycopg.connect(self._dsn, connect_timeout=int(TIMEOUT_S)) as c:
            c.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            c.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
            with c.cursor(name="snapshot") as cur, pq.ParquetWriter(path + ".tmp", schema) as w:
                cur.execute(select)
                while batch := cur.fetchmany(_FETCH):
                    columns = {}
                    for i, name in enumerate(names):
                        array, bad = convert([r[i] for r in batch], schema.field(name).type)
                        if bad:
                            raise CdcSourceError(
                                f"{self._describe()}: column {name!r}: "
                                f"{batch[min(bad)][i]!r} does not convert"
                            )
                        columns[name] = array
                    w.write_table(pa.table(columns, schema=schema))
                    n += len(batch)
        os.replace(path + ".tmp", path)
        return n

    # The stream.

    def _peeked(self, query: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """`query` over the slot's pending messages (`p`: xid, data, n, their order),
        peeked up to `upto` (None: all), the slot left where it is."""
        peek = (
            "WITH p AS MATERIALIZED (SELECT xid, data, n FROM "
            "pg_logical_slot_peek_binary_changes(%(slot)s, %(upto)s::pg_lsn, NULL, "
            "'proto_version', '1', 'publication_names', %(pub)s) "
            "WITH ORDINALITY AS m(lsn, xid, data, n)) "
        )
        slot = {"slot": self.spec.slot, "pub": self.spec.publication_name()}
        return self._query(peek + query, {"upto": None, **slot, **params})

    def commits(self, after: int) -> list[tuple[int, int]]:
        """(commit end, changes) of each committed transaction whose commit ends after
        `after`, in commit order: counted by the server, nothing decoded here."""
        rows = self._peeked(
            f"SELECT max({_END}), count(*) FILTER (WHERE get_byte(data, 0) IN ({_CHANGES})) "
            f"FROM p GROUP BY xid HAVING max({_END}) > %(after)s ORDER BY max(n)",
            {"after": after},
        )
        return [(int(end), int(n)) for end, n in rows]

    def transactions(self, after: int, upto: int) -> list[Transaction]:
        """The committed transactions whose commit ends in (`after`, `upto`], in commit
        order: only theirs and the relations' messages leave the server."""
        rows = self._peeked(
            f"SELECT data FROM p WHERE get_byte(data, 0) = {ord('R')} OR xid IN "
            f"(SELECT xid FROM p WHERE {_END} > %(after)s) ORDER BY n",
            {"after": after, "upto": lsn_text(upto)},
        )
        decoder, out = Decoder(), []
        try:
            for (data,) in rows:
                t = decoder.feed(bytes(data))
                if t is not None and after < t.end_lsn <= upto:
                    out.append(t)
        except PgOutputError as e:
            raise CdcSourceError(f"{self._describe()}: {e}") from None
        return out

    def release(self, lsn: int) -> None:
        """Advance the slot to `lsn` (the server may keep less WAL)."""
        at = self._slot_position()
        if at is not None and lsn > at:
            self._query(
                "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                (self.spec.slot, lsn_text(lsn)),
            )


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
        t = pq.read_table(os.path.join(self.cdc.dir, "snapshot.parquet"))
        t = t.slice(start, end - start)
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

__all__ = ["KIND", "CdcInput", "CdcSourceError", "CdcTable", "change_values"]
