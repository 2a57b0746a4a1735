"""What runs beside a run's micro-batches: the first batch read ahead while the query starts
(`ReadAhead`), and the listener that reports the query's progress (`QueryProgress`)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import DataFrame, SparkSession

from .micro_batch import JobTables

log = logging.getLogger("spindle.runner")


class ReadAhead:
    """A run's first batch (a files or log source's), computed by Spark in a thread of its
    own while the run starts: `job` gives the batch's Arrow table, and
    `rows` is then the batch's DataFrame. A cold JVM spends long on its first batch
    (class loading, JIT, code generation)."""

    def __init__(
        self,
        end: int,
        job: Callable[[], JobTables],
        rows: Callable[[], DataFrame],
    ) -> None:
        self.end, self.rows = end, rows
        self._out: JobTables | None = None
        self._thread = threading.Thread(
            target=self._run, args=(job,), name="spindle-read-ahead", daemon=True
        )
        self._thread.start()

    def _run(self, job: Callable[[], JobTables]) -> None:
        try:
            self._out = job()
        except Exception as e:  # the batch itself will read again and report the error
            log.debug("reading the first batch ahead failed: %s", e)

    def wait(self) -> None:
        self._thread.join()

    def result(self) -> JobTables | None:
        """The batch read ahead (None if the read failed), once the read has ended."""
        self.wait()
        return self._out


class QueryProgress:
    """A listener that calls `on_progress` with each progress event of a session's streaming
    queries, as Spark's JSON (a dict: `name`, `batchId`, `numInputRows`, `durationMs`, ...),
    on Spark's listener thread. `add(spark)`, then `remove(spark)`.

    It implements Spark's `PythonStreamingQueryListener` itself, through Py4J, instead of
    subclassing PySpark's `StreamingQueryListener`, whose wrapper converts every event field
    by field (each field, map entry and source a Py4J round trip: ~50 per micro-batch, run
    while the next micro-batch runs, competing with it for the driver's GIL and the JVM).
    Here an event costs one round trip: the progress as JSON."""

    def __init__(self, on_progress: Callable[[dict[str, Any]], None]) -> None:
        self._on_progress = on_progress
        self._jlistener: Any = None
        self._lock = threading.Lock()
        self._removed = False

    def add(self, spark: SparkSession) -> None:
        gateway = spark.sparkContext._gateway
        assert gateway is not None
        ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
        streaming = gateway.jvm.org.apache.spark.sql.streaming
        self._jlistener = streaming.PythonStreamingQueryListenerWrapper(self)
        spark._jsparkSession.streams().addListener(self._jlistener)

    def remove(self, spark: SparkSession) -> None:
        """After this returns, `on_progress` is not running and is never called again (an
        event delivered as the listener was removed would otherwise write to a run's
        storage after the run closed it)."""
        spark._jsparkSession.streams().removeListener(self._jlistener)
        with self._lock:
            self._removed = True

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        progress = json.loads(jevent.progress().json())
        with self._lock:
            if not self._removed:
                self._on_progress(progress)

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]
