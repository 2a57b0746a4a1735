"""The `kafka` source: topics of a Kafka-protocol broker read as one input table.

Offsets are Spindle's, per partition (`pipeline_spec.offsets`: `{"<topic>:<partition>":
next offset}`), never the consumer group's: a step reads each partition from its start
offset to its end offset, both in the offset log before the step's output reaches a sink,
so a step redone after a crash reads the same records (a partition's records below its
last stable offset never change). Each step ends at each partition's end offset now, at
most `max_records_per_step` in all (`step_end`, the driver's answer to the query's trigger:
`step_ends.py`); the driver reads the records itself (`KafkaTable.read`) with
`confluent-kafka`, `read_committed`, and parses values as ingest and files do
(`pipeline_spec.formats`). Partitions that appear
later start at their earliest record. A record whose value does not parse is a dead letter
(topic, partition, offset).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource

from pipeline_spec.fields import expand_sink_variables
from pipeline_spec.formats.values import ValueParser
from pipeline_spec.kafka import KafkaSource
from pipeline_spec.offsets import Offset

from ..sources import END
from ..step_ends import StepEndsSource
from .kafka_changes import NOT_PARSED, ChangeRecords
from .source import PartitionSplit, Rows, SourceContext, Split, columns_ddl

log = logging.getLogger("spindle.runner")
REASON = "__reason"  # a dead letter's reason, in a step's bad records
TIMEOUT_S = 30.0  # a broker request, or a step's records, not answered within this fails


class KafkaSourceError(RuntimeError):
    """The broker cannot be reached, a topic does not exist, or records do not arrive."""


def partition_id(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def _split_id(pid: str) -> tuple[str, int]:
    topic, _, partition = pid.rpartition(":")
    return topic, int(partition)


def client_config(src: KafkaSource) -> dict[str, Any]:
    """The consumer's settings: the spec's broker and security properties; offsets are
    assigned, committed only to `commit_to_group`, and only committed transactions' records
    are read."""
    return {
        "bootstrap.servers": src.bootstrap_servers,
        "group.id": src.commit_to_group or f"spindle-{src.table}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "socket.timeout.ms": int(TIMEOUT_S * 1000),
        # A step reads to known end offsets; what a fetch brings beyond them is decoded for
        # nothing, so fetches stay small (with the defaults, 50 MB and 1 MB a partition, a
        # step that ends mid-topic spent most of its read past its end: docs/benchmarks.md).
        "fetch.max.bytes": 2 << 20,
        "max.partition.fetch.bytes": 512 << 10,
        # A fetch at a partition's end waits this long for records; the watermark queries
        # after a step's read queue behind it (the default, 500 ms, was each small step's
        # latency).
        "fetch.wait.max.ms": 10,
        "logger": _QuietLogger(),
        **{k: expand_sink_variables(v) for k, v in src.properties.items()},
    }


class _QuietLogger:
    """librdkafka's log lines (a broker going away is logged on every retry) go nowhere: the
    errors that matter surface as this module's exceptions."""

    def log(self, *args: Any, **kwargs: Any) -> None:
        pass

    def debug(self, *args: Any, **kwargs: Any) -> None:
        pass

    info = warning = error = exception = critical = debug


class KafkaTable:
    """One `kafka` table's consumer, in the driver."""

    def __init__(self, src: KafkaSource) -> None:
        from confluent_kafka import Consumer

        self.src = src
        self.value_schema = pa.schema(
            [f for f in src.arrow_schema() if f.name not in src.metadata]
        )  # an upserted table's op column too
        self.schema = src.arrow_schema()
        fmt = "json" if src.format == "debezium-json" else src.format
        self._values = ValueParser(fmt, self.value_schema, src.avro_schema, src.avro_framing)
        self._changes = None if src.upsert is None else ChangeRecords(src, self._values)
        self._consumer = Consumer(client_config(src))

    def close(self) -> None:
        self._consumer.close()

    def _describe(self) -> str:
        return f"kafka table {self.src.table!r} ({self.src.bootstrap_servers})"

    def partitions(self) -> list[str]:
        """Every partition of the table's topics now."""
        try:
            md = self._consumer.list_topics(timeout=TIMEOUT_S)
        except Exception as e:
            raise KafkaSourceError(f"{self._describe()}: broker unreachable: {e}") from None
        out = []
        for topic in self.src.topics:
            t = md.topics.get(topic)
            if t is None or t.error is not None or not t.partitions:
                raise KafkaSourceError(f"{self._describe()}: topic {topic!r} does not exist")
            out += [partition_id(topic, p) for p in sorted(t.partitions)]
        return out

    def _end(self, pid: str) -> int:
        """Partition `pid`'s end offset now (its high watermark)."""
        from confluent_kafka import TopicPartition

        try:
            _, high = self._consumer.get_watermark_offsets(
                TopicPartition(*_split_id(pid)), timeout=TIMEOUT_S
            )
        except Exception as e:
            raise KafkaSourceError(f"{self._describe()}: {pid}: no offsets: {e}") from None
        return int(high)

    def first_offsets(self) -> dict[str, int]:
        """Where a first run starts each partition (`start`, `start_timestamp_ms`)."""
        from confluent_kafka import TopicPartition

        pids = self.partitions()
        if self.src.start_timestamp_ms is not None:
            asked = [TopicPartition(*_split_id(p), self.src.start_timestamp_ms) for p in pids]
            found = self._consumer.offsets_for_times(asked, timeout=TIMEOUT_S)
            return {
                partition_id(tp.topic, tp.partition): (
                    tp.offset if tp.offset >= 0 else self._end(pid)
                )
                for pid, tp in zip(pids, found, strict=True)
            }
        if self.src.start == "latest":
            return self.end_offsets()
        return {p: 0 for p in pids}

    def step_end(self, start: dict[str, int]) -> dict[str, int]:
        """Each partition's end offset for a step from `start`: its end now, at most
        `max_records_per_step` in all (shared evenly, so no partition starves)."""
        ends = self.end_offsets()
        behind = {p: max(0, e - start.get(p, 0)) for p, e in ends.items()}
        budget, end = self.src.max_records_per_step, dict(start)
        waiting = [p for p in ends if behind[p] > 0]
        while waiting and budget > 0:
            share = max(1, budget // len(waiting))
            for p in list(waiting):
                take = min(share, behind[p], budget)
                end[p] = end.get(p, 0) + take
                behind[p] -= take
                budget -= take
                if behind[p] == 0:
                    waiting.remove(p)
        for p in ends:
            end.setdefault(p, 0)
        return end

    def commit_to_group(self, offset: dict[str, int]) -> None:
        """Commit `offset` (a durable checkpoint's) to the spec's `commit_to_group`."""
        from confluent_kafka import TopicPartition

        group = self.src.commit_to_group
        if group is None or not offset:
            return
        try:  # the consumer's group is this one (`client_config`)
            parts = [TopicPartition(*_split_id(p), o) for p, o in sorted(offset.items())]
            self._consumer.commit(offsets=parts, asynchronous=False)
        except Exception as e:  # monitoring only: the pipeline's offsets are its own
            raise KafkaSourceError(f"{self._describe()}: committing to {group!r}: {e}") from None

    def end_offsets(self) -> dict[str, int]:
        """Every partition's end offset now."""
        return {p: self._end(p) for p in self.partitions()}

    def waiting(self, offset: dict[str, int]) -> bool:
        """Whether any partition has records beyond `offset`."""
        return any(e > offset.get(p, 0) for p, e in self.end_offsets().items())

    def read(self, start: dict[str, int], end: dict[str, int]) -> tuple[pa.Table, pa.Table | None]:
        """The records of offsets [start, end) of every partition: the rows that parsed
        (the table's columns, then `__end`) and the dead letters (`__file`: "topic:partition",
        `__lineno`: offset, `__line`: the value)."""
        from confluent_kafka import KafkaError, TopicPartition

        todo = {p: (start.get(p, 0), e) for p, e in end.items() if e > start.get(p, 0)}
        by_partition: dict[str, list[Any]] = {p: [] for p in todo}
        if todo:
            self._consumer.assign([TopicPartition(*_split_id(p), a) for p, (a, _) in todo.items()])
            deadline = time.monotonic() + TIMEOUT_S
            while todo:
                if time.monotonic() > deadline:
                    raise KafkaSourceError(
                        f"{self._describe()}: records of {sorted(todo)} did not arrive "
                        f"within {TIMEOUT_S:.0f} s"
                    )
                # `consume` waits until it has as many records as asked or its timeout
                # ends: ask for what is missing so that a small step does not wait.
                missing = sum(e - a for a, e in todo.values())
                for m in self._consumer.consume(min(missing, 10_000), timeout=0.1):
                    topic, p, offset = m.topic(), m.partition(), m.offset()
                    if topic is None or p is None or offset is None:
                        continue
                    pid = partition_id(topic, p)
                    if pid not in todo:
                        continue
                    err = m.error()
                    if err is not None and err.code() != KafkaError._PARTITION_EOF:
                        raise KafkaSourceError(f"{self._describe()}: {pid}: {err.str()}")
                    if err is None and offset < todo[pid][1]:
                        by_partition[pid].append(m)  # in offset order
                        todo[pid] = (offset + 1, todo[pid][1])
                    # The partition is done once a record at or past its end arrived, or
                    # its end (of what is committed) was reached at or past it.
                    if offset >= todo[pid][1] - (0 if err is not None else 1):
                        self._consumer.incremental_unassign([TopicPartition(topic, p)])
                        del todo[pid]
                        deadline = time.monotonic() + TIMEOUT_S
            self._consumer.unassign()
        records = [m for p in sorted(by_partition, key=_split_id) for m in by_partition[p]]
        return self._rows(records)

    def _rows(self, records: list[Any]) -> tuple[pa.Table, pa.Table | None]:
        if self._changes is not None:
            changes = self._changes.parse(records)
            parsed, letters = changes.rows, changes.letters
            good = [records[i] for i in changes.records]
        else:
            parsed, bad = self._parse([m.value() for m in records])
            letters = {i: NOT_PARSED for i in sorted(bad)}
            good = [m for i, m in enumerate(records) if i not in bad]
        columns = {f.name: parsed.column(f.name) for f in self.value_schema}
        for col, what in self.src.metadata.items():
            columns[col] = pa.array([_metadata(m, what) for m in good])
        columns[END] = pa.array([0] * len(good), pa.int64())
        rows = pa.table(columns).cast(pa.schema([*self.schema, pa.field(END, pa.int64())]))
        if not letters:
            return rows, None
        bad_records = [records[i] for i in letters]
        return rows, pa.table(
            {
                "__file": [partition_id(m.topic(), m.partition()) for m in bad_records],
                "__lineno": pa.array([m.offset() for m in bad_records], pa.int64()),
                "__line": [self._letter(m.value()) for m in bad_records],
                REASON: list(letters.values()),
            }
        )

    def _letter(self, value: bytes | None) -> str | None:
        return self._values.letter(value)

    def _parse(self, values: list[bytes | None]) -> tuple[pa.Table, set[int]]:
        """The values that parse, as the value schema's columns, and the indexes of those
        that do not (`pipeline_spec.formats.values`)."""
        return self._values.parse(values)


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", errors="replace")


def _metadata(m: Any, what: str) -> Any:
    if what == "key":
        return _text(m.key())
    if what == "topic":
        return m.topic()
    if what == "partition":
        return m.partition()
    if what == "offset":
        return m.offset()
    if what == "headers":
        return json.dumps({k: _text(v) for k, v in m.headers() or []})
    kind, ms = m.timestamp()
    return None if kind == 0 else pa.scalar(ms * 1000, pa.timestamp("us", tz="UTC"))


class KafkaInput:
    """A `kafka` table as a run's source: a step's splits are its partitions' offset
    ranges, read by the driver's consumer; the query's trigger asks the driver where steps
    end, answered on a thread of its own through a consumer of its own."""

    batches = None
    reads_ahead = False
    parses_in_driver = True
    has_lines = False
    input_log = None
    release_below = None

    def __init__(self, spec: KafkaSource, ctx: SourceContext) -> None:
        self.spec, self.table = spec, spec.table
        self.kafka = KafkaTable(spec)
        self.schema = self.kafka.schema
        self._ends: KafkaTable | None = None

    def first_offset(self, restored: Offset) -> Offset:
        return restored if restored else self.kafka.first_offsets()

    def step_end(self, start: Offset) -> Offset:
        assert isinstance(start, dict)
        if self._ends is None:
            self._ends = KafkaTable(self.spec)
        return self._ends.step_end(start)

    def driver_step_end(self, start: Offset) -> int | None:
        return None  # the query's trigger asks (`step_end`)

    def splits(self, start: Offset, end: Offset) -> list[Split]:
        assert isinstance(start, dict) and isinstance(end, dict)
        return [
            PartitionSplit(p, start.get(p, 0), e) for p, e in end.items() if e > start.get(p, 0)
        ]

    def to_batches(self, splits: list[Split]) -> None:
        pass  # read in the driver

    def read(self, splits: list[Split]) -> Rows:
        return _read(self.kafka, splits)

    def split_reader(self) -> KafkaReader:
        return KafkaReader(self.spec)

    def spark_query(
        self, start: Offset, ends: Callable[[], str]
    ) -> tuple[type[DataSource], dict[str, str]]:
        return StepEndsSource, {"ends": ends(), "start": json.dumps(start)}

    def waiting(self, offset: Offset) -> bool:
        assert isinstance(offset, dict)
        return self.kafka.waiting(offset)

    def lag(self, offset: Offset) -> dict[str, Any]:
        """Its partitions' end offsets minus `offset`, in all and per partition."""
        assert isinstance(offset, dict)
        ends = self.kafka.end_offsets()
        partitions = {p: max(0, e - offset.get(p, 0)) for p, e in ends.items()}
        return {"lag": sum(partitions.values()), "partitions": partitions}

    def on_durable(self, offset: Offset) -> None:
        """Commit `offset` to the spec's `commit_to_group`, if any (a failure is logged: it
        is for monitoring only)."""
        if not isinstance(offset, dict):
            return
        try:
            self.kafka.commit_to_group(offset)
        except Exception as e:
            log.warning("%s", e)

    def dead_letters(self, table: str, bad: pa.Table) -> list[dict[str, Any]]:
        return [
            {
                "table": table,
                "topic": r["__file"].rpartition(":")[0],
                "partition": int(r["__file"].rpartition(":")[2]),
                "offset": r["__lineno"],
                "record": r["__line"],
                "reason": r.get(REASON) or NOT_PARSED,
            }
            for r in bad.to_pylist()
        ]

    def close(self) -> None:
        self.kafka.close()
        if self._ends is not None:
            self._ends.close()


def _read(kafka: KafkaTable, splits: list[Split]) -> Rows:
    parts = [s for s in splits if isinstance(s, PartitionSplit)]
    return kafka.read({s.partition: s.start for s in parts}, {s.partition: s.end for s in parts})


@dataclass(frozen=True)
class KafkaReader:
    """Partitions' offset ranges read in any process, through a consumer of its own."""

    spec: KafkaSource

    def read(self, splits: list[Split]) -> Rows:
        kafka = KafkaTable(self.spec)
        try:
            return _read(kafka, splits)
        finally:
            kafka.close()


class KafkaKind:
    def columns(self, spec: KafkaSource) -> str:
        return columns_ddl(spec.columns())

    def spark_options(self, spec: KafkaSource, schema: pa.Schema, ddl: str) -> dict[str, str]:
        return {}  # the driver decides where steps end (`step_ends.py`)

    def line_records(self, spec: KafkaSource) -> bool:
        return False  # records are values, parsed in the driver

    def reads_by_name(self, spec: KafkaSource) -> bool:
        return False

    def wall_clock(self, spec: KafkaSource) -> bool:
        return True

    def open(self, spec: KafkaSource, ctx: SourceContext) -> KafkaInput:
        return KafkaInput(spec, ctx)


KIND = KafkaKind()


__all__ = [
    "KIND",
    "KafkaInput",
    "KafkaSourceError",
    "KafkaTable",
    "client_config",
    "partition_id",
]
