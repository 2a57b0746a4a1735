"""The Nexmark queries of docs/examples/nexmark/, maintained incrementally over generated
events in steps, equal the same queries run by DuckDB as a batch over all the events.

The events come from Spindle's generator (workers/runtime/nexmark.py) at 1,000 events a second, so
30,000 events span 30 seconds: several tumbling and many hopping windows. The oracle
(oracles/nexmark.py) is shared with `bench.nexmark`.

Each step is logged in an offset log (`workers/runtime/offset_log.py`, as a run logs it: its
offsets and processing time, 3.7 s apart so that steps straddle q12's 10-second windows)
and given that time; q12's oracle reads the times back from the log, each event its step's.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pytest
import yaml

from oracles.nexmark import PROCESSING_TIME, PROCTIME_COLUMN, norm, oracle
from pipeline_spec import model as S
from pipeline_spec.model import parse_spec
from spindle_sql.dataflow import Dataflow
from spindle_sql.spec import plan_spec, table_schema
from storage_engine import EngineSettings, StorageLocation
from storage_engine.schema import WEIGHT
from workers.runtime.dataflow_run import DataflowRun
from workers.runtime.nexmark import events
from workers.runtime.offset_log import OffsetLog
from workers.runtime.udfs import load as load_udfs

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples" / "nexmark"
EVENTS, STEP, RATE = 30_000, 3_000, 1_000.0
PROCTIME_US, PROCTIME_STEP_US = 1_767_225_600_500_000, 3_700_000  # 2026-01-01, 3.7 s apart


@pytest.fixture(scope="module")
def stream() -> pa.Table:
    return pa.table(events(7, RATE, 0, EVENTS, 1000, 1_704_067_200_000_000))


QUERIES = sorted(p.stem for p in EXAMPLES.glob("q*.yaml"))


def _side_tables(spec: S.PipelineSpec) -> dict[str, pa.Table]:
    """The rows of a query's further input tables (q13's side input: a CSV file)."""
    out = {}
    for src in spec.tables[1:]:
        assert isinstance(src, S.FilesSource) and src.format == "csv"
        files = sorted((ROOT / src.path).iterdir())
        rows = pa.concat_tables([pcsv.read_csv(f) for f in files])
        out[src.table] = rows.cast(table_schema(src))
    return out


def test_the_examples_cover_the_acceptance_set() -> None:
    want = {f"q{n}" for n in range(23)}
    assert want <= set(QUERIES)


@pytest.mark.parametrize("name", QUERIES)
def test_nexmark_query_equals_duckdb(name: str, stream: pa.Table, tmp_path: Path) -> None:
    spec = parse_spec(yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text()))
    _check(spec, name, stream, tmp_path)


def test_q4_with_a_python_aggregate_equals_duckdb(stream: pa.Table, tmp_path: Path) -> None:
    """q4's average as a Python aggregate (docs/examples/nexmark-q4-python.yaml): it
    retracts, since each auction's final price rises as bids come; DuckDB's is `avg`."""
    path = ROOT / "docs" / "examples" / "nexmark-q4-python.yaml"
    spec = parse_spec(yaml.safe_load(path.read_text()))
    _check(spec, "q4", stream, tmp_path, macros={"py_avg(x)": "avg(x)"})


def _check(
    spec: S.PipelineSpec,
    name: str,
    stream: pa.Table,
    tmp_path: Path,
    macros: dict[str, str] | None = None,
) -> None:
    """View `name` of `spec`, stepped over `stream`, integrates to the oracle's rows."""
    assert spec.sql is not None
    schema = table_schema(spec.source)
    # The windowed queries declare an event time; q14 calls a Python UDF.
    planned = plan_spec(spec, udf_impls=load_udfs(spec))
    flow = Dataflow(planned.views, event_time=planned.event_time)
    loc = StorageLocation.open(
        str(tmp_path), fingerprint=flow.fingerprint, settings=EngineSettings()
    )
    DataflowRun(flow).open(loc)
    integral: Counter[tuple[Any, ...]] = Counter()
    side = _side_tables(spec)  # read in the first step, as a files table is
    log = OffsetLog(str(tmp_path / "storage"))
    try:
        for step, start in enumerate(range(0, EVENTS, STEP), start=1):
            delta = {"events": stream.slice(start, STEP).cast(schema)}
            proctime = PROCTIME_US + step * PROCTIME_STEP_US
            log.record(step, {"events": (start, start + STEP)}, proctime)
            out = flow.step({**delta, **(side if start == 0 else {})}, proctime)[name]
            for r in out.to_pylist():
                w = r.pop(WEIGHT)
                integral[tuple(norm(v) for v in r.values())] += w
    finally:
        loc.close()
    assert +integral == integral, "negative weights"
    assert flow.watermarks.late_rows == dict.fromkeys(planned.event_time, 0)
    if name in PROCESSING_TIME:
        stream = stream.append_column(PROCTIME_COLUMN, _logged_times(log, stream.num_rows))
    want = oracle(name, spec.sql, {"events": stream, **side}, macros)
    assert want, f"{name}: the oracle has no rows; the test would prove nothing"
    assert integral == want


def _logged_times(log: OffsetLog, rows: int) -> pa.Array:
    """Each event's processing time: that of the step whose logged offsets hold it."""
    times = [None] * rows
    step = 1
    while (entry := log.read(step)) is not None:
        start, end = entry["events"]
        assert isinstance(start, int) and isinstance(end, int)
        times[start:end] = [log.proctime(step)] * (end - start)
        step += 1
    assert None not in times, "an event no logged step read"
    return pa.array(times, pa.timestamp("us", tz="UTC"))
