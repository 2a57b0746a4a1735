"""Appending pushed records to a pipeline's input log (the `log` source): NDJSON or CSV,
parsed with the stream's declared schema, appended durably as one segment. A request is
all-or-nothing: a bad record rejects the whole body, naming the problem.

Decimal columns take what Spark's JSON and CSV readers take, as they convert it
(`pipeline_spec.decimal_text`: a JSON number from its own digits, never a double, or a string;
rounded HALF_UP to the scale); a value with too many digits before the point rejects the
body."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson

from pipeline_spec.decimal_text import decimal_array, json_decimals
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
    decimals = {f.name: f.type for f in schema if isinstance(f.type, pa.Decimal128Type)}
    lines: list[int] = []
    if fmt != "csv":
        lines = _check_records(text, schema)
    try:
        if fmt == "csv":
            # Decimal columns as text: Spark's rule converts them (`_decimals`).
            as_text = pa.schema(
                [f.with_type(pa.string()) if f.name in decimals else f for f in schema]
            )
            table = pcsv.read_csv(
                io.BytesIO(body),
                convert_options=pcsv.ConvertOptions(
                    column_types=as_text, include_columns=schema.names, strings_can_be_null=True
                ),
            )
        else:
            table = pjson.read_json(
                io.BytesIO(body),
                parse_options=pjson.ParseOptions(
                    # Unknown fields were refused above; decimals are read below.
                    explicit_schema=pa.schema([f for f in schema if f.name not in decimals]),
                    unexpected_field_behavior="ignore",
                ),
            )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, KeyError) as e:
        raise InvalidInput(
            f"records do not parse as {fmt} with the stream's schema: {e}",
            details={"schema": {f.name: str(f.type) for f in schema}},
        ) from None
    if decimals:
        table = _decimals(table, text, fmt, lines, decimals)
    return table.select(schema.names).cast(schema)


def _decimals(
    table: pa.Table,
    text: str,
    fmt: str,
    lines: list[int],
    columns: dict[str, pa.Decimal128Type],
) -> pa.Table:
    """`table` with its decimal `columns` converted as Spark converts them: a CSV field's
    text, a JSON record's value (`lines`: where each record is in the body)."""
    if fmt == "csv":
        for c, t in columns.items():
            values, bad = decimal_array(table.column(c).to_pylist(), t)
            if bad:
                i = min(bad)
                raise InvalidInput(
                    f"record {i + 1} (after the header), field {c!r}: {bad[i]}",
                    details={"record": i + 1, "field": c},
                )
            table = table.set_column(table.schema.get_field_index(c), c, values)
        return table
    records = [line for line in text.split("\n") if line.strip()]
    values, bad = json_decimals(records, columns)
    if bad:
        i = min(bad)
        field, _, why = bad[i].partition(": ")
        raise InvalidInput(
            f"line {lines[i]}, field {field!r}: {why}",
            details={"line": lines[i], "field": field},
        )
    for c, column in values.items():
        table = table.append_column(c, column)
    return table


def _utf8(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        line = body.count(b"\n", 0, e.start) + 1
        raise InvalidInput(
            f"line {line}: not valid UTF-8 (byte {body[e.start]:#04x} at offset {e.start})",
            details={"line": line},
        ) from None


def _check_records(text: str, schema: pa.Schema) -> list[int]:
    """Every non-blank line is one JSON object with only the schema's fields, checked in
    Python before Arrow's reader sees the body: that reader takes the process down on some
    malformed input (a bare `null` line) instead of raising. The records' line numbers."""
    names = set(schema.names)
    lines = []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        lines.append(n)
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
    return lines


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
