"""PostgreSQL's logical replication messages (the `pgoutput` plugin, protocol version 1)
decoded into committed transactions of row changes, values as PostgreSQL's text output.

The format is PostgreSQL's documented "Logical Replication Message Formats"; PyPI's
decoders are unmaintained or bind another driver (psycopg2), so this is the one place that
reads it. Only what a table's changes need is kept: relations (`R`, to name a change's
table and columns), inserts, updates, deletes, truncates, and each transaction's commit
(`C`, whose end LSN is where a reader that has applied it resumes). Origins, types and
logical messages are skipped.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

# A column a change does not carry: an unchanged TOASTed value of an update.
UNCHANGED = object()
Values = dict[str, object]  # column -> text, None (NULL) or UNCHANGED


class PgOutputError(ValueError):
    """A message that is not pgoutput of protocol version 1."""


@dataclass(frozen=True)
class Relation:
    schema: str
    name: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class Change:
    """One row's change: `op` insert, update, delete or truncate (of `relation`, no row);
    `new` the row after (insert, update), `old` the old row or key (update, delete) if
    the message carries it."""

    relation: Relation
    op: str
    new: Values | None = None
    old: Values | None = None


@dataclass
class Transaction:
    end_lsn: int = 0  # the commit's end: where to resume after it
    changes: list[Change] = field(default_factory=list)


class Decoder:
    """Messages in the order the plugin emits them (one decoding session: relations come
    before their first change in it), into committed transactions."""

    def __init__(self) -> None:
        self._relations: dict[int, Relation] = {}
        self._open: Transaction | None = None

    def feed(self, message: bytes) -> Transaction | None:
        """Decode one message; the transaction it commits, if it is a commit."""
        if not message:
            raise PgOutputError("an empty message")
        r = _Reader(message)
        kind = r.byte()
        if kind == b"B":
            self._open = Transaction()
        elif kind == b"C":
            r.int8()
            r.int64()  # the commit record's own LSN
            done, self._open = self._transaction(), None
            done.end_lsn = r.int64()
            return done
        elif kind == b"R":
            relid = r.int32()
            schema, name = r.string(), r.string()
            r.int8()  # replica identity
            columns = []
            for _ in range(r.int16()):
                r.int8()
                columns.append(r.string())
                r.int32()
                r.int32()
            self._relations[relid] = Relation(schema, name, tuple(columns))
        elif kind == b"I":
            rel = self._relation(r.int32())
            if r.byte() != b"N":
                raise PgOutputError("an insert without its new tuple")
            self._transaction().changes.append(Change(rel, "insert", new=r.tuple(rel)))
        elif kind == b"U":
            rel = self._relation(r.int32())
            old, tag = None, r.byte()
            if tag in (b"K", b"O"):
                old, tag = r.tuple(rel), r.byte()
            if tag != b"N":
                raise PgOutputError("an update without its new tuple")
            self._transaction().changes.append(Change(rel, "update", new=r.tuple(rel), old=old))
        elif kind == b"D":
            rel = self._relation(r.int32())
            if r.byte() not in (b"K", b"O"):
                raise PgOutputError("a delete without its key or old tuple")
            self._transaction().changes.append(Change(rel, "delete", old=r.tuple(rel)))
        elif kind == b"T":
            n = r.int32()
            r.int8()
            for _ in range(n):
                self._transaction().changes.append(Change(self._relation(r.int32()), "truncate"))
        elif kind not in (b"O", b"Y", b"M"):
            raise PgOutputError(f"message kind {kind!r}")
        return None

    def _relation(self, relid: int) -> Relation:
        rel = self._relations.get(relid)
        if rel is None:
            raise PgOutputError(f"a change of relation {relid} before its description")
        return rel

    def _transaction(self) -> Transaction:
        if self._open is None:
            raise PgOutputError("a change outside a transaction")
        return self._open


_I8, _I16, _I32, _I64 = (struct.Struct(f">{c}") for c in "bhiq")


class _Reader:
    """A message read from its start; every read checks it is not cut short."""

    def __init__(self, data: bytes) -> None:
        self._data, self._at = data, 0

    def _unpack(self, s: struct.Struct) -> int:
        try:
            (v,) = s.unpack_from(self._data, self._at)
        except struct.error:
            raise PgOutputError("a message cut short") from None
        self._at += s.size
        return int(v)

    def byte(self) -> bytes:
        if self._at >= len(self._data):
            raise PgOutputError("a message cut short")
        self._at += 1
        return self._data[self._at - 1 : self._at]

    def int8(self) -> int:
        return self._unpack(_I8)

    def int16(self) -> int:
        return self._unpack(_I16)

    def int32(self) -> int:
        return self._unpack(_I32)

    def int64(self) -> int:
        return self._unpack(_I64)

    def string(self) -> str:
        end = self._data.find(b"\x00", self._at)
        if end < 0:
            raise PgOutputError("a string without its end")
        out = self._data[self._at : end].decode("utf-8")
        self._at = end + 1
        return out

    def tuple(self, rel: Relation) -> Values:
        data, at = self._data, self._at
        try:
            (n,) = _I16.unpack_from(data, at)
            at += 2
            if n > len(rel.columns):
                raise PgOutputError(f"a tuple of {n} columns for {rel.name}'s {len(rel.columns)}")
            out: Values = {}
            for column in rel.columns[:n]:
                kind = data[at]
                at += 1
                if kind == 0x74:  # t: text
                    (size,) = _I32.unpack_from(data, at)
                    at += 4
                    if at + size > len(data):
                        raise PgOutputError("a message cut short")
                    out[column] = data[at : at + size].decode("utf-8")
                    at += size
                elif kind == 0x6E:  # n: null
                    out[column] = None
                elif kind == 0x75:  # u: unchanged TOASTed value
                    out[column] = UNCHANGED
                else:
                    raise PgOutputError(f"a column of kind {bytes([kind])!r}")
        except (struct.error, IndexError):
            raise PgOutputError("a message cut short") from None
        self._at = at
        return out


def lsn_text(lsn: int) -> str:
    """An LSN as PostgreSQL writes it (`0/16B3748`)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def lsn_int(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


__all__ = [
    "UNCHANGED",
    "Change",
    "Decoder",
    "PgOutputError",
    "Relation",
    "Transaction",
    "lsn_int",
    "lsn_text",
]
