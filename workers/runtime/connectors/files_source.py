"""The `files` source: a directory's (or an object-store prefix's) files in name order, one
offset per file, a step at most `max_files_per_step` of them. Each file is a split. The
driver parses a step's files when Arrow gives exactly Spark's rows
(`pipeline_spec.formats`); otherwise Spark's own readers do (`FileBatches`)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource

from pipeline_spec import model as S
from pipeline_spec.offsets import Offset, count
from storage_engine.objstore import ObjectStore, ObjectStoreSettings

from ..csv_lines import parses_in_driver as csv_parses
from ..csv_lines import read_csv_files
from ..file_batches import FileBatches
from ..input_files import ObjectFiles, fetch_files, open_input_files
from ..json_lines import parses_in_driver as json_parses
from ..json_lines import read_json_lines
from ..parquet_files import NarrowerDecimal, read_parquet_files
from ..sources import END
from ..step_ends import StepEndsSource
from .letters import line_letters
from .source import FileSplit, Rows, SourceContext, Split, columns_ddl

# A files table's reader in the driver, by format: its rows, or None when Spark must read.
_READERS: dict[str, Callable[[Sequence[str], pa.Schema], pa.Table | None]] = {
    "json": read_json_lines,
    "csv": read_csv_files,
    "parquet": read_parquet_files,
}
_PARSES: dict[str, Callable[[pa.Schema], bool]] = {
    "json": json_parses,
    "csv": csv_parses,
    "parquet": lambda _: True,
}


class FilesInput:
    reads_ahead = True
    input_log = None
    release_below = None
    on_durable = None

    def __init__(self, spec: S.FilesSource, ctx: SourceContext) -> None:
        self.spec, self.table = spec, spec.table
        self.schema = ctx.schema
        self.batches: FileBatches | None = FileBatches(ctx.spark, spec.format, ctx.ddl)
        self.listing = open_input_files(spec.path, spec.table, ctx.roots)
        self.parses_in_driver = _PARSES[spec.format](self.schema)
        self.has_lines = spec.format != "parquet"  # Parquet's reader flags no record
        self._names: list[str] = []  # the last listing
        self._fetched: tuple[list[str], list[str]] | None = None  # names, local paths

    def _file_names(self, at_least: int | None = None) -> list[str]:
        """The files in offset order: listed now, or, given `at_least`, the last listing if
        it holds that many (files are immutable and new ones sort after the old, so a
        listing's first files never change; a step's files were listed by its trigger)."""
        if at_least is None or len(self._names) < at_least:
            self._names = self.listing.names()
        return self._names

    def _fetch(self, names: list[str]) -> list[str]:
        """Local paths of these files, fetched if remote (again only if they are not the
        last ones fetched: a step the driver did not parse goes to Spark)."""
        if self._fetched is None or self._fetched[0] != names:
            self._fetched = (names, self.listing.fetch(names))
        return self._fetched[1]

    def first_offset(self, restored: Offset) -> Offset:
        return restored

    def step_end(self, start: Offset) -> Offset:
        at = count(start)
        return max(at, min(len(self._file_names()), at + self.spec.max_files_per_step))

    def driver_step_end(self, start: Offset) -> int | None:
        end = count(self.step_end(start))
        return end if end > count(start) else None

    def splits(self, start: Offset, end: Offset) -> list[Split]:
        start, end = count(start), count(end)
        names = self._file_names(end)[start:end]
        last = start + len(names)  # fewer than asked: as many as are listed
        return [FileSplit(n, i, last) for i, n in enumerate(names)]

    def to_batches(self, splits: list[Split]) -> None:
        """Point `batches` (Spark's reader) at these splits' files, fetched if remote."""
        names = [s.name for s in splits if isinstance(s, FileSplit)]
        assert self.batches is not None
        end = splits[0].end if splits else 0
        self.batches.read(self._fetch(names), end, [self.listing.url(n) for n in names])

    def read(self, splits: list[Split]) -> Rows | None:
        names = [s.name for s in splits if isinstance(s, FileSplit)]
        return _parsed(self.spec.format, self.schema, splits, self._fetch(names), self.listing.url)

    def split_reader(self) -> FilesReader:
        store = self.listing.store.settings if isinstance(self.listing, ObjectFiles) else None
        return FilesReader(self.spec.format, self.schema, self.listing.path, store)

    def spark_query(
        self, start: Offset, ends: Callable[[], str]
    ) -> tuple[type[DataSource], dict[str, str]]:
        return StepEndsSource, {"ends": ends(), "start": json.dumps(start)}

    def waiting(self, offset: Offset) -> bool:
        return len(self._file_names()) > count(offset)

    def lag(self, offset: Offset) -> dict[str, Any]:
        return {"lag": max(0, len(self._file_names()) - count(offset))}

    def dead_letters(self, table: str, bad: pa.Table) -> list[dict[str, Any]]:
        return line_letters(table, bad, self.spec.format, self.batches)

    def close(self) -> None:
        if self.batches is not None:
            self.batches.close()
        self.listing.close()


@dataclass(frozen=True)
class FilesReader:
    """A files table's splits read in any process: a directory's files where they are (the
    driver listed them inside the roots), an object store's fetched to a scratch directory
    first. Reads only what Arrow parses exactly as Spark would, like `FilesInput.read`."""

    format: str
    schema: pa.Schema
    path: str  # the directory, or the store's URL (dead letters name files by it)
    store: ObjectStoreSettings | None

    def read(self, splits: list[Split]) -> Rows | None:
        names = [s.name for s in splits if isinstance(s, FileSplit)]
        if self.store is None:
            paths = [os.path.join(self.path, n) for n in names]
            return _parsed(self.format, self.schema, splits, paths, self._url)
        store = ObjectStore(self.store)
        with tempfile.TemporaryDirectory(prefix="spindle-input-files-") as scratch:
            paths = fetch_files(store, names, scratch)
            return _parsed(self.format, self.schema, splits, paths, store.url)

    def _url(self, name: str) -> str:
        return os.path.join(self.path, name)


def _parsed(
    fmt: str, schema: pa.Schema, splits: list[Split], paths: list[str], url: Callable[[str], str]
) -> Rows | None:
    """The rows of the splits' files (at `paths`), with `__end`; None if Spark must read
    them. A file Spark would fail on is named by `url`, as listed, not as fetched."""
    names = [s.name for s in splits if isinstance(s, FileSplit)]
    end = splits[0].end if splits else 0
    try:
        rows = _READERS[fmt](paths, schema)
    except NarrowerDecimal as e:
        e.file = url(names[e.index])
        raise
    if rows is None:
        return None
    return rows.append_column(END, pa.array([end] * rows.num_rows, pa.int64())), None


class FilesKind:
    def columns(self, spec: S.FilesSource) -> str:
        if spec.schema_:
            return columns_ddl(spec.schema_)
        if spec.format == "parquet":
            raise S.SpecError([("source.schema", "give the schema of the parquet files")])
        raise S.SpecError([("source.schema", "required for json and csv files")])

    def spark_options(self, spec: S.FilesSource, schema: pa.Schema, ddl: str) -> dict[str, str]:
        return {}  # the driver decides where steps end (`step_ends.py`)

    def line_records(self, spec: S.FilesSource) -> bool:
        return spec.format != "parquet"

    def reads_by_name(self, spec: S.FilesSource) -> bool:
        return spec.format in ("json", "parquet")  # CSV fields are parsed by position

    def wall_clock(self, spec: S.FilesSource) -> bool:
        return True

    def open(self, spec: S.FilesSource, ctx: SourceContext) -> FilesInput:
        return FilesInput(spec, ctx)


KIND = FilesKind()

__all__ = ["KIND", "FilesInput"]
