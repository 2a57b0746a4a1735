"""The `kafka` source: topics of a Kafka-protocol broker read as one input table.

Offsets are Spindle's, per partition (`pipeline_spec.offsets`: `{"<topic>:<partition>":
next offset}`), never the consumer group's: a step reads each partition from its start
offset to its end offset, both in the offset log before the step's output reaches a sink,
so a step redone after a crash reads the same records (a partition's records below its
last stable offset never change). Each step ends at each partition's end offset now, at
most `max_records_per_step` in all (`step_end`, the driver's answer to the query's trigger:
`step_ends.py`); the driver reads the records itself (`KafkaTable.read`) with
`confluent-kafka`, `read_committed`, and parses values in Arrow. Partitions that appear
later start at their earliest record. A record whose value does not parse is a dead letter
(topic, partition, offset).
"""

from __future__ import annotations

import base64
import io
import json
import time
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson

from pipeline_spec.fields import expand_sink_variables
from pipeline_spec.kafka import KafkaSource

from .decimal_text import NotDecimal, decimal_array, json_decimals, spark_decimal

END = "__end"  # `sources.END` (not imported from there: sources imports this module)
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
        self.value_schema = pa.schema([f for f in src.arrow_schema() if f.name in src.schema_])
        self.schema = src.arrow_schema()
        self._avro = _AvroValues(src, self.value_schema) if src.avro_schema is not None else None
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
        values = [m.value() for m in records]
        parsed, bad = self._parse(values)
        good = [m for i, m in enumerate(records) if i not in bad]
        columns = {f.name: parsed.column(f.name) for f in self.value_schema}
        for col, what in self.src.metadata.items():
            columns[col] = pa.array([_metadata(m, what) for m in good])
        columns[END] = pa.array([0] * len(good), pa.int64())
        rows = pa.table(columns).cast(pa.schema([*self.schema, pa.field(END, pa.int64())]))
        if not bad:
            return rows, None
        letters = [records[i] for i in sorted(bad)]
        return rows, pa.table(
            {
                "__file": [partition_id(m.topic(), m.partition()) for m in letters],
                "__lineno": pa.array([m.offset() for m in letters], pa.int64()),
                "__line": [self._letter(m.value()) for m in letters],
            }
        )

    def _letter(self, value: bytes | None) -> str | None:
        """A dead letter's record: the value as text, an Avro value (binary) in base64."""
        if value is not None and self._avro is not None:
            return base64.b64encode(value).decode()
        return _text(value)

    def _parse(self, values: list[bytes | None]) -> tuple[pa.Table, set[int]]:
        """The values that parse, as the value schema's columns, and the indexes of those
        that do not. Arrow parses them all at once; only when that fails, one at a time."""
        if self._avro is not None:
            return self._avro.parse(values)
        bad = {i for i, v in enumerate(values) if not v or not _plausible(v, self.src.format)}
        good = [v for i, v in enumerate(values) if i not in bad]
        try:
            table = self._arrow(good)
            if table.num_rows == len(good):
                return table, bad
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            pass
        tables = []
        for i, v in enumerate(values):
            if i in bad:
                continue
            try:
                one = self._arrow([v])
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                one = None
            if one is None or one.num_rows != 1:
                bad.add(i)
            else:
                tables.append(one)
        return (pa.concat_tables(tables) if tables else self.value_schema.empty_table()), bad

    def _arrow(self, values: list[Any]) -> pa.Table:
        """The values parsed by Arrow, decimal columns as Spark reads them (`decimal_text`:
        from a CSV field's or a JSON number's own text); ArrowInvalid if one does not
        convert."""
        if not values:
            return self.value_schema.empty_table()
        # A record per line: a JSON value's own line breaks are whitespace.
        lines = [v.replace(b"\n", b" ").replace(b"\r", b" ") for v in values]
        body = b"\n".join(lines)
        schema = self.value_schema
        decimals = {f.name: f.type for f in schema if pa.types.is_decimal(f.type)}
        if self.src.format == "csv":
            as_text = pa.schema(
                [f.with_type(pa.string()) if f.name in decimals else f for f in schema]
            )
            table = pcsv.read_csv(
                io.BytesIO(body),
                read_options=pcsv.ReadOptions(column_names=schema.names),
                convert_options=pcsv.ConvertOptions(column_types=as_text, strings_can_be_null=True),
            )
            converted = {
                c: decimal_array(table.column(c).to_pylist(), t) for c, t in decimals.items()
            }
            wrong = {i for _, bad in converted.values() for i in bad}
            arrays = {c: a for c, (a, _) in converted.items()}
        else:
            rest = pa.schema([f for f in schema if f.name not in decimals])
            table = pjson.read_json(
                io.BytesIO(body),
                parse_options=pjson.ParseOptions(
                    explicit_schema=rest, unexpected_field_behavior="ignore"
                ),
            )
            arrays, bad = json_decimals(lines, decimals) if decimals else ({}, {})
            wrong = set(bad)
        if wrong:
            raise pa.ArrowInvalid(f"records {sorted(wrong)} do not convert to a decimal column")
        for c, a in arrays.items():
            table = table.drop_columns([c]) if c in table.column_names else table
            table = table.append_column(c, a)
        return table.select(schema.names).cast(schema)


class _AvroValues:
    """Avro values decoded with the table's writer schema (`avro_schema`), after the
    Confluent framing (magic byte 0, 4-byte schema id, not looked up) if `avro_framing` says
    so. A value that does not decode, or does not decode to exactly its bytes, or whose
    fields do not convert to the columns' types, does not parse. A decimal column takes an
    Avro decimal (at the writer's scale), an int or long, or a numeric string, converted
    as Spark converts decimal text (`decimal_text`: HALF_UP to the column's scale)."""

    def __init__(self, src: KafkaSource, value_schema: pa.Schema) -> None:
        import fastavro

        assert src.avro_schema is not None
        self._schema = fastavro.parse_schema(src.avro_schema)
        self._read = fastavro.schemaless_reader
        self._skip = 5 if src.avro_framing == "confluent" else 0
        self.value_schema = value_schema
        self._decimals = {f.name: f.type for f in value_schema if pa.types.is_decimal(f.type)}

    def _datum(self, value: bytes | None) -> dict[str, Any] | None:
        if not value or (self._skip and (len(value) < self._skip or value[0] != 0)):
            return None
        buf = io.BytesIO(value[self._skip :])
        try:
            record = self._read(buf, self._schema, None)
        except Exception:  # fastavro raises what the bytes make it raise
            return None
        if not isinstance(record, dict) or buf.tell() != len(value) - self._skip:
            return None
        row = {c: record.get(c) for c in self.value_schema.names}
        for c, t in self._decimals.items():
            v = row[c]
            if v is None:
                continue
            # A decimal logical type's value (at the writer's scale) or an integer, by
            # Spark's rule for decimal text: HALF_UP to the column's scale; a string too.
            if isinstance(v, bool) or not isinstance(v, Decimal | int | str):
                return None
            try:
                row[c] = spark_decimal(v if isinstance(v, str) else str(v), t)
            except NotDecimal:
                return None
        return row

    def parse(self, values: list[bytes | None]) -> tuple[pa.Table, set[int]]:
        decoded = [(i, self._datum(v)) for i, v in enumerate(values)]
        rows = [(i, r) for i, r in decoded if r is not None]
        bad = {i for i, r in decoded if r is None}
        try:
            return pa.Table.from_pylist([r for _, r in rows], schema=self.value_schema), bad
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass
        # Some field does not convert: find the records, one at a time.
        good = []
        for i, r in rows:
            try:
                good.append(pa.Table.from_pylist([r], schema=self.value_schema))
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                bad.add(i)
        return (pa.concat_tables(good) if good else self.value_schema.empty_table()), bad


def _plausible(value: bytes, fmt: str) -> bool:
    """Checked before Arrow's reader sees the value: that reader takes the process down on
    a record that is not an object (a bare `null`) instead of raising. One that looks like an
    object but does not parse makes it raise, and is found by parsing one at a time."""
    if fmt == "csv":
        return b"\n" not in value.rstrip(b"\r\n")
    v = value.strip()
    return v[:1] == b"{" and v[-1:] == b"}"


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


__all__ = [
    "KafkaSourceError",
    "KafkaTable",
    "client_config",
    "partition_id",
]
