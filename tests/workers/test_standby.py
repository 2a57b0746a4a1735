"""Hot standby drivers (`run --standby`, workers/standby.py): the takeover line; a standby
that is not needed, or is told nonsense, does not take over; the warm-up writes nothing
outside its scratch directory. (A standby taking over a SIGKILLed run, with exactly-once
output: tests/backend/test_platform.py; the standalone takeover: bench.pipeline's
recovery_standby_ms, run by tests/bench.)"""

from __future__ import annotations

import io
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
import typer
from pyspark.sql import SparkSession

from workers.runner import EXIT_SPEC, spark_session
from workers.spec import parse_spec
from workers.standby import Takeover, stand_by, warm_up

from .. import customers

FILES, ROWS = 12, 200


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    s = spark_session("spindle-tests-standby")
    yield s
    s.stop()


def spec_doc(tmp: Path) -> dict[str, Any]:
    return customers.spec("standby", str(tmp / "in"), str(tmp / "out"), 2, "500ms")


def test_a_standby_not_needed_or_told_nonsense_never_takes_over(
    tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end of its input before a takeover line: no takeover (`run` then exits 0 without
    opening the location). A line that is not a takeover: exit 2, with a clear error."""
    customers.write_input(tmp_path / "in", FILES, ROWS, customers=25, seed=3)
    spec = parse_spec(spec_doc(tmp_path))
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert stand_by(spec)[1] is None
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"from": "latest"}\n'))
    with pytest.raises(typer.Exit) as exit_:
        stand_by(spec)
    assert exit_.value.exit_code == EXIT_SPEC
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"run_id": 7}\n'))
    assert stand_by(spec)[1] == Takeover(ANY, None, 7)
    assert not (tmp_path / "out").exists()  # three warm-ups (cut short): no sink output


def test_takeover_lines() -> None:
    assert Takeover.parse("\n", 1.0) == Takeover(1.0)
    got = Takeover.parse('{"from_checkpoint": "none", "run_id": 7}\n', 2.0)
    assert got == Takeover(2.0, "none", 7)
    for bad in ["[]", '{"run": 1}', '{"run_id": "7"}', '{"run_id": true}']:
        with pytest.raises(ValueError):
            Takeover.parse(bad, 0.0)
    for bad in ['{"from_checkpoint": 1}', "{not json"]:
        with pytest.raises(ValueError):
            Takeover.parse(bad, 0.0)


def test_the_warm_up_writes_nothing_outside_its_scratch_directory(
    tmp_path: Path, spark: SparkSession
) -> None:
    customers.write_input(tmp_path / "in", FILES, ROWS, customers=25, seed=3)
    spec = parse_spec(spec_doc(tmp_path))
    before = set(os.listdir(tmp_path))
    warm_up(spark, spec, until=threading.Event())  # to its first step
    assert set(os.listdir(tmp_path)) == before  # no sink output, no storage location
