"""A `files` source's micro-batches, read by Spark's own file readers.

The driver decides which files a micro-batch holds (`input_files.py`; its offsets are
Spindle's); the rows of those files are read here, in the JVM. Shipping
every line through a Python worker and Arrow into the JVM cost more than the rest of a
step's Spark work together.

Spark reads a directory of symbolic links, one per file of the batch, named
`<end offset>-<index>`: Hadoop paths cannot name a file with a colon (`events-12:00.json`),
Spark would expand glob characters (`[`, `{`, `*`) in a path, and, above all, the DataFrame
over that directory is built once per run: each batch only relinks and refreshes its file
listing. (Building and analysing a batch's DataFrames cost a step 100-150 ms, about as much
as running them.) The name gives each row its batch's end offset and its file.

JSON files are read by Spark's JSON reader (as `spark.read.json` in PERMISSIVE mode): the
source schema's columns, and `__corrupt`, a record's text when it does not parse (its line;
invalid UTF-8 replaced by U+FFFD). The reader gives no line numbers; `bad_line_numbers`
finds a bad record's line by reading its file in Python, which only a batch with bad records
pays. (Spark's JSON reader parsed a step's lines in 60 % of the time `from_json` over raw
lines took.)

CSV files become raw lines, for the runner to parse (a malformed line is a dead letter, not a
failed batch): `__line`, `__lineno` (1-based, blank lines counted), with blank lines and each
file's header line left out. Parquet files become the source schema's columns.

Lines end at `\\n`, `\\r\\n` or `\\r`, as in Spark's own line reader. Every row carries the
batch's end offset (`__end`) and `__file`, the link's name (`path_of` maps it back).
"""

from __future__ import annotations

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

CORRUPT = "__corrupt"  # a JSON record's text when it does not parse
_BLANK = " \t\x0b\x0c"  # what a line may hold and still be blank
_LINE_END = re.compile(rb"\r\n|\n|\r")


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
        if self._rows is not None:
            self.spark.catalog.refreshTable(self._view)

    def rows(self) -> DataFrame:
        if self._rows is None:
            self._rows = self._build()
        return self._rows

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
            files = reader.text(self._links, wholetext=True)
        # The refresh goes through a temporary view: `REFRESH TABLE` of a view relists the
        # files of the relation it and every DataFrame derived from it share.
        named = files.select("*", F.col("_metadata.file_name").alias("__file"))
        named.createOrReplaceTempView(self._view)
        batch = self.spark.table(self._view)
        end = F.substring_index("__file", "-", 1).cast("bigint").alias(END)
        if self.format == "parquet":
            return batch.select(*[c for c in batch.columns if c != "__file"], end)
        if self.format == "json":
            # Arrow would carry a bad record's invalid UTF-8 as is, which Python cannot read.
            fields = [f"`{c}`" for c in batch.columns if c not in ("__file", CORRUPT)]
            text = F.make_valid_utf8(CORRUPT).alias(CORRUPT)
            return batch.select(*fields, text, "__file", end)
        lines = batch.select(
            "__file",
            end,
            F.posexplode(F.split(F.make_valid_utf8("value"), r"\r\n|\n|\r")).alias("__i", "__line"),
        )
        keep = (F.trim(F.col("__line"), F.lit(_BLANK)) != "") & (F.col("__i") > 0)
        return lines.where(keep).select(
            "__line", "__file", (F.col("__i") + 1).cast("bigint").alias("__lineno"), END
        )

    def path_of(self, file: str) -> str:
        """The input file of a row of the batch last read, from its `__file`."""
        return self._shown[_index(file)]

    def bad_line_numbers(self, bad: Sequence[tuple[str, str]]) -> list[int | None]:
        """The line of each bad JSON record of the batch last read, given as (`__file`, its
        text), in any order: read from the files in Python.

        A record's text is its line, so the lines holding a text are those it may come from;
        whether a line parses depends on its text alone, so every line holding a bad
        record's text is bad. One line may give several bad records (an array of objects):
        L identical lines give B records, B/L each, in order. None if no line holds the text
        (not expected; the record keeps its text either way)."""
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
    """(1-based number, text) of the lines of `path` whose text is in `texts`, decoded as
    Spark's JSON reader does: UTF-8 with U+FFFD for invalid bytes, a leading BOM dropped."""
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    out = []
    for n, raw in enumerate(_LINE_END.split(data), start=1):
        text = raw.decode("utf-8", errors="replace")
        if text in texts:
            out.append((n, text))
    return out
