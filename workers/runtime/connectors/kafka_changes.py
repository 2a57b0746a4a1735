"""A `kafka` table fed by changes by key (`upsert`): its records as rows for the engine's
`Upsert`, each with its op, in offset order; what is no change is a dead letter with its
reason, never a failure (a Kafka record cannot be refused as an ingest body is).

- `upsert` with format json, csv or avro: a value is a row, which upserts its key's row
  (or deletes it, if its op column says so); a tombstone (a record without a value)
  deletes the row of the record's key: a JSON object of the key columns (Debezium's and
  Flink's key format; a schema envelope's `payload` too), or for a one-column key its
  value as JSON or as text.
- `debezium-json`: a value is a Debezium change event, in its schema envelope or not: op
  `c`, `r` or `u` upserts `after`, `d` deletes `before`'s key; tombstones, which Debezium
  writes after a delete for log compaction, are skipped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline_spec.changes import bad_changes
from pipeline_spec.formats.values import ValueParser
from pipeline_spec.kafka import KafkaSource

NOT_PARSED = "no value, or not parseable with the table's format and schema"
_BAD_KEY = "a tombstone whose key does not convert to the key columns"
_UPSERTS = ("c", "r", "u")
_INDEX = "__record"  # a row's record, while the two kinds of records are put together


@dataclass
class Changes:
    """A step's records as changes: `rows`, the table's value columns and op column, one per
    record that is a change, in record order (`records`: their indexes); `letters`, every
    other record's index but a skipped tombstone's -> why it is none."""

    rows: pa.Table
    records: list[int]
    letters: dict[int, str] = field(default_factory=dict)


class ChangeRecords:
    """An upserted `kafka` table's records (`src.upsert`), parsed by `values` (its value
    columns, the op column included)."""

    def __init__(self, src: KafkaSource, values: ValueParser) -> None:
        assert src.upsert is not None
        self.key, self.op = tuple(src.upsert.key), src.upsert.op_column
        self.debezium = src.format == "debezium-json"
        self._values = values
        fields = {f.name: f for f in values.schema}
        self._keys = ValueParser("json", pa.schema([fields[k] for k in self.key]))
        self._text_key = len(self.key) == 1 and pa.types.is_string(fields[self.key[0]].type)

    def parse(self, records: list[Any]) -> Changes:
        """`records` (confluent-kafka messages, in offset order) as changes."""
        letters: dict[int, str] = {}
        values: list[tuple[int, bytes]] = []
        keys: list[tuple[int, bytes]] = []
        ops: list[str | None] = [None] * len(records)
        for i, m in enumerate(records):
            value = m.value()
            if self.debezium:
                if value is None:
                    continue  # a delete's tombstone: the delete event came before it
                event = _debezium(value)
                if isinstance(event, str):
                    letters[i] = event
                else:
                    values.append((i, json.dumps(event[0]).encode()))
                    ops[i] = event[1]
            elif value is not None:
                values.append((i, value))
            else:
                key = _tombstone_key(m.key(), self.key, self._text_key)
                if key is None:
                    letters[i] = (
                        "a tombstone whose record key is not a JSON object of the key "
                        f"columns {list(self.key)}"
                    )
                else:
                    keys.append((i, key))
                    ops[i] = "delete"
        parts = [
            self._parsed(values, self._values, letters, NOT_PARSED),
            self._parsed(keys, self._keys, letters, _BAD_KEY),
        ]
        rows = pa.concat_tables(parts, promote_options="default").sort_by(_INDEX)
        rows = rows.cast(pa.schema([*self._values.schema, pa.field(_INDEX, pa.int64())]))
        index = rows.column(_INDEX).to_pylist()
        given = pa.array([ops[i] for i in index], pa.string())
        op = rows.column(self.op)
        rows = rows.set_column(
            rows.schema.get_field_index(self.op),
            self.op,
            pc.if_else(pc.is_valid(given), given, op),
        )
        wrong = bad_changes(rows, self.key, self.op)
        for n, (_, why) in wrong.items():
            letters[index[n]] = why
        if wrong:
            keep = pa.array([n not in wrong for n in range(rows.num_rows)])
            rows = rows.filter(keep)
            index = rows.column(_INDEX).to_pylist()
        return Changes(rows.drop_columns([_INDEX]), index, dict(sorted(letters.items())))

    @staticmethod
    def _parsed(
        todo: list[tuple[int, bytes]], parser: ValueParser, letters: dict[int, str], why: str
    ) -> pa.Table:
        """`todo`'s values parsed, each row with its record's index; those that do not
        parse are letters."""
        table, bad = parser.parse([v for _, v in todo])
        for n in bad:
            letters[todo[n][0]] = why
        index = [i for n, (i, _) in enumerate(todo) if n not in bad]
        return table.append_column(_INDEX, pa.array(index, pa.int64()))


def _payload(doc: Any) -> Any:
    """A Kafka Connect JSON document without its schema envelope."""
    if isinstance(doc, dict) and set(doc) == {"schema", "payload"}:
        return doc["payload"]
    return doc


def _debezium(value: bytes) -> tuple[dict[str, Any], str] | str:
    """A Debezium change event's row and op (`upsert`, `delete`), or why it is none."""
    try:
        event = _payload(json.loads(value))
    except (ValueError, RecursionError):
        return "not a Debezium change event: not JSON"
    if not isinstance(event, dict) or "op" not in event:
        return "not a Debezium change event: no op"
    op = event["op"]
    if op in _UPSERTS or op == "d":
        side = "before" if op == "d" else "after"
        row = event.get(side)
        if not isinstance(row, dict):
            return f"a Debezium {op!r} event without its {side!r} row"
        return row, ("delete" if op == "d" else "upsert")
    return f"Debezium op {op!r} is not one of c, r, u, d (create, read, update, delete)"


def _tombstone_key(key: bytes | None, columns: tuple[str, ...], text: bool) -> bytes | None:
    """A tombstone's record key as a JSON object of the key columns, or None (`text`: the
    key is one string column, which a key that is not JSON, or a JSON number, is)."""
    if key is None:
        return None
    raw = key.decode("utf-8", errors="replace")
    try:
        doc = _payload(json.loads(key))
    except (ValueError, RecursionError):
        doc = raw
    if isinstance(doc, dict):
        return json.dumps({c: doc.get(c) for c in columns}).encode()
    if len(columns) != 1 or isinstance(doc, list):
        return None
    return json.dumps({columns[0]: raw if text and not isinstance(doc, str) else doc}).encode()


__all__ = ["NOT_PARSED", "ChangeRecords", "Changes"]
