"""A `postgres_cdc` table's replication slot and its snapshot, from the driver
(`postgres_cdc_source.py` has the contract): one connection per `CdcTable`, statements one
at a time; the snapshot taken once, into the run's storage; transactions peeked, never
consumed; the slot advanced only when told (`release`)."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline_spec.fields import expand_sink_variables
from pipeline_spec.offsets import Offset
from pipeline_spec.postgres_cdc import PostgresCdcSource

from .pg_text import convert
from .pgoutput import Decoder, PgOutputError, Transaction, lsn_int, lsn_text

log = logging.getLogger("spindle.runner")
SNAPSHOT, LSN = "snapshot", "lsn"  # an offset's parts
TIMEOUT_S = 30.0  # connecting, or waiting for the slot another reader holds
_FETCH = 10_000
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

    def snapshot_slice(self, start: int, end: int) -> pa.Table:
        """The snapshot's rows [start, end)."""
        return parquet_rows(os.path.join(self.dir, "snapshot.parquet"), start, end)

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


def parquet_rows(path: str, start: int, end: int) -> pa.Table:
    """Rows [start, end) of a Parquet file, reading only the row groups that hold them (the
    snapshot file has one per fetch of its cursor)."""
    f = pq.ParquetFile(path)
    groups: list[int] = []
    first = at = 0
    for i in range(f.metadata.num_row_groups):
        n = f.metadata.row_group(i).num_rows
        if at + n > start and at < end:
            first = at if not groups else first
            groups.append(i)
        at += n
    if not groups:
        return f.schema_arrow.empty_table()
    return f.read_row_groups(groups).slice(start - first, end - start)


__all__ = ["LSN", "SNAPSHOT", "TIMEOUT_S", "CdcSourceError", "CdcTable", "parquet_rows"]
