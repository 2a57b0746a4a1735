"""The pgoutput decoder and PostgreSQL's text values (the `postgres_cdc` source's parts),
on messages built byte by byte as the protocol documents them: relations, the three kinds
of change, an unchanged TOASTed value, a truncate, transactions' end positions; and each
column type's text, with values that do not convert; a snapshot step's rows read from the
snapshot file's row groups. (The source against a real server: test_postgres_cdc.py.)"""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from workers.runtime.connectors.pg_text import convert
from workers.runtime.connectors.pgoutput import (
    UNCHANGED,
    Decoder,
    PgOutputError,
    lsn_int,
    lsn_text,
)
from workers.runtime.connectors.postgres_cdc_source import change_values


def _s(text: str) -> bytes:
    return text.encode() + b"\x00"


def relation(relid: int, name: str, columns: list[str]) -> bytes:
    cols = b"".join(b"\x00" + _s(c) + struct.pack(">ii", 25, -1) for c in columns)
    return (
        b"R"
        + struct.pack(">i", relid)
        + _s("public")
        + _s(name)
        + b"d"
        + struct.pack(">h", len(columns))
        + cols
    )


def tuple_data(values: list[str | object | None]) -> bytes:
    out = struct.pack(">h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is UNCHANGED:
            out += b"u"
        else:
            data = str(v).encode()
            out += b"t" + struct.pack(">i", len(data)) + data
    return out


def begin() -> bytes:
    return b"B" + struct.pack(">qqi", 100, 0, 7)


def commit(end: int) -> bytes:
    return b"C" + struct.pack(">bqqq", 0, end - 8, end, 0)


def test_transactions_of_changes() -> None:
    d = Decoder()
    msgs = [
        begin(),
        relation(16384, "customers", ["id", "name", "bio"]),
        b"I" + struct.pack(">i", 16384) + b"N" + tuple_data(["1", "ada", "long"]),
        b"U" + struct.pack(">i", 16384) + b"N" + tuple_data(["1", "ada b", UNCHANGED]),
        b"U"
        + struct.pack(">i", 16384)
        + b"O"
        + tuple_data(["1", "ada b", "long"])
        + b"N"
        + tuple_data(["1", "ada c", UNCHANGED]),
        b"D" + struct.pack(">i", 16384) + b"K" + tuple_data(["1", None, None]),
    ]
    assert all(d.feed(m) is None for m in msgs)
    t = d.feed(commit(5000))
    assert t is not None and t.end_lsn == 5000
    assert [c.op for c in t.changes] == ["insert", "update", "update", "delete"]
    names = ["id", "name", "bio"]
    assert change_values(t.changes[0], names) == ({"id": "1", "name": "ada", "bio": "long"}, None)
    # An unchanged TOASTed value without the old row: no value to upsert.
    _, why = change_values(t.changes[1], names)
    assert why is not None and "'bio'" in why and "REPLICA IDENTITY FULL" in why
    # With REPLICA IDENTITY FULL the old row has it.
    assert change_values(t.changes[2], names) == ({"id": "1", "name": "ada c", "bio": "long"}, None)
    assert change_values(t.changes[3], names)[0] == {"id": "1", "name": None, "bio": None}

    d.feed(begin())
    d.feed(b"T" + struct.pack(">ibi", 1, 0, 16384))
    t = d.feed(commit(6000))
    assert t is not None and [c.op for c in t.changes] == ["truncate"]


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"I" + struct.pack(">i", 99) + b"N" + tuple_data(["1"]),  # no relation first
        b"Z",
        b"R" + struct.pack(">i", 1) + b"public",  # cut short
    ],
)
def test_what_is_not_pgoutput_is_an_error(message: bytes) -> None:
    d = Decoder()
    d.feed(begin())
    with pytest.raises(PgOutputError):
        d.feed(message)


def test_lsn_text() -> None:
    assert lsn_text(lsn_int("16/B374D848")) == "16/B374D848"
    assert lsn_int("0/153B758") == 0x153B758


def test_text_values_by_type() -> None:
    arr, bad = convert(["t", "f", None, "yes"], pa.bool_())
    assert arr.to_pylist() == [True, False, None, None] and bad == {3}
    ts = pa.timestamp("us", tz="UTC")
    arr, bad = convert(
        ["2026-12-07 21:26:39.968251+00", "2026-01-01 10:00:00+05:30", "2026-01-01 00:00:00", "x"],
        ts,
    )
    assert arr.to_pylist()[:3] == [
        datetime(2026, 12, 7, 21, 26, 39, 968251, tzinfo=UTC),
        datetime(2026, 1, 1, 4, 30, tzinfo=UTC),
        datetime(2026, 1, 1, tzinfo=UTC),
    ]
    assert bad == {3}
    arr, bad = convert(["12.345", "-1", "abc"], pa.decimal128(10, 2))
    assert arr.to_pylist()[:2] == [Decimal("12.35"), Decimal("-1.00")] and bad == {2}
    arr, bad = convert(["1", "-7", None], pa.int64())
    assert arr.to_pylist() == [1, -7, None] and not bad
    arr, bad = convert(["1", "9999999999", "z"], pa.int32())
    assert arr.to_pylist() == [1, None, None] and bad == {1, 2}
    arr, bad = convert(["2026-02-03"], pa.date32())
    assert str(arr[0]) == "2026-02-03" and not bad


def test_a_snapshot_step_reads_only_the_row_groups_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`parquet_rows` gives exactly the slice a whole read would, across row-group edges,
    and reads no row group outside it."""
    import pyarrow.parquet as pq

    from workers.runtime.connectors.cdc_slot import parquet_rows

    path = str(tmp_path / "snapshot.parquet")
    whole = pa.table({"id": list(range(20)), "name": [f"n{i}" for i in range(20)]})
    with pq.ParquetWriter(path, whole.schema) as w:
        for start in range(0, 20, 6):  # groups of 6, 6, 6 and 2 rows, as fetches write them
            w.write_table(whole.slice(start, 6))
    read: list[list[int]] = []
    real = pq.ParquetFile.read_row_groups
    monkeypatch.setattr(
        pq.ParquetFile, "read_row_groups", lambda f, g, **k: read.append(list(g)) or real(f, g, **k)
    )
    for start, end, groups in [(0, 6, [0]), (5, 7, [0, 1]), (6, 18, [1, 2]), (17, 20, [2, 3])]:
        read.clear()
        assert parquet_rows(path, start, end) == whole.slice(start, end - start)
        assert read == [groups]
    assert parquet_rows(path, 20, 25).num_rows == 0
