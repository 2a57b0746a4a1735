"""The Spark Structured Streaming query whose micro-batches trigger a run's steps.

The query reads a run's input tables through Spindle's data sources (`sources`) from the
run's offsets; each micro-batch calls the runner's `foreachBatch` function, which reads the
batch's end offsets from the query's own offset log (`batch_ends`: Spark writes it before the
batch runs) and takes the step from the run's offsets to them. The query's checkpoint
location is scratch: the run's offsets are Spindle's (checkpoint metadata, `OffsetLog`).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from pipeline_spec.offsets import Offset, parse

from .sources import TablesSource, table_options
from .step_input import StepInput


def start_query(
    spark: SparkSession,
    inputs: Mapping[str, StepInput],
    offsets: Mapping[str, Offset],
    name: str,
    process: Callable[[DataFrame, int], None],
    interval_s: float,
) -> tuple[Any, str]:
    """Start the query over `inputs` (by table, `source`'s first) from `offsets`, calling
    `process` per micro-batch every `interval_s`; the query and its scratch checkpoint
    location (the caller removes it once the query stopped)."""
    first = next(iter(inputs))
    source, options = inputs[first].spark_query(offsets[first])
    if len(inputs) > 1:
        source = TablesSource
        per_table = {t: table_options(*i.spark_query(offsets[t])) for t, i in inputs.items()}
        options = {"tables": json.dumps(per_table)}
    # Registered here, not with the session: a session's first registration is slow (Spark
    # starts a Python worker to look for installed data sources), which a files source's
    # first step, read ahead, need not wait for.
    spark.dataSource.register(source)
    reader = spark.readStream.format(source.name())
    for k, v in options.items():
        reader = reader.option(k, v)
    ck = tempfile.mkdtemp(prefix="spindle-spark-ck-")
    query = (
        reader.load()
        .writeStream.queryName(name)
        .foreachBatch(process)
        .option("checkpointLocation", ck)
        .trigger(processingTime=f"{int(interval_s * 1000)} milliseconds")
        .start()
    )
    return query, ck


def batch_ends(ck: str, batch_id: int, tables: list[str]) -> dict[str, Offset]:
    """A batch's end offset per input table (`tables`, `source`'s first), from the last line
    of the query's offset log entry of the batch in checkpoint location `ck` (`v1`, the
    batch's metadata, then one line per source: its offset's JSON, `{"offset": n}`, or
    `{table: n, ...}` for several tables; a Kafka table's n is its offset per partition)."""
    path = os.path.join(ck, "offsets", str(batch_id))
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    try:
        doc = json.loads(lines[-1])
        if len(tables) == 1:
            return {tables[0]: parse(doc["offset"])}
        return {t: parse(doc[t]) for t in tables}
    except (IndexError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise RuntimeError(f"{path}: not a Spark offset log entry of this query") from e


__all__ = ["batch_ends", "start_query"]
