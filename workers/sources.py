"""PySpark 4 Python streaming data sources whose offsets Spindle owns.

Each source's offset is one integer, `{"offset": n}`, and every row it produces carries the
end offset of its micro-batch in `__end`, so the driver learns, from the batch itself, which
offset a step's state reflects (the runner records it in the step's checkpoint, and a
restored run starts the source there: `option("start", n)`).

- `spindle_datagen`: row i is a pure function of (seed, i) — the same rows at the same
  offsets in every run; the offset advances at `rows_per_second` (wall clock), at most
  `max_rows_per_step` per step, up to `limit`.
- `spindle_log`: the pipeline's input log (records pushed through the ingest API);
  offset = record position.
- `spindle_files`: a directory of immutable files read in name order; offset = files
  consumed. A micro-batch is its files' paths, one row each (`__file`, `__end`): Spark's own
  readers read them (`file_batches.py`), not a Python worker.

Readers run in Spark's Python worker processes: options are strings, state is per process.
The runner itself reads what datagen and log batches hold (`datagen_batches`,
`log_batches`), in the driver, from the batch's offsets: the readers' `read` serves other
queries of these sources.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from pipeline_spec.datagen import DATAGEN_SCHEMAS

EPOCH_US = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z: event time of datagen row 0
END = "__end"  # every row's column: its micro-batch's end offset
SOURCE = "source"  # the circuit input that is the transformed stream

CLICKS_SCHEMA = f"{DATAGEN_SCHEMAS['clicks']}, __end bigint"
NEXMARK_SCHEMA = f"{DATAGEN_SCHEMAS['nexmark']}, __end bigint"
FILES_SCHEMA = "__file string, __end bigint"
_STATES = np.array(["OR", "ID", "CA", "WA", "NY", "TX", "AZ", "NV"])
_NAMES = np.array(["ann", "bob", "cyd", "dee", "eve", "fay", "gus", "hal", "ivy", "jon"])


def mix(seed: int, i: np.ndarray) -> np.ndarray:
    """splitmix64 of (seed, i): the per-row randomness of datagen, independent of batching."""
    with np.errstate(over="ignore"):
        z = i.astype(np.uint64) + np.uint64(seed * 0x9E3779B97F4A7C15 % (1 << 64))
        z = (z + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(0xFFFFFFFFFFFFFFFF)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def clicks(seed: int, rate: float, users: int, start: int, stop: int, end: int) -> pa.RecordBatch:
    i = np.arange(start, stop, dtype=np.int64)
    h = mix(seed, i)
    ts = EPOCH_US + (i * (1_000_000 / rate)).astype(np.int64)
    user = np.char.add("user-", (h % np.uint64(users)).astype(str))
    page = np.char.add("/p/", ((h >> np.uint64(20)) % np.uint64(50)).astype(str))
    amount = ((h >> np.uint64(40)) % np.uint64(10_000)).astype(np.float64) / 100.0 - 5.0
    return pa.record_batch(
        {
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "user": pa.array(user),
            "page": pa.array(page),
            "amount": pa.array(amount),
            END: pa.array(np.full(len(i), end, np.int64)),
        }
    )


def nexmark(seed: int, rate: float, start: int, stop: int, end: int) -> pa.RecordBatch:
    """Nexmark's mix: of every 50 events 1 person, 3 auctions, 46 bids; ids are dense."""
    i = np.arange(start, stop, dtype=np.int64)
    h = mix(seed, i)
    epoch, r = i // 50, i % 50
    kind = np.where(r == 0, "person", np.where(r <= 3, "auction", "bid"))
    persons = epoch + 1  # persons that exist once event i happens
    auctions = np.maximum(epoch * 3 + np.clip(r, 0, 3), 1)
    is_p, is_a, is_b = kind == "person", kind == "auction", kind == "bid"
    u = h.astype(np.uint64)
    person_id = np.where(is_p, epoch, 0)
    auction_id = np.where(
        is_a, epoch * 3 + (r - 1), np.where(is_b, u % auctions.astype(np.uint64), 0)
    )
    seller = (u % persons.astype(np.uint64)).astype(np.int64)
    bidder = ((u >> np.uint64(17)) % persons.astype(np.uint64)).astype(np.int64)

    def only(mask: np.ndarray, values: Any, t: pa.DataType) -> pa.Array:
        return pa.array(values, t, mask=~mask)

    return pa.record_batch(
        {
            "event_type": pa.array(kind),
            "ts": pa.array(
                EPOCH_US + (i * (1_000_000 / rate)).astype(np.int64), pa.timestamp("us", tz="UTC")
            ),
            "person_id": only(is_p, person_id, pa.int64()),
            "name": only(is_p, _NAMES[(u >> np.uint64(7)) % np.uint64(len(_NAMES))], pa.string()),
            "state": only(
                is_p, _STATES[(u >> np.uint64(11)) % np.uint64(len(_STATES))], pa.string()
            ),
            "auction_id": only(is_a | is_b, auction_id.astype(np.int64), pa.int64()),
            "seller": only(is_a, seller, pa.int64()),
            "category": only(
                is_a, ((u >> np.uint64(23)) % np.uint64(10)).astype(np.int64), pa.int64()
            ),
            "bidder": only(is_b, bidder, pa.int64()),
            "price": only(is_b, ((u >> np.uint64(31)) % np.uint64(100_000)) / 100.0, pa.float64()),
            END: pa.array(np.full(len(i), end, np.int64)),
        }
    )


class _Range(InputPartition):
    def __init__(self, start: int, stop: int, end: int) -> None:
        self.start, self.stop, self.end = start, stop, end


def datagen_batches(
    options: Mapping[str, str], start: int, stop: int, end: int
) -> Iterator[pa.RecordBatch]:
    """Rows [start, stop) of the `spindle_datagen` source with these options, each with
    `__end` = end (its micro-batch's end offset), at most 50 000 a batch (also generated by
    the runner, in the driver, for each of its steps)."""
    generator = options.get("generator", "clicks")
    seed = int(options.get("seed", "0"))
    rate = float(options.get("rows_per_second", "1000"))
    users = int(options.get("users", "1000"))
    for s in range(start, stop, 50_000):
        e = min(s + 50_000, stop)
        if generator == "nexmark":
            yield nexmark(seed, rate, s, e, end)
        else:
            yield clicks(seed, rate, users, s, e, end)


class _DatagenReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.rate = float(options.get("rows_per_second", "1000"))
        self.max_step = int(options.get("max_rows_per_step", "100000"))
        self.limit = int(options["limit"]) if options.get("limit") else None
        self.first = int(options.get("start", "0"))
        self.cur = self.first
        self.t0 = time.monotonic()

    def initialOffset(self) -> dict[str, int]:
        return {"offset": self.first}

    def latestOffset(self) -> dict[str, int]:
        due = self.first + int((time.monotonic() - self.t0) * self.rate)
        end = min(max(due, self.cur), self.cur + self.max_step)
        if self.limit is not None:
            end = min(end, self.limit)
        self.cur = end
        return {"offset": end}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        a, b = int(start["offset"]), int(end["offset"])
        mid = a + (b - a) // 2
        return [_Range(x, y, b) for x, y in ((a, mid), (mid, b)) if y > x]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Range)
        yield from datagen_batches(self.options, partition.start, partition.stop, partition.end)

    def commit(self, end: dict[str, int]) -> None:
        pass  # Spindle's checkpoints own the offsets


class DatagenSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "spindle_datagen"

    def schema(self) -> str:
        return NEXMARK_SCHEMA if self.options.get("generator") == "nexmark" else CLICKS_SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _DatagenReader(dict(self.options))


def arrow_schema_option(schema: pa.Schema) -> str:
    """An Arrow schema as a data source option (see `_LogReader`)."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def list_input_files(path: str, roots: str = "") -> list[str]:
    """The files of an input directory in offset order (hidden and temp names skipped). With
    `roots` (directories joined by os.pathsep: the control plane's file roots), a symbolic
    link that leads out of every root is skipped too: a run never reads outside them."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return []
    inside = [os.path.realpath(r) for r in roots.split(os.pathsep) if r]
    return sorted(
        n
        for n in names
        if not n.startswith((".", "_"))
        and not n.endswith((".tmp", ".part", ".crc"))
        and os.path.isfile(os.path.join(path, n))
        and (not inside or _within(os.path.realpath(os.path.join(path, n)), inside))
    )


def _within(real: str, roots: list[str]) -> bool:
    return any(os.path.commonpath([real, r]) == r for r in roots)


def log_batches(log: Any, start: int, stop: int) -> Iterator[pa.RecordBatch]:
    """The rows of input log records [start, stop), each with `__end` = stop: a micro-batch
    of the `spindle_log` source (also read by the runner for a run's first step)."""
    for rb in log.read(start, stop):
        yield rb.append_column(END, pa.array(np.full(rb.num_rows, stop)))


class _LogRange(InputPartition):
    def __init__(self, start: int, stop: int) -> None:
        self.start, self.stop = start, stop


class _LogReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        from storage_engine.input_log import InputLog

        # Arrow schema passed serialised: Spark's DDL parser needs a session, and Python
        # workers have none.
        arrow = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(options["arrow_schema"])))
        self.log = InputLog(options["path"], arrow)
        self.max_records = int(options.get("max_records_per_step", "100000"))
        self.first = int(options.get("start", "0"))
        self.cur = self.first

    def initialOffset(self) -> dict[str, int]:
        return {"offset": self.first}

    def latestOffset(self) -> dict[str, int]:
        self.cur = max(self.cur, min(self.log.end(), self.cur + self.max_records))
        return {"offset": self.cur}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [_LogRange(int(start["offset"]), int(end["offset"]))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _LogRange)
        yield from log_batches(self.log, partition.start, partition.stop)

    def commit(self, end: dict[str, int]) -> None:
        pass


class LogSource(DataSource):
    """Records appended to the engine's input log (`storage_engine.input_log`)."""

    @classmethod
    def name(cls) -> str:
        return "spindle_log"

    def schema(self) -> str:
        return f"{self.options['schema']}, __end bigint"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _LogReader(dict(self.options))


class _Files(InputPartition):
    def __init__(self, paths: list[str], end: int) -> None:
        self.paths, self.end = paths, end


class _FilesReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.path = options["path"]
        self.roots = options.get("roots", "")
        self.max_files = int(options.get("max_files_per_step", "10"))
        self.first = int(options.get("start", "0"))
        self.cur = self.first

    def initialOffset(self) -> dict[str, int]:
        return {"offset": self.first}

    def latestOffset(self) -> dict[str, int]:
        n = len(list_input_files(self.path, self.roots))
        self.cur = max(self.cur, min(n, self.cur + self.max_files))
        return {"offset": self.cur}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        a, b = int(start["offset"]), int(end["offset"])
        files = list_input_files(self.path, self.roots)[a:b]
        return [_Files([os.path.join(self.path, f) for f in files], b)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Files)
        n = len(partition.paths)
        yield pa.record_batch(
            {
                "__file": pa.array(partition.paths, pa.string()),
                END: pa.array(np.full(n, partition.end), pa.int64()),
            }
        )

    def commit(self, end: dict[str, int]) -> None:
        pass


class FilesSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "spindle_files"

    def schema(self) -> str:
        return FILES_SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _FilesReader(dict(self.options))
