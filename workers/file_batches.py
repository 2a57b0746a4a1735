"""A `files` source's micro-batch, read by Spark's own file readers.

The `spindle_files` streaming source (`sources.py`) decides which files a micro-batch holds
(its offsets are Spindle's) and produces one row per file; the rows of those files are read
here, in the JVM. Shipping every line through a Python worker and Arrow into the JVM cost
about as much as the rest of a step's Spark work together.

Spark reads each file through a symbolic link named by the file's index in the batch, in a
scratch directory: Hadoop paths cannot name a file with a colon (`events-12:00.json`), and
Spark would expand glob characters (`[`, `{`, `*`) in a path. The index comes back as the
row's file name, so dead letters name the input file exactly as the source does.

JSON and CSV files become raw lines, for the runner to parse (a malformed line is a dead
letter, not a failed batch): `__line`, `__file` (the link's name), `__lineno` (1-based, blank
lines counted), with blank lines and a CSV file's header line left out. Lines end at `\\n`,
`\\r\\n` or `\\r`, as in Spark's own line reader; invalid UTF-8 is replaced by U+FFFD. Parquet
files become the source schema's columns. Every row carries the batch's end offset (`__end`).
"""

from __future__ import annotations

import os
import shutil
import tempfile

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .sources import END

_BLANK = " \t\x0b\x0c"  # what a line may hold and still be blank


class FileBatches:
    """Reads micro-batches of one `files` source; `close()` removes its scratch directory."""

    def __init__(self, spark: SparkSession, fmt: str, schema_ddl: str) -> None:
        self.spark = spark
        self.format = fmt
        self.schema_ddl = schema_ddl
        self._links = tempfile.mkdtemp(prefix="spindle-batch-files-")
        self._paths: list[str] = []

    def rows(self, paths: list[str], end: int) -> DataFrame:
        """The rows of `paths` (a batch's files, in offset order), each with `end`."""
        for name in os.listdir(self._links):
            os.remove(os.path.join(self._links, name))
        links = []
        for i, p in enumerate(paths):
            link = os.path.join(self._links, f"{i:08d}")
            os.symlink(os.path.abspath(p), link)
            links.append(link)
        self._paths = list(paths)
        if self.format == "parquet":
            df = self.spark.read.schema(self.schema_ddl).parquet(*links)
            return df.withColumn(END, F.lit(end).cast("bigint"))
        text = self.spark.read.text(links, wholetext=True)
        lines = text.select(
            F.col("_metadata.file_name").alias("__file"),
            F.posexplode(F.split(F.make_valid_utf8("value"), r"\r\n|\n|\r")).alias("__i", "__line"),
        )
        keep = F.trim(F.col("__line"), F.lit(_BLANK)) != ""
        if self.format == "csv":
            keep = keep & (F.col("__i") > 0)  # the header names the columns; the spec types them
        return lines.where(keep).select(
            "__line",
            "__file",
            (F.col("__i") + 1).cast("bigint").alias("__lineno"),
            F.lit(end).cast("bigint").alias(END),
        )

    def path_of(self, file: str) -> str:
        """The input file of a row of the last batch read, from its `__file`."""
        return self._paths[int(file)]

    def close(self) -> None:
        shutil.rmtree(self._links, ignore_errors=True)
