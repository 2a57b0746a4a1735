"""The rows shard steps exchange, as one Arrow table of messages (issue 50).

A Spark task's rows have one schema, yet a shard receives rows of many shapes (each port's
own columns) and watermark records. So every message travels as a row of `SCHEMA`: its
destination (`level`, `shard`: the task it goes to; level `DRIVER` for the driver), its
`source` (the sending task's shard; -1 for the driver), its port, and its payload: the
port's rows as an Arrow IPC stream, or a watermark record as JSON. Repartitioning the
messages by destination is all the exchange a shuffle has to do (`by_destination`, which
the in-process coordinator uses too).

A receiver orders each port's parts by their source (`decode`), not by their arrival: a
re-run task gets its rows in the same order whatever order a shuffle delivers them in, so
its output (down to the rounding of a sum of doubles) is the same.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from spindle_sql.partitioning import WATERMARKS
from spindle_sql.shard_level import Routed, concat

SCHEMA = pa.schema(
    [
        pa.field("level", pa.int32(), False),
        pa.field("shard", pa.int32(), False),
        pa.field("source", pa.int32(), False),
        pa.field("port", pa.string(), False),
        pa.field("data", pa.binary(), False),
    ]
)
FROM_DRIVER = -1


def to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


def from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def encode(routed: Routed, source: int) -> pa.Table:
    """`LevelStep.run`'s rows (or the driver's, `source` -1) as messages."""
    rows: list[tuple[int, int, str, bytes]] = []
    for (level, shard), by_port in routed.items():
        for port, payload in by_port.items():
            if port == WATERMARKS:
                assert isinstance(payload, list)
                rows += [
                    (level, shard, port, json.dumps(r, sort_keys=True).encode()) for r in payload
                ]
            else:
                assert isinstance(payload, pa.Table)
                rows.append((level, shard, port, to_ipc(payload)))
    arrays = [
        pa.array([r[0] for r in rows], pa.int32()),
        pa.array([r[1] for r in rows], pa.int32()),
        pa.array([source] * len(rows), pa.int32()),
        pa.array([r[2] for r in rows], pa.string()),
        pa.array([r[3] for r in rows], pa.binary()),
    ]
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def empty() -> pa.Table:
    return SCHEMA.empty_table()


def by_destination(messages: list[pa.Table]) -> dict[tuple[int, int], pa.Table]:
    """The messages of several tasks grouped by the task they go to, (level, shard)."""
    tables = [m for m in messages if m.num_rows]
    if not tables:
        return {}
    t = pa.concat_tables(tables)
    dest = np.asarray(t.column("level").to_numpy(), np.int64) << 32
    dest |= np.asarray(t.column("shard").to_numpy(), np.int64) & 0xFFFFFFFF
    order = np.argsort(dest, kind="stable")
    keys, starts = np.unique(dest[order], return_index=True)
    ends = [*starts[1:], len(order)]
    taken = t.take(pa.array(order))
    return {
        (int(k >> 32), int(k & 0xFFFFFFFF)): taken.slice(int(a), int(b - a))
        for k, a, b in zip(keys, starts, ends, strict=True)
    }


def decode(messages: pa.Table) -> dict[str, Any]:
    """The messages' payloads by port: one table per port (its parts in source order,
    concatenated), and the watermark records in a list under `WATERMARKS`."""
    ports = messages.column("port").to_pylist()
    sources = messages.column("source").to_pylist()
    data = messages.column("data").to_pylist()
    parts: dict[str, list[pa.Table]] = {}
    records: list[dict[str, Any]] = []
    for i in sorted(range(len(ports)), key=lambda i: (ports[i], sources[i])):
        if ports[i] == WATERMARKS:
            records.append(json.loads(data[i]))
        else:
            parts.setdefault(ports[i], []).append(from_ipc(data[i]))
    out: dict[str, Any] = {port: concat(ts) for port, ts in parts.items()}
    if records:
        out[WATERMARKS] = records
    return out


__all__ = [
    "FROM_DRIVER",
    "SCHEMA",
    "by_destination",
    "decode",
    "empty",
    "encode",
    "from_ipc",
    "to_ipc",
]
