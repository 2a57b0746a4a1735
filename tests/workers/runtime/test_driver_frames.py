"""A step's rows made in the driver (a log or datagen source's, handed to Spark as a
DataFrame: `StepInput.driver_frame`) are held in the JVM by that DataFrame's plan. Py4J's
proxies sit in reference cycles, so without a collection the JVM kept every step's rows
until Python's cyclic collector happened to run; a long run's heap filled with them and
Spark failed ("GC overhead limit exceeded"). Each new frame now frees the earlier ones."""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from pipeline_spec.model import load_spec
from workers.runtime.run_builder import open_runner
from workers.runtime.step_input import StepInput


def test_the_frames_of_earlier_steps_are_freed(
    tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[weakref.ref[Any]] = []
    frame = StepInput.driver_frame

    def tracked(self: StepInput, start: int, end: int) -> DataFrame:
        df = frame(self, start, end)
        made.append(weakref.ref(df._jdf))  # the proxy of the JVM's Dataset
        return df

    monkeypatch.setattr(StepInput, "driver_frame", tracked)
    spec = load_spec(
        """
name: frames
source: {kind: datagen, generator: clicks, rows_per_second: 1000000,
         max_rows_per_step: 2000, limit: 12000}
transform: {where: "amount > 0"}  # Spark reads the rows: the driver makes a frame
state:
  - {name: n, kind: aggregate, group_by: [user], aggregates: [{name: n, func: count}]}
sinks: [{name: out, kind: discard, from: n}]
"""
    )
    r = open_runner(spec, str(tmp_path / "state"), base_dir=str(tmp_path), spark=spark)
    try:
        r.run(stop_when_idle=2.0)
    finally:
        r.close()
    assert len(made) >= 5
    assert [ref() is None for ref in made[:-2]] == [True] * (len(made) - 2)
