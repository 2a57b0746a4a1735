"""The connectors by the spec's `kind`: the one place that names every kind. The runtime
opens a source or sink here and then uses only its protocol."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline_spec import model as S

from . import (
    datagen_source,
    delta_sink,
    discard_sink,
    files_sink,
    files_source,
    kafka_sink,
    kafka_source,
    log_source,
    postgres_cdc_source,
    postgres_sink,
    view_sink,
)
from .sink import Sink, SinkContext
from .source import Source, SourceContext, SourceKind

SOURCES: dict[str, SourceKind] = {
    "files": files_source.KIND,
    "kafka": kafka_source.KIND,
    "log": log_source.KIND,
    "datagen": datagen_source.KIND,
    "postgres_cdc": postgres_cdc_source.KIND,
}
# Each opener takes the spec model of its own kind (the key says which), hence `Any`.
SINKS: dict[str, Callable[[Any, SinkContext], Sink]] = {
    "files": files_sink.open_sink,
    "postgres": postgres_sink.open_sink,
    "delta": delta_sink.open_sink,
    "kafka": kafka_sink.open_sink,
    "discard": discard_sink.open_sink,
    "view": view_sink.open_sink,
}


def source_kind(spec: S.InputSource) -> SourceKind:
    """What planning knows of `spec`'s kind of source."""
    return SOURCES[spec.kind]


def open_source(spec: S.InputSource, ctx: SourceContext) -> Source:
    """The source `spec` describes, its rows as `ctx` says they are planned."""
    return SOURCES[spec.kind].open(spec, ctx)


def open_sink(spec: S.Sink, ctx: SinkContext) -> Sink:
    """The sink `spec` describes, over output of `ctx.schema`."""
    return SINKS[spec.kind](spec, ctx)


__all__ = ["SINKS", "SOURCES", "open_sink", "open_source", "source_kind"]
