"""The `kafka` source's and sink's specs: topics of a Kafka-protocol broker read as one input
table, or written a view's changes."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

import pyarrow as pa
from pydantic import Field, field_validator, model_validator

from .changes import UpsertMode
from .fields import (
    DSN_VARIABLE_PREFIX,
    EVENT_TIME_DOC,
    MAX_COUNT,
    MAX_ROWS,
    NAME_RE,
    TABLE_DOC,
    TABLE_RE,
    EventTime,
    check_sink_variables,
)
from .kinds import SinkModel, SourceModel
from .types import TYPE_NAMES_DOC, arrow_schema, check_types

# Kafka's legal topic names.
TOPIC_RE = r"^[A-Za-z0-9._-]{1,249}$"
# A record's metadata a table may have as columns, and their types.
METADATA_TYPES: dict[str, str] = {
    "key": "string",
    "topic": "string",
    "partition": "int",
    "offset": "bigint",
    "timestamp": "timestamp",
    "headers": "string",
}
BOOTSTRAP_RE = r"^[A-Za-z0-9.\-\[\]:]+(,[A-Za-z0-9.\-\[\]:]+)*$"
_BOOTSTRAP_DOC = "the brokers to connect to first: host:port[,host:port...]"
MetadataKind = Literal["key", "topic", "partition", "offset", "timestamp", "headers"]
# Client properties passed through to the consumer (librdkafka's names): security only.
# Values may name `${SPINDLE_SINK_*}` variables, as sink DSNs do, to keep secrets out of specs.
PROPERTIES = (
    "security.protocol",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "ssl.endpoint.identification.algorithm",
)


class KafkaSource(SourceModel):
    """Records of one or more Kafka topics; offset = the next offset of every partition."""

    offset_per_partition: ClassVar[bool] = True

    kind: Literal["kafka"]
    table: str = Field("input", pattern=TABLE_RE, description=TABLE_DOC)
    event_time: EventTime | None = Field(None, description=EVENT_TIME_DOC)
    bootstrap_servers: str = Field(
        min_length=1, max_length=1000, pattern=BOOTSTRAP_RE, description=_BOOTSTRAP_DOC
    )
    topics: list[str] = Field(min_length=1, max_length=64)
    format: Literal["json", "csv", "avro", "debezium-json"] = Field(
        "json",
        description="the record values: a JSON object, a CSV line or an Avro record "
        "(`avro_schema`) per record; debezium-json, a Debezium change event (JSON, with or "
        "without its schema envelope) per record, which needs `upsert`",
    )
    avro_schema: dict[str, Any] | None = Field(
        None,
        description="format avro: the records' (writer's) Avro schema, a record whose fields "
        "include every column of `schema` (taken by name)",
    )
    avro_framing: Literal["confluent", "none"] = Field(
        "confluent",
        description="format avro: confluent, a magic byte 0 and a 4-byte schema id before "
        "each datum (as Confluent's serializers write); none, the bare datum",
    )
    schema_: dict[str, str] = Field(
        alias="schema",
        min_length=1,
        description=f"the value's column -> type, one of {TYPE_NAMES_DOC}",
    )
    metadata: dict[str, MetadataKind] = Field(
        default_factory=dict,
        description="further columns from each record's metadata: column -> key (as a UTF-8 "
        "string), topic, partition, offset, timestamp or headers (a JSON object, each "
        "header's value as UTF-8)",
    )
    start: Literal["earliest", "latest"] = Field(
        "earliest",
        description="where a pipeline's first run starts each partition (later runs "
        "continue from their checkpoint's offsets; partitions added later start at earliest)",
    )
    start_timestamp_ms: int | None = Field(
        None,
        ge=0,
        le=MAX_COUNT,
        description="instead of `start`: each partition's first record at or after this "
        "time (milliseconds since the epoch)",
    )
    max_records_per_step: int = Field(100_000, gt=0, le=MAX_ROWS)
    upsert: UpsertMode | None = Field(
        None,
        description="records upsert and delete rows by key instead of inserting them: a "
        "value upserts its key's row (or deletes it, if its op column says so), a tombstone "
        "(no value) deletes the row of the record's key; with debezium-json, each event's "
        "op says which (docs/connectors.md)",
    )
    commit_to_group: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._-]{1,249}$",
        description="a consumer group to which the offsets of each checkpoint are committed "
        "once it is durable, for lag monitoring (off by default; the pipeline never reads "
        "them back: its offsets are its checkpoints')",
    )
    properties: dict[str, str] = Field(
        default_factory=dict,
        description=f"client settings passed to the consumer, only {', '.join(PROPERTIES)}; "
        f"values may use ${{{DSN_VARIABLE_PREFIX}*}} variables",
    )

    @field_validator("topics")
    @classmethod
    def _topic_names(cls, v: list[str]) -> list[str]:
        for t in v:
            if not re.match(TOPIC_RE, t):
                raise ValueError(f"{t!r} is not a Kafka topic name ({TOPIC_RE})")
        if len(set(v)) != len(v):
            raise ValueError("a topic is listed twice")
        return v

    @field_validator("schema_")
    @classmethod
    def _types(cls, v: dict[str, str]) -> dict[str, str]:
        return check_types(v)

    @field_validator("properties")
    @classmethod
    def _security_only(cls, v: dict[str, str]) -> dict[str, str]:
        return _check_properties(v)

    @field_validator("avro_schema")
    @classmethod
    def _avro(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is None:
            return v
        import fastavro

        try:
            fastavro.parse_schema(v)
        except Exception as e:  # fastavro raises several kinds for a bad schema
            raise ValueError(f"not a valid Avro schema: {type(e).__name__}: {e}") from None
        if v.get("type") != "record":
            raise ValueError("an Avro record schema (type: record) is needed")
        return v

    @model_validator(mode="after")
    def _columns_unique(self) -> KafkaSource:
        both = sorted(set(self.schema_) & set(self.metadata))
        if both:
            raise ValueError(f"metadata: columns {both} are also value columns in schema")
        if self.format == "debezium-json" and self.upsert is None:
            raise ValueError("upsert: format debezium-json needs the key columns (upsert.key)")
        if self.upsert is not None:
            self.upsert.check(self.schema_, self.event_time)
            if self.upsert.op_column in self.metadata:
                raise ValueError(
                    f"upsert.op_column: {self.upsert.op_column!r} is a metadata column"
                )
        if (self.format == "avro") != (self.avro_schema is not None):
            raise ValueError("avro_schema is given for, and only for, format avro")
        if self.avro_schema is not None:
            fields = {f.get("name") for f in self.avro_schema.get("fields", [])}
            missing = sorted(set(self.schema_) - fields)
            if missing:
                raise ValueError(f"avro_schema: no field for the columns {missing} of schema")
        return self

    def columns(self) -> dict[str, str]:
        """Every column of the table and its type: the value's (an upserted table's op
        column last), then the metadata's."""
        op = {} if self.upsert is None else {self.upsert.op_column: "string"}
        return {
            **self.schema_,
            **op,
            **{c: METADATA_TYPES[m] for c, m in self.metadata.items()},
        }

    def upserted(self) -> tuple[tuple[str, ...], str] | None:
        u = self.upsert
        return None if u is None else (tuple(u.key), u.op_column)

    def arrow_schema(self) -> pa.Schema:
        return arrow_schema(self.columns())


def _check_properties(v: dict[str, str]) -> dict[str, str]:
    for k, value in v.items():
        if k not in PROPERTIES:
            raise ValueError(f"{k!r}: only {', '.join(PROPERTIES)} may be set")
        try:
            check_sink_variables(value)
        except ValueError as e:
            raise ValueError(f"{k}: {e}") from None
    return v


class KafkaSink(SinkModel):
    """A view's changes to a Kafka topic, one transaction per step (docs/connectors.md)."""

    name: str = Field(pattern=NAME_RE)
    kind: Literal["kafka"]
    from_: str = Field(alias="from")
    bootstrap_servers: str = Field(
        min_length=1, max_length=1000, pattern=BOOTSTRAP_RE, description=_BOOTSTRAP_DOC
    )
    topic: str = Field(pattern=TOPIC_RE, description="an existing topic")
    mode: Literal["changes", "upsert"] = Field(
        "changes",
        description="changes: a record per change, the row with __op (insert or delete), "
        "__weight and __step; upsert: a record per changed key, its new row, or a tombstone "
        "(no value) for a deleted key",
    )
    key: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list,
        max_length=64,
        description="the view's columns whose values (a JSON object) are each record's key; "
        "required for upsert",
    )
    properties: dict[str, str] = Field(
        default_factory=dict,
        description=f"client settings passed to the producer, only {', '.join(PROPERTIES)}",
    )

    @field_validator("properties")
    @classmethod
    def _security_only(cls, v: dict[str, str]) -> dict[str, str]:
        return _check_properties(v)

    @model_validator(mode="after")
    def _key(self) -> KafkaSink:
        if self.mode == "upsert" and not self.key:
            raise ValueError("key: an upsert sink needs the view's key columns")
        if len(set(self.key)) != len(self.key):
            raise ValueError("key: a column appears twice")
        return self

    def key_columns(self) -> list[str]:
        return self.key


__all__ = ["METADATA_TYPES", "PROPERTIES", "KafkaSink", "KafkaSource"]
