"""Appending pushed records to a pipeline's input log (the `log` source): NDJSON or CSV,
parsed with the stream's declared schema, appended durably as one segment. A request is
all-or-nothing: a bad record rejects the whole body, naming the problem."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson

from pipeline_spec.model import LogSource, PipelineSpec
from pipeline_spec.offsets import count
from storage_engine.errors import StorageError
from storage_engine.fileio import PosixFileLayer
from storage_engine.input_log import InputLog
from storage_engine.location_view import list_checkpoints
from storage_engine.manifest import CHECKPOINT_META, MANIFEST, read_doc

from ..errors import InvalidInput, NotFound


def log_source(spec: PipelineSpec, stream: str) -> LogSource:
    """The input table's log source that takes records pushed to `stream`."""
    logs = [src for src in spec.input_sources() if isinstance(src, LogSource)]
    for src in logs:
        if src.stream == stream:
            return src
    have = ", ".join(repr(src.stream) for src in logs)
    raise NotFound(
        f"pipeline {spec.name!r} has no input stream {stream!r}"
        + (f" (its streams: {have})" if have else " (no input table's source is a log)")
    )


def parse(body: bytes, fmt: str, schema: pa.Schema) -> pa.Table:
    if not body.strip():
        raise InvalidInput("empty body: send NDJSON (one JSON object per line) or CSV")
    text = _utf8(body)
    if fmt != "csv":
        _check_records(text, schema)
    try:
        if fmt == "csv":
            return pcsv.read_csv(
                io.BytesIO(body),
                convert_options=pcsv.ConvertOptions(
                    column_types=schema, include_columns=schema.names, strings_can_be_null=True
                ),
            ).cast(schema)
        return (
            pjson.read_json(
                io.BytesIO(body),
                parse_options=pjson.ParseOptions(
                    explicit_schema=schema, unexpected_field_behavior="error"
                ),
            )
            .select(schema.names)
            .cast(schema)
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, KeyError) as e:
        raise InvalidInput(
            f"records do not parse as {fmt} with the stream's schema: {e}",
            details={"schema": {f.name: str(f.type) for f in schema}},
        ) from None


def _utf8(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        line = body.count(b"\n", 0, e.start) + 1
        raise InvalidInput(
            f"line {line}: not valid UTF-8 (byte {body[e.start]:#04x} at offset {e.start})",
            details={"line": line},
        ) from None


def _check_records(text: str, schema: pa.Schema) -> None:
    """Every non-blank line is one JSON object with only the schema's fields, checked in
    Python before Arrow's reader sees the body: that reader takes the process down on some
    malformed input (a bare `null` line) instead of raising."""
    names = set(schema.names)
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as e:
            raise InvalidInput(f"line {n}: not JSON: {e}", details={"line": n}) from None
        if not isinstance(record, dict):
            raise InvalidInput(
                f"line {n}: a record must be a JSON object, not {type(record).__name__}",
                details={"line": n},
            )
        unknown = record.keys() - names
        if unknown:
            raise InvalidInput(
                f"line {n}: unknown field {min(unknown)!r}; the stream's fields are "
                f"{', '.join(schema.names)}",
                details={"line": n, "field": min(unknown)},
            )


def append(storage: Path, spec: PipelineSpec, src: LogSource, table: pa.Table) -> tuple[int, int]:
    """Append `table` to the input log of `src`, one of `spec`'s input tables."""
    log = InputLog(src.log_dir(storage), src.arrow_schema())
    # An empty log beside checkpoints that consumed records: the log was lost or moved
    # with its storage. New records go after what the state has consumed; at offset 0 the
    # pipeline would skip them as already read.
    consumed = _consumed(storage, spec, src.table) if not log.segments() else 0
    return log.append(table, at_least=consumed)


def _consumed(storage: Path, spec: PipelineSpec, input_table: str) -> int:
    """The largest offset of `input_table` any checkpoint of the location has consumed."""
    if not (storage / MANIFEST).exists():
        return 0
    fs = PosixFileLayer()
    out = 0
    for c in list_checkpoints(storage).checkpoints:
        try:
            meta = read_doc(fs, str(storage / c.uuid / CHECKPOINT_META)).get("metadata") or {}
        except StorageError:
            continue
        out = max(out, count(spec.offsets(meta)[input_table]))
    return out


__all__ = ["append", "log_source", "parse"]
