"""The TPC-H example as a pipeline on Spark: docs/examples/tpch/tpch.yaml, its views those of
the queries whose dataflows equal DuckDB (tests/spindle_sql/test_tpch.py: COMPARED), over
tpchgen-cli's tables as Parquet and as CSV with quoted fields, each table in several files
and advancing by its own step size. The driver is SIGKILLed right after a step and a second
run resumes from its checkpoint; then every view (its `view` sink, in the last checkpoint)
equals DuckDB running the query's own text over the same files."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from oracles.nexmark import Rows, norm
from oracles.tpch import Format, oracle
from storage_engine.location_view import read_spine

from ...spindle_sql.test_tpch import COMPARED, QUERIES
from ...tpch import TpchData, schemas, spec_doc
from .test_exactly_once import run

# Files per step of each table: lineitem, one a step, sets the number of steps (one per
# file); the others advance faster, some all at once.
PER_STEP = {"lineitem": 1, "orders": 1, "customer": 2, "part": 3, "partsupp": 2,
            "supplier": 4, "nation": 1, "region": 2}  # fmt: skip
KILL_AFTER_STEP = 2


def pipeline(tmp: Path, data: TpchData, fmt: Format, texts: dict[str, str]) -> Path:
    """The example spec over the data in `fmt`, with the views of `texts` (query -> its
    text) and their sinks; a checkpoint after every step."""
    doc = spec_doc()
    for table in [doc["source"], *doc["tables"]]:
        name = table["table"]
        table.update(path=str(data.root / fmt / name), format=fmt)
        table["max_files_per_step"] = PER_STEP[name]
    doc["sql"] = ";\n\n".join(t.strip() for t in texts.values())
    doc["sinks"] = [s for s in doc["sinks"] if s["from"] in texts]
    doc.update(checkpoint={"every_steps": 1}, trigger={"interval": "100ms"})
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def killed_and_resumed(tmp: Path, data: TpchData, fmt: Format, texts: dict[str, str]) -> None:
    """Runs the pipeline to its end across a SIGKILL; asserts each view equals DuckDB's."""
    spec = pipeline(tmp, data, fmt, texts)
    steps = len(data.files(fmt)["lineitem"])
    assert run(tmp, spec, 0.0, after_steps=KILL_AFTER_STEP) is None, "the run was not killed"
    _assert_no_dead_letters(tmp)  # early: a bad parse fails the test before a second run
    run(tmp, spec, kill_after=None)
    events = [json.loads(x) for x in (tmp / "state" / "metrics.jsonl").read_text().splitlines()]
    started = [e for e in events if e.get("event") == "started"]
    assert len(started) == 2 and started[1]["restored"] is not None, started
    assert 1 < started[1]["first_step"] <= KILL_AFTER_STEP + 2, started
    assert max(e["step"] for e in events if "event" not in e) == steps
    _assert_no_dead_letters(tmp)
    files = data.files(fmt)
    tables = {t: (columns, files[t]) for t, columns in schemas().items()}
    for name, text in texts.items():
        want = oracle(name, text, tables, fmt)
        assert want and set(want.values()) == {1}, f"{name}: DuckDB's rows are not distinct"
        assert _view(tmp, name) == want, name


def _assert_no_dead_letters(tmp: Path) -> None:
    letters = [x for f in sorted((tmp / "state").glob("dead-letters/*")) for x in f.open()]
    assert not letters, f"{len(letters)} dead letters, the first: {letters[0]}"


def _view(tmp: Path, name: str) -> Rows:
    """A view sink's rows in the last checkpoint (each once: TPC-H's answers have no
    duplicates)."""
    table = read_spine(tmp / "state", f"view.{name}").rows
    rows: list[dict[str, Any]] = [] if table is None else table.to_pylist()
    return Counter(tuple(norm(v) for v in r.values()) for r in rows)


@pytest.mark.parametrize("fmt", ["parquet", pytest.param("csv", marks=pytest.mark.full)])
def test_the_compared_queries_equal_duckdb_across_a_sigkill(
    fmt: Format, tpch_data: TpchData, tmp_path: Path
) -> None:
    if not COMPARED:
        pytest.skip("no TPC-H query runs yet (tests/spindle_sql/test_tpch.py)")
    killed_and_resumed(tmp_path, tpch_data, fmt, {q: QUERIES[q] for q in COMPARED})
