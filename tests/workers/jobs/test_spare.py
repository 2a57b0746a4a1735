"""Spare drivers (`python -m workers.jobs.driver spare`, workers/runtime/spare.py) and the worker's
keeping of them (workers/jobs/spares.py): the takeover line; a spare that is not needed, or is
told nonsense, does not take over; the warm-up writes nothing outside its scratch directory;
the worker keeps its spare only while it supervises runs, and hands it any run. (A spare
taking over a SIGKILLed run and a restore, with exactly-once output:
tests/backend/test_platform.py; the standalone takeover: bench.spare, run by tests/bench.)"""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
import typer
from pyspark.sql import SparkSession

from backend.settings import Settings
from pipeline_spec.exits import EXIT_SPEC
from pipeline_spec.model import parse_spec
from tests.polling import wait_until
from workers.jobs import launch as launches
from workers.jobs import spares as spares_module
from workers.runtime.driver import preload_rest_control_plane
from workers.runtime.runner import Runner
from workers.runtime.spare import SpareTakeover, stand_by_spare, warm_up, warm_up_spare

from ... import customers

FILES, ROWS = 12, 200


def spec_doc(tmp: Path) -> dict[str, Any]:
    return customers.spec("spare", str(tmp / "in"), str(tmp / "out"), 2, "500ms")


def test_the_warm_up_writes_nothing_outside_its_scratch_directory(
    tmp_path: Path, spark: SparkSession
) -> None:
    customers.write_input(tmp_path / "in", FILES, ROWS, customers=25, seed=3)
    spec = parse_spec(spec_doc(tmp_path))
    before = set(os.listdir(tmp_path))
    warm_up(spark, spec, until=threading.Event())  # to its first step
    assert set(os.listdir(tmp_path)) == before  # no sink output, no storage location


def test_the_spare_warms_up_on_json_csv_and_parquet_files_and_a_join(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Each of the spare's workloads runs its two steps (a run that failed or read nothing
    would warm up less than bench.spare measures), without a warning."""
    seen: list[tuple[str, str | None, int]] = []
    real_run = Runner.run

    def run(self: Runner, *args: Any, **kwargs: Any) -> Any:
        out = real_run(self, *args, **kwargs)
        src = self.spec.source
        seen.append((src.kind, getattr(src, "format", None), self.step))
        return out

    monkeypatch.setattr(Runner, "run", run)
    with caplog.at_level(logging.WARNING):
        warm_up_spare(spark, until=threading.Event())
    assert seen == [("files", "json", 2), ("files", "csv", 2), ("files", "parquet", 2), ANY]
    assert seen[-1][0] == "datagen" and seen[-1][2] >= 1
    assert "warm-up failed" not in caplog.text


def test_spare_takeover_lines() -> None:
    got = SpareTakeover.parse('{"argv": ["spec.json", "--storage", "s"]}\n', 3.0)
    assert got == SpareTakeover(3.0, ["spec.json", "--storage", "s"])
    got = SpareTakeover.parse('{"argv": ["s.json"], "env": {"SPINDLE_RUN_TOKEN": "t"}}', 1.0)
    assert got == SpareTakeover(1.0, ["s.json"], {"SPINDLE_RUN_TOKEN": "t"})
    bad = ["", "{}", '{"argv": []}', '{"argv": "spec.json"}', '{"argv": [1]}', "[]", "{not"]
    bad += ['{"argv": ["s.json"], "run_id": 1}', '{"env": {}}']
    bad += ['{"argv": ["s.json"], "env": ["A"]}', '{"argv": ["s.json"], "env": {"A": 1}}']
    for line in bad:
        with pytest.raises(ValueError):
            SpareTakeover.parse(line, 0.0)


def test_a_spare_not_needed_or_told_nonsense_never_takes_over(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end of its input means not needed (the caller exits 0 without opening a storage
    location); a line that is not a spare's takeover, exit 2; a takeover gives the run's
    arguments."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert stand_by_spare(preload_rest_control_plane)[1] is None
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"from_checkpoint": "latest"}\n'))
    with pytest.raises(typer.Exit) as exit_:
        stand_by_spare(preload_rest_control_plane)
    assert exit_.value.exit_code == EXIT_SPEC
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"argv": ["p.json", "--storage", "s"]}\n'))
    assert stand_by_spare(preload_rest_control_plane)[1] == SpareTakeover(
        ANY, ["p.json", "--storage", "s"]
    )


def test_the_spare_serves_any_run_and_is_kept_only_while_runs_are_supervised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One spare per worker, spawned only while a run is supervised; a run's launch hands it
    the run's arguments and its log; retired (input closed) when the last supervision ends."""
    told = tmp_path / "told"
    # A stand-in for `python -m workers.jobs.driver spare`: it records its input, then exits.
    code = f"import sys, pathlib; pathlib.Path({str(told)!r}).write_text(sys.stdin.read())"
    stand_in = [sys.executable, "-c", code]
    monkeypatch.setattr(spares_module, "DRIVER", stand_in)
    settings = Settings(data_dir=tmp_path)
    spares = spares_module.Spares()
    spares.ensure(settings)
    assert spares.pid() is None  # the worker supervises nothing: no spare
    (tmp_path / "runs").mkdir()
    with spares.supervising():
        spares.ensure(settings)
        first = spares.pid()
        assert first is not None
        spares.ensure(settings)
        assert spares.pid() == first  # one per worker
        driver = [*stand_in, "run", "p.json", "--storage", "s"]
        log_path = str(tmp_path / "runs" / "1.log")
        env = {"SPINDLE_RUN_TOKEN": "spr_secret"}
        launch = launches.Launch("p", driver, ["--run-id", "7"], "{}", log_path, "latest", 7, env)
        sb = spares.take(launch)
        assert sb is not None and sb.proc.pid == first and spares.pid() is None
        assert sb.proc.wait(timeout=60) == 0
        assert json.loads(told.read_text()) == {
            "argv": ["p.json", "--storage", "s", "--run-id", "7"],
            "env": env,  # the run's token: never on a command line
        }
        assert sb.log_path == log_path and os.path.exists(log_path)  # its log is the run's
        assert spares.take(launch) is None  # taken: none left until the next is spawned
        spares.ensure(settings)
        second = spares.pid()
        assert second is not None and second != first
    assert spares.pid() is None
    # Retired: its input ended without a takeover; it exited 0, so its log is removed.
    logs = tmp_path / "spares"
    wait_until(lambda: not list(logs.glob("spare-*.log")), 60, "the spare's retirement", 0.05)
    assert told.read_text() == "" and not os.path.exists(f"/proc/{second}")
