"""The `kafka` sink: a view's changes to a Kafka topic, one Kafka transaction per step.

- `changes`: a record per change row: the row's columns, `__op` (`insert` for a positive
  weight, `delete` for a negative one), `__weight` and `__step`, as a JSON object; the key is
  the `key` columns as a JSON object (none without `key`). Decimals are JSON strings of all
  their digits (`"1234.50"`), times ISO 8601 strings.
- `upsert`: a record per key the step changed: the key's new row (with `__step`), or a
  tombstone (no value) for a key whose row was retracted and not replaced.

Every record carries the headers `spindle-writer` (`<pipeline>/<sink>`) and `spindle-step`.
The producer's transactional id is `spindle-<pipeline>-<sink>`: opening the sink fences any
older producer of the same sink (a zombie driver) and aborts its open transaction. A
committed step cannot be taken back, so the sink does not roll back: it learns the last step
committed to the topic from the topic itself (the newest `spindle-step` of its writer, read
`read_committed`) and skips steps up to it. That is exact because a step redone after a
restore reads the input it read the first time (the offset log): same step, same output.
A topic whose newest Spindle records are another writer's is refused.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import json
import time
from typing import Any

import pyarrow as pa

from pipeline_spec.fields import expand_sink_variables
from pipeline_spec.model import KafkaSink as KafkaSinkSpec
from storage_engine.location_view import to_jsonable
from storage_engine.schema import WEIGHT

from ..keyed_changes import KeyBroken, keyed_changes
from .sink import SinkConflictError, SinkContext, SinkError

WRITER, STEP = "spindle-writer", "spindle-step"  # record headers
TIMEOUT_S = 30.0
_TAIL = 64  # offsets read back from a partition's end at a time, looking for the last step


class KafkaSink:
    rolls_back = False  # a committed transaction stays: steps up to `last_step` are skipped

    def __init__(self, spec: KafkaSinkSpec, schema: pa.Schema, pipeline: str) -> None:
        from confluent_kafka import Producer

        self.name, self.spec = spec.name, spec
        self.columns = [n for n in schema.names if n != WEIGHT]
        self.writer = f"{pipeline}/{spec.name}".encode()
        # Broker and security settings, shared by the producer and `_last_step`'s consumer.
        self._client = {
            "bootstrap.servers": spec.bootstrap_servers,
            **{k: expand_sink_variables(v) for k, v in spec.properties.items()},
        }
        config = {
            **self._client,
            "transactional.id": f"spindle-{pipeline}-{spec.name}",
            "enable.idempotence": True,
            "linger.ms": 5,
            "transaction.timeout.ms": int(TIMEOUT_S * 2000),
        }
        self._producer = Producer(config)
        self._call("init_transactions", TIMEOUT_S)
        self._last = self._last_step()

    def _describe(self) -> str:
        return f"kafka sink {self.name!r} (topic {self.spec.topic!r})"

    def _call(self, method: str, *args: Any) -> None:
        from confluent_kafka import KafkaException

        try:
            getattr(self._producer, method)(*args)
        except KafkaException as e:
            err = e.args[0] if e.args else e
            raise SinkError(f"{self._describe()}: {method} failed: {err}") from None

    def _last_step(self) -> int:
        """The newest step this sink committed to the topic (0: none)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {
                **self._client,
                "group.id": f"spindle-sink-{self.name}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            }
        )
        try:
            md = consumer.list_topics(self.spec.topic, timeout=TIMEOUT_S)
            t = md.topics.get(self.spec.topic)
            if t is None or t.error is not None or not t.partitions:
                raise SinkError(f"{self._describe()}: the topic does not exist")
            newest = 0
            for p in sorted(t.partitions):
                tp = TopicPartition(self.spec.topic, p)
                low, high = consumer.get_watermark_offsets(tp, timeout=TIMEOUT_S)
                back = _TAIL
                while True:
                    found = self._newest_in(consumer, p, max(low, high - back))
                    if found is not None or high - back <= low:
                        break
                    back *= 4
                newest = max(newest, found or 0)
            return newest
        finally:
            consumer.close()

    def _newest_in(self, consumer: Any, partition: int, start: int) -> int | None:
        """The newest step of this writer among partition `partition`'s records from
        `start` to its end; SinkConflictError if the newest Spindle record is another's."""
        from confluent_kafka import KafkaError, TopicPartition

        consumer.assign([TopicPartition(self.spec.topic, partition, start)])
        newest: tuple[bytes, int] | None = None  # (writer, step)
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            msgs = consumer.consume(1000, timeout=1.0)
            done = False
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        done = True
                        continue
                    raise SinkError(f"{self._describe()}: reading its end: {err.str()}")
                headers = dict(m.headers() or [])
                if STEP in headers and WRITER in headers:
                    newest = (headers[WRITER], int(headers[STEP]))
            if done:
                break
        else:
            raise SinkError(f"{self._describe()}: the topic's end did not arrive in time")
        consumer.unassign()
        if newest is None:
            return None
        writer, step = newest
        if writer != self.writer:
            raise SinkConflictError(
                f"{self._describe()}: the topic's newest records are {writer.decode()!r}'s "
                "(a topic has one writing sink)"
            )
        return step

    def last_step(self) -> int:
        return self._last

    def rollback(self, step: int) -> None:
        pass  # committed steps stay; `write` skips those up to `last_step`

    def write(self, step: int, delta: pa.Table) -> None:
        if step <= self._last:
            return  # committed before a restart: the redone step has the same output
        records = list(self._records(step, delta))
        if not records:
            return
        headers = [(WRITER, self.writer), (STEP, str(step).encode())]
        self._call("begin_transaction")
        try:
            for key, value in records:
                self._produce(key, value, headers)
            self._call("commit_transaction", TIMEOUT_S)
        except BaseException:
            from confluent_kafka import KafkaException

            with contextlib.suppress(KafkaException):  # else the broker times it out
                self._producer.abort_transaction(TIMEOUT_S)
            raise
        self._last = step

    def _produce(self, key: bytes | None, value: bytes | None, headers: list[Any]) -> None:
        while True:
            try:
                self._producer.produce(self.spec.topic, value=value, key=key, headers=headers)
                return
            except BufferError:  # the local queue is full: let it drain
                self._producer.poll(0.1)

    def _records(self, step: int, delta: pa.Table) -> Any:
        key = self.spec.key
        if self.spec.mode == "upsert":
            try:
                changes = keyed_changes(delta, self.columns, key)
            except KeyBroken as e:
                raise SinkError(f"{self._describe()}: step {step}: key {e.key} {e}") from None
            for c in changes:
                value = None if c.new is None else _json({**c.new, "__step": step})
                yield _json(c.key), value
            return
        weights = delta.column(WEIGHT).to_pylist()
        for row, w in zip(delta.select(self.columns).to_pylist(), weights, strict=True):
            op = "insert" if w > 0 else "delete"
            k = _json({c: row[c] for c in key}) if key else None
            yield k, _json({**row, "__op": op, "__weight": w, "__step": step})

    def sync(self) -> None:
        pass  # each step is committed as it is written

    def forget_through(self, step: int) -> None:
        pass

    def close(self) -> None:
        self._producer.flush(TIMEOUT_S)
        # Its threads end with it: a closed sink does not keep reconnecting to the broker.
        del self._producer


def _json(row: dict[str, Any]) -> bytes:
    return json.dumps(row, default=_value, separators=(",", ":")).encode()


def _value(v: Any) -> Any:
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return to_jsonable(v)
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    raise TypeError(f"not JSON serialisable: {type(v).__name__}")


def open_sink(spec: KafkaSinkSpec, ctx: SinkContext) -> KafkaSink:
    return KafkaSink(spec, ctx.schema, ctx.pipeline)


__all__ = ["STEP", "WRITER", "KafkaSink", "open_sink"]
