"""A `files` source's micro-batches, read by Spark's own file readers.

The `spindle_files` streaming source (`sources.py`) decides which files a micro-batch holds
(its offsets are Spindle's); the rows of those files are read here, in the JVM. Shipping
every line through a Python worker and Arrow into the JVM cost more than the rest of a
step's Spark work together.

Spark reads a directory of symbolic links, one per file of the batch, named
`<end offset>-<index>`: Hadoop paths cannot name a file with a colon (`events-12:00.json`),
Spark would expand glob characters (`[`, `{`, `*`) in a path, and, above all, the DataFrame
over that directory is built once per run: each batch only relinks and refreshes its file
listing. (Building and analysing a batch's DataFrames cost a step 100-150 ms, about as much
as running them.) The name gives each row its batch's end offset and its file.

JSON and CSV files become raw lines, for the runner to parse (a malformed line is a dead
letter, not a failed batch): `__line`, `__file` (the link's name), `__lineno` (1-based, blank
lines counted), with blank lines and a CSV file's header line left out. Lines end at `\\n`,
`\\r\\n` or `\\r`, as in Spark's own line reader; invalid UTF-8 is replaced by U+FFFD. Parquet
files become the source schema's columns. Every row carries the batch's end offset (`__end`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .sources import END

_BLANK = " \t\x0b\x0c"  # what a line may hold and still be blank


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

    def read(self, paths: list[str], end: int) -> None:
        """Make `rows()` the rows of `paths` (a batch's files, in offset order), each with
        `end`."""
        for name in os.listdir(self._links):
            os.remove(os.path.join(self._links, name))
        for i, p in enumerate(paths):
            os.symlink(os.path.abspath(p), os.path.join(self._links, f"{end}-{i}"))
        self._paths = list(paths)
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
        lines = batch.select(
            "__file",
            end,
            F.posexplode(F.split(F.make_valid_utf8("value"), r"\r\n|\n|\r")).alias("__i", "__line"),
        )
        keep = F.trim(F.col("__line"), F.lit(_BLANK)) != ""
        if self.format == "csv":
            keep = keep & (F.col("__i") > 0)  # the header names the columns; the spec types them
        return lines.where(keep).select(
            "__line", "__file", (F.col("__i") + 1).cast("bigint").alias("__lineno"), END
        )

    def path_of(self, file: str) -> str:
        """The input file of a row of the batch last read, from its `__file`."""
        return self._paths[int(file.split("-")[1])]

    def close(self) -> None:
        shutil.rmtree(self._links, ignore_errors=True)
        if self._rows is not None:
            # After a failure the session may be gone, and its views with it.
            with contextlib.suppress(Exception):
                self.spark.catalog.dropTempView(self._view)
