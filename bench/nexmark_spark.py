"""One Nexmark query on Spark Structured Streaming, for `bench.nexmark`, in a process of its
own (so its peak memory is its own):

    python -m bench.nexmark_spark CONFIG.json

The events are read as a JSON file stream, one file per micro-batch, with a 4-second
watermark on `date_time` for the windowed queries; RocksDB state store; a 10 ms
processing-time trigger. The query's view goes to the `noop` sink (output mode append if Spark
accepts it for the query, else update), or, with `collect`, to the `memory` sink (append, else
complete: the final result of an aggregate) and from there to `out` as JSON lines. A query
Spark's streaming engine refuses is reported with Spark's reason, not run. Writes one JSON
object to CONFIG's `result`: the output mode, per micro-batch durations and input rows, and
start-up.
"""

from __future__ import annotations

import json
import re
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

STARTED = time.monotonic()
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Spark keeps this many progress reports; more than any profile has files.
PROGRESS_KEPT = 10_000


class _Refused(Exception):
    """Spark's streaming engine does not run the query in this output mode."""


def _started(spark: Any, cfg: dict[str, Any], mode: str) -> Any:
    from pyspark.errors import AnalysisException

    w = spark.table(cfg["query"]).writeStream.outputMode(mode)
    w = w.option("checkpointLocation", str(Path(cfg["work"]) / f"checkpoint-{mode}"))
    w = w.format("memory").queryName("collected") if cfg["collect"] else w.format("noop")
    try:
        return w.trigger(processingTime="10 milliseconds").start()
    except AnalysisException as e:
        raise _Refused(str(e).splitlines()[0]) from None


def _read_files(p: Any) -> int:
    """How many of the input files the query has read by this progress report (Spark's
    numInputRows counts rows after filters pushed into the JSON reader: not the events)."""
    end = p.sources[0].endOffset if p.sources else None
    m = re.search(r"logOffset\D*(\d+)", str(end))
    return int(m.group(1)) + 1 if m else 0


def _wait(q: Any, files: int, timeout_s: float) -> list[Any]:
    """Until every input file was read and no batch ran for 2 s (a last batch without data
    may still emit windows the watermark closed; a trigger finding nothing runs no batch)."""
    deadline = time.monotonic() + timeout_s
    last, since = None, time.monotonic()
    while True:
        if (failed := q.exception()) is not None:
            # Some unsupported plans pass start() and fail in the first batch's tasks.
            refusal = re.search(r"\[UNSUPPORTED[A-Z_]*\][^\n]*", str(failed))
            if refusal:
                raise _Refused(refusal.group(0))
            raise RuntimeError(f"the Spark query failed: {failed}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"Spark did not finish the input in {timeout_s:.0f} s")
        progress = q.recentProgress
        batch = progress[-1].batchId if progress else None
        if batch != last:
            last, since = batch, time.monotonic()
        elif progress and _read_files(progress[-1]) >= files and time.monotonic() - since > 2:
            return list(progress)
        time.sleep(0.1)


def _plain(v: Any) -> Any:
    """As `oracles.nexmark.norm` compares: a timestamp (UTC) as epoch microseconds."""
    if isinstance(v, datetime):
        return (v.replace(tzinfo=UTC) - EPOCH) // timedelta(microseconds=1)
    if isinstance(v, Decimal):
        return float(v)
    return v


def _ts(p: Any) -> float:
    return datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")).timestamp()


def main(config: str) -> int:
    from workers.runtime.session import spark_session

    cfg = json.loads(Path(config).read_text())
    spark = spark_session("bench-nexmark-spark")
    spark.conf.set(
        "spark.sql.streaming.stateStore.providerClass",
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    )
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", str(PROGRESS_KEPT))
    events = (
        spark.readStream.schema(cfg["schema"]).option("maxFilesPerTrigger", 1).json(cfg["events"])
    )
    if cfg["watermark"]:
        events = events.withWatermark("date_time", cfg["watermark"])
    events.createOrReplaceTempView("events")
    if cfg.get("side"):
        side = spark.read.schema("key bigint, value string").option("header", True)
        side.csv(cfg["side"]).createOrReplaceTempView("side_input")
    for stmt in cfg["statements"]:
        spark.sql(stmt)
    result: dict[str, Any] = {}
    refusals, tried_s = [], 0.0
    for mode in ["append", "complete"] if cfg["collect"] else ["append", "update"]:
        t0 = time.monotonic()
        q: Any = None
        try:
            q = _started(spark, cfg, mode)
            result["startup_s"] = time.monotonic() - STARTED - tried_s
            progress = _wait(q, cfg["files"], cfg["timeout_s"])
            result["output_mode"] = mode
            break
        except _Refused as e:
            refusals.append(f"{mode}: {e}")
            tried_s += time.monotonic() - t0
            if q is not None:
                q.stop()
    else:
        result = {"refused": "; ".join(refusals)}
    if "refused" not in result:
        data = [p for p in progress if p.numInputRows > 0]
        result["batches"] = [
            {"rows": p.numInputRows, "ms": p.durationMs["triggerExecution"], "ts": _ts(p)}
            for p in data
        ]
        if cfg["collect"]:
            with open(cfg["out"], "w") as f:
                for row in spark.table("collected").collect():
                    plain = [_plain(v) for v in row]
                    f.write(json.dumps({"row": plain, "weight": 1}) + "\n")
        q.stop()
    spark.stop()
    Path(cfg["result"]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
