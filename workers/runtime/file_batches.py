"""A `files` source's micro-batches, read by Spark's own file readers.

The driver decides which files a micro-batch holds (`input_files.py`; its offsets are
Spindle's); the rows of those files are read here, in the JVM. Shipping
every line through a Python worker and Arrow into the JVM cost more than the rest of a
step's Spark work together.

Spark reads a directory of symbolic links, one per file of the batch, named
`<end offset>-<index>`: Hadoop paths cannot name a file with a colon (`events-12:00.json`),
Spark would expand glob characters (`[`, `{`, `*`) in a path, and, above all, the DataFrame
over that directory is built once per run: each batch only relinks and refreshes its file
listing. (Building and analysing a batch's DataFrames cost a step about as much as running
them: docs/benchmarks.md, "Figures behind design choices".) The name gives each row its
batch's end offset and its file.

JSON files are read by Spark's JSON reader (as `spark.read.json` in PERMISSIVE mode): the
source schema's columns, and `__corrupt`, a record's text when it does not parse (its line;
invalid UTF-8 replaced by U+FFFD). CSV files are read by Spark's CSV reader with
`CSV_OPTIONS` (RFC 4180 quoting: a record may span lines), the same way. (Spark's JSON reader
parses a step's lines faster than `from_json` over raw lines.) Neither reader
gives line numbers; `bad_line_numbers` finds a bad record's first line by reading its file
in Python, which only a batch with bad records pays. Parquet files become the source
schema's columns.

A CSV record with more fields than univocity's `maxColumns` (20 480) fails Spark's task
instead of being malformed; after such a failure (`widen_columns`) the batch is read again
with room for as many fields as its files hold commas.

Every row carries the batch's end offset (`__end`) and `__file`, the link's name (`path_of`
maps it back).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import re
import shutil
import tempfile
import uuid
from collections import defaultdict
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .sources import END

CORRUPT = "__corrupt"  # a JSON or CSV record's text when it does not parse
# Spark's CSV reader as Spindle reads CSV: RFC 4180 (a quote inside quotes is doubled, not
# escaped by `\`), records spanning lines, each file's first record a header (its names
# not checked), the other options Spark's defaults (`,`, `"`, an empty field NULL, UTF-8).
CSV_OPTIONS = {"header": "true", "multiLine": "true", "escape": '"', "mode": "PERMISSIVE"}
MAX_COLUMNS = 20480  # univocity's default `maxColumns`, Spark's
_LINE_END = re.compile(r"\r\n|\n|\r")


class FileBatches:
    """Micro-batches of one `files` source: `read(paths, end)` links a batch's files, and
    `rows()` is the DataFrame of the batch last read, the same object for every batch (a
    DataFrame derived from it must be planned anew for each batch: `df.select("*")`, as
    Spark fixes a DataFrame's file listing when it first plans it). `close()` removes the
    scratch directory."""

    def __init__(self, spark: SparkSession, fmt: str, schema_ddl: str) -> None:
        self.spark = spark
        self.format = fmt
        self.schema_ddl = schema_ddl
        self._links = tempfile.mkdtemp(prefix="spindle-batch-files-")
        self._view = f"spindle_batch_files_{uuid.uuid4().hex}"
        self._rows: DataFrame | None = None
        self._paths: list[str] = []
        self._shown: list[str] = []
        self._max_columns = MAX_COLUMNS

    def read(self, paths: list[str], end: int, shown: list[str] | None = None) -> None:
        """Make `rows()` the rows of `paths` (a batch's files, in offset order), each with
        `end`; `shown`: what `path_of` says of each (an object-store file's URL, not its
        local copy), `paths` if not given."""
        for name in os.listdir(self._links):
            os.remove(os.path.join(self._links, name))
        for i, p in enumerate(paths):
            os.symlink(os.path.abspath(p), os.path.join(self._links, f"{end}-{i}"))
        self._paths = list(paths)
        self._shown = list(shown or paths)
        if self._max_columns != MAX_COLUMNS:
            self._max_columns, self._rows = MAX_COLUMNS, None  # widened for one batch only
        if self._rows is not None:
            self.spark.catalog.refreshTable(self._view)

    def rows(self) -> DataFrame:
        """The batch's rows; a new DataFrame only after `widen_columns` (and the batch after)."""
        if self._rows is None:
            self._rows = self._build()
        return self._rows

    def widen_columns(self, error: BaseException) -> bool:
        """Whether a job over the batch last read failed with `error` because a CSV record
        has more fields than the reader takes (univocity fails the task: Spark's PERMISSIVE
        mode does not catch it); if so, `rows()` becomes the batch read with room for as
        many fields as any of its files has commas, plus one (univocity allocates that room
        for every file it reads, hence for this batch only), and the job can run again."""
        if self.format != "csv" or self._max_columns != MAX_COLUMNS:
            return False
        text = str(error)
        # A JVM that has thrown the index error often enough throws it without its message
        # ("ArrayIndexOutOfBoundsException - null": HotSpot's fast throw), so the files
        # decide: room is added only where some file has more commas than the reader takes.
        if "TextParsingException" not in text or "ArrayIndexOutOfBoundsException" not in text:
            return False
        commas = 0
        for path in self._paths:
            with open(path, "rb") as f:
                commas = max(commas, f.read().count(b","))
        if commas + 1 < MAX_COLUMNS:
            return False
        self._max_columns, self._rows = commas + 2, None
        return True

    def _build(self) -> DataFrame:
        reader = self.spark.read
        if self.format == "parquet":
            files = reader.schema(self.schema_ddl).parquet(self._links)
        elif self.format == "json":
            files = (
                reader.schema(f"{self.schema_ddl}, `{CORRUPT}` string")
                .option("mode", "PERMISSIVE")
                .option("columnNameOfCorruptRecord", CORRUPT)
                .json(self._links)
            )
        else:
            # Pruned, the CSV reader would convert only the columns a query reads, and a
            # record with a bad value elsewhere would not be malformed.
            self.spark.conf.set("spark.sql.csv.parser.columnPruning.enabled", "false")
            files = (
                reader.schema(f"{self.schema_ddl}, `{CORRUPT}` string")
                .options(**CSV_OPTIONS)
                .option("columnNameOfCorruptRecord", CORRUPT)
                .option("maxColumns", str(self._max_columns))
                .csv(self._links)
            )
        # The refresh goes through a temporary view: `REFRESH TABLE` of a view relists the
        # files of the relation it and every DataFrame derived from it share.
        named = files.select("*", F.col("_metadata.file_name").alias("__file"))
        named.createOrReplaceTempView(self._view)
        batch = self.spark.table(self._view)
        end = F.substring_index("__file", "-", 1).cast("bigint").alias(END)
        if self.format == "parquet":
            return batch.select(*[c for c in batch.columns if c != "__file"], end)
        # Arrow would carry a bad record's invalid UTF-8 as is, which Python cannot read.
        fields = [f"`{c}`" for c in batch.columns if c not in ("__file", CORRUPT)]
        text = F.make_valid_utf8(CORRUPT).alias(CORRUPT)
        return batch.select(*fields, text, "__file", end)

    def path_of(self, file: str) -> str:
        """The input file of a row of the batch last read, from its `__file`."""
        return self._shown[_index(file)]

    def bad_line_numbers(self, bad: Sequence[tuple[str, str]]) -> list[int | None]:
        """The (first) line of each bad record of the batch last read, given as (`__file`,
        its text), in any order: read from the files in Python.

        A JSON record's text is its line; a CSV record's is its lines, from the first, as in
        the file (the last one's line end left out). The places a text fills, from a line's
        start to a line's end, are those its record may come from; whether a record parses
        depends on its text alone, so every such record is bad. (A CSV place may also be
        inside another record's quoted value, with that value's lines: a wrong line, not
        expected from any real writer.) One JSON line may give several bad records (an
        array of objects): L places of a text give B records, B/L each, in order. None if no
        place holds the text (not expected; the record keeps its text either way)."""
        wanted: dict[str, set[str]] = defaultdict(set)
        for file, text in bad:
            wanted[file].add(text)
        where: dict[tuple[str, str], list[int]] = {}
        for file, texts in wanted.items():
            for n, text in _lines(self._paths[_index(file)], texts):
                where.setdefault((file, text), []).append(n)
        counts: dict[tuple[str, str], int] = defaultdict(int)
        for key in bad:
            counts[key] += 1
        seen: dict[tuple[str, str], int] = defaultdict(int)
        out: list[int | None] = []
        for key in bad:
            lines = where.get(key)
            i = seen[key]
            seen[key] += 1
            out.append(None if not lines else lines[i * len(lines) // counts[key]])
        return out

    def close(self) -> None:
        shutil.rmtree(self._links, ignore_errors=True)
        if self._rows is not None:
            # After a failure the session may be gone, and its views with it.
            with contextlib.suppress(Exception):
                self.spark.catalog.dropTempView(self._view)


def _index(file: str) -> int:
    """A row's file's position in its batch, from its `__file` (`<end>-<index>`)."""
    return int(file.split("-")[1])


def _lines(path: str, texts: set[str]) -> list[tuple[int, str]]:
    """(1-based number, text), in order, of the lines of `path` where one of `texts` starts
    and ends with a line (or the file), decoded as Spark's readers do: UTF-8 with U+FFFD
    for invalid bytes, a leading BOM dropped."""
    with open(path, "rb") as f:
        data = f.read().removeprefix(b"\xef\xbb\xbf").decode("utf-8", errors="replace")
    out = [(n, line) for n, line in enumerate(_LINE_END.split(data), 1) if line in texts]
    spanning = [t for t in texts if "\r" in t or "\n" in t]
    if not spanning:
        return out
    starts = [0, *(m.end() for m in _LINE_END.finditer(data))]
    for text in spanning:
        at = data.find(text)
        while at >= 0:
            n, end = bisect.bisect_left(starts, at), at + len(text)
            if n < len(starts) and starts[n] == at and data[end : end + 1] in ("", "\r", "\n"):
                out.append((n + 1, text))
            at = data.find(text, at + 1)
    return sorted(out)
