"""A driver's Spark session and the record of where its start-up went (`Timeline`)."""

from __future__ import annotations

import logging
import os
import sys
import time

from pyspark.sql import SparkSession

from pipeline_spec.spark_conf import ENV as SPARK_CONF_ENV
from pipeline_spec.spark_conf import parse_spark_conf

from . import driver_jvm

log = logging.getLogger("spindle.runner")


def process_start_time() -> float | None:
    """When this process started (wall clock, 10 ms resolution; Linux), else None."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # started, since boot
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


class Timeline:
    """Wall-clock marks of a run's start-up, in order: what a restart spends where. Reported
    once, after the run's first step, as `{"event": "started", "phases_ms": {...}}` in
    metrics.jsonl (each phase: ms since the previous mark) and on the debug log."""

    def __init__(self, start: float | None = None, spare: bool = False) -> None:
        self.marks: list[tuple[str, float]] = [("start", start or time.time())]
        # A spare's run: its timeline starts at the takeover, Spark already started.
        self.spare = spare

    def mark(self, name: str) -> None:
        """The first time `name` is reached (a mark reached again, e.g. a query restarted
        after a pause before the first step, keeps its first time)."""
        if all(n != name for n, _ in self.marks):
            self.marks.append((name, time.time()))

    def phases_ms(self) -> dict[str, float]:
        return {
            name: round((t - self.marks[i][1]) * 1000, 1)
            for i, (name, t) in enumerate(self.marks[1:])
        }

    def total_ms(self) -> float:
        return round((self.marks[-1][1] - self.marks[0][1]) * 1000, 1)


_CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager"
)


def spark_session(
    app: str = "spindle", java_options: str | None = None, class_path: str | None = None
) -> SparkSession:
    """A Spark session for pipelines: master from SPINDLE_SPARK_MASTER (default local[2]),
    Python workers on this interpreter, UTC, no UI, then SPINDLE_SPARK_CONF's keys over
    those defaults (`pipeline_spec.spark_conf`; SparkConfError if it is not valid); its JVM
    maps the class-data archive when one is built (`spark_cds`). `java_options`: more
    options for the driver's JVM (instead of the archive's); `class_path`: jars first on its
    class path (instead of the archive's unsigned copies)."""
    conf = parse_spark_conf(os.environ.get(SPARK_CONF_ENV))  # before anything starts
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    java, first = driver_jvm.driver_options(java_options, class_path)
    driver_jvm.attach(java, first)  # the JVM `python -m workers.runtime.driver run` started early
    builder = SparkSession.builder
    if first:
        builder = builder.config("spark.driver.extraClassPath", first)
    try:
        spark = _build(builder, app, java, conf)
    finally:
        driver_jvm.detach()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _build(
    builder: SparkSession.Builder, app: str, java_options: str, conf: dict[str, str]
) -> SparkSession:
    builder = (
        builder.appName(app)
        .master(os.environ.get("SPINDLE_SPARK_MASTER", "local[2]"))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        # Streaming queries write two small files per micro-batch (offset and commit logs).
        # The default manager goes through Hadoop's FileContext, whose rename asks for each
        # path's link status, which Hadoop's local file system answers by running `readlink`
        # (without Hadoop's native library, as with pip's pyspark): four process spawns from
        # the JVM per batch. The FileSystem-based manager renames with
        # File.renameTo (atomic on POSIX file systems).
        .config("spark.sql.streaming.checkpointFileManagerClass", _CHECKPOINT_FILE_MANAGER)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # PySpark's DataFrame debugging sends the Python call site of every DataFrame and
        # Column function to the JVM (to name it in error messages): about eight Py4J round
        # trips per call, a good part of a step's planning. Spindle's errors name spec
        # fields.
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
    )
    for key, value in conf.items():  # the deployment's, over the defaults above
        builder = builder.config(key, value)
    return builder.getOrCreate()
