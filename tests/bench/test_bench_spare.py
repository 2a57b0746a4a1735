"""bench.spare runs end to end at tiny sizes for one source kind and reports every figure
(no timing thresholds: timing is never asserted in a unit test)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.spare import SPECS, WAYS, main, run_benchmark

# Smoke runs of a benchmark (a minute or more each): the full profile runs them.
pytestmark = pytest.mark.full


def test_smoke_report_has_every_figure(tmp_path: Path) -> None:
    report = run_benchmark("smoke", base_dir=str(tmp_path), kinds=("files-csv",))
    json.dumps(report)
    ms = report["first_step_ms"]["files-csv"]
    assert set(ms) == set(WAYS)
    assert all(math.isfinite(v) and v > 0 for v in ms.values())
    saving = report["spare_saving_ms"]["files-csv"]
    assert saving == pytest.approx(ms["cold"] - ms["spare"], abs=0.2)  # figures are rounded
    assert not list(tmp_path.iterdir())  # cleaned up


def test_every_source_kind_has_a_spec_and_unknown_kinds_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert set(SPECS) == {
        "files-json",
        "files-csv",
        "files-parquet",
        "log",
        "datagen-aggregate",
        "datagen-join",
    }
    with pytest.raises(SystemExit) as exit_:
        main(["--smoke", "--kinds", "files-json,kafka"])
    assert exit_.value.code == 2
    assert "unknown source kinds ['kafka']" in capsys.readouterr().err
