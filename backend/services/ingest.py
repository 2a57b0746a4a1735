"""Appending pushed records to a pipeline's input log (that of an input table reading one,
`PipelineSpec.input_logs`: the `log` source): NDJSON or CSV, parsed with the stream's
declared schema (`pipeline_spec.formats.bodies`, as Kafka's values and files are parsed),
appended durably as one segment. A request is all-or-nothing: a bad
record rejects the whole body, naming the problem.

Decimal columns take what Spark's JSON and CSV readers take, as they convert it (a JSON
number from its own digits, never a double, or a string; rounded HALF_UP to the scale); a
value with too many digits before the point rejects the body."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from pipeline_spec.changes import bad_changes
from pipeline_spec.formats.bodies import BadBody, parse_body
from pipeline_spec.model import InputLogged, PipelineSpec
from pipeline_spec.offsets import count
from storage_engine.errors import StorageError
from storage_engine.fileio import PosixFileLayer
from storage_engine.input_log import InputLog
from storage_engine.location_view import list_checkpoints
from storage_engine.manifest import CHECKPOINT_META, MANIFEST, read_doc

from ..errors import InvalidInput, NotFound


def log_source(spec: PipelineSpec, stream: str) -> InputLogged:
    """The input table whose log takes records pushed to `stream`."""
    logs = spec.input_logs()
    for src in logs:
        if src.stream == stream:
            return src
    have = ", ".join(repr(src.stream) for src in logs)
    raise NotFound(
        f"pipeline {spec.name!r} has no input stream {stream!r}"
        + (f" (its streams: {have})" if have else " (no input table's source is a log)")
    )


def parse(
    body: bytes,
    fmt: str,
    schema: pa.Schema,
    upserted: tuple[tuple[str, ...], str] | None = None,
) -> pa.Table:
    """`body`'s records as `schema`'s columns (`pipeline_spec.formats.bodies`); for an
    upserted table (`upserted`: its key and op columns), each with its key and a known op."""
    try:
        table = parse_body(body, fmt, schema)
    except BadBody as e:
        raise InvalidInput(e.message, details=e.details) from None
    if upserted is not None:
        _check_changes(table, *upserted)
    return table


def _check_changes(table: pa.Table, key: tuple[str, ...], op: str) -> None:
    """Every record names its key, and says what it is in words the op column takes."""
    for i, (field, why) in bad_changes(table, key, op).items():
        raise InvalidInput(f"record {i + 1}: {why}", details={"record": i + 1, "field": field})


def append(storage: Path, spec: PipelineSpec, src: InputLogged, table: pa.Table) -> tuple[int, int]:
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
