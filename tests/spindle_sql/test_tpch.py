"""The TPC-H queries of docs/examples/tpch/tpch.yaml, as printed in the specification,
maintained incrementally over tpchgen-cli's Parquet files, equal DuckDB running the same
text over the same files: after an early step and at the end. Each table's files arrive
in steps of their own (a seeded schedule: a table may get none, one or several files in a
step, lineitem before its orders, ...), so every join sees either side first.

Every query left out is named with its reason, in lists meant to be edited as features
land: REFUSED, a query Spindle cannot plan yet, with the refusal it must fail with, word for
word (once it plans, the test fails with "plans now"); NOT_RUN, one that plans but is not
run here, and why; FAILING, one that runs but does not equal DuckDB's answer (a strict
expected failure: a fix shows as XPASS). The rest, COMPARED, must equal DuckDB; they are
also run as one Spark pipeline, killed and restored: tests/workers/runtime/test_tpch_pipeline.py.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from oracles.nexmark import Rows, norm
from oracles.tpch import oracle, queries
from pipeline_spec.model import SpecError, parse_spec
from spindle_sql.dataflow import Dataflow
from spindle_sql.errors import SqlError
from spindle_sql.parse import parse
from spindle_sql.planner import plan
from spindle_sql.spec import plan_spec, table_schema
from storage_engine import EngineSettings, StorageLocation
from storage_engine.schema import WEIGHT
from workers.runtime.dataflow_run import DataflowRun

from ..tpch import SPEC as SPEC_PATH
from ..tpch import TpchData, schemas, spec_doc

SPEC = parse_spec(spec_doc())
assert SPEC.sql is not None
QUERIES = queries(SPEC.sql)
TABLES = {src.table: table_schema(src, where) for where, src in SPEC.input_fields()}

# The queries Spindle refuses, each with its refusal word for word (line and column in the
# query's own text, `oracles.tpch.queries`, counted from its comment line), e.g.
#   "q4": "line 13, column 7: 'SELECT * FROM lineitem WHERE ...': not supported in a view",
REFUSED: dict[str, str] = {}
# Queries that plan but are not run here, and why (q19 was, until a condition common to
# every branch of an OR became a join key: a nested loop of lineitem and part).
NOT_RUN: dict[str, str] = {}
# Queries that plan and run but do not give DuckDB's answer: strict expected failures, so
# a fix shows as XPASS; each with the error it fails with and what goes wrong.
# e.g. "q10": (pa.ArrowInvalid, "a spine seek on a key with a DECIMAL column fails"), as
# until the decimal work was merged (569c7be).
FAILING: dict[str, tuple[type[Exception], str]] = {}


def _ordered(names: Iterable[str]) -> list[str]:
    return sorted(names, key=lambda q: int(q[1:]))


PLANNED = _ordered(set(QUERIES) - set(REFUSED))
RUN = _ordered(set(PLANNED) - set(NOT_RUN))
COMPARED = _ordered(set(RUN) - set(FAILING))  # equal to DuckDB's answers

STEPS, EARLY = 6, 2  # the input in 6 steps, compared after step 2 and after the last
SETTINGS = EngineSettings(memory_budget_bytes=1 << 20)  # small: state spills to batch files


def schedule(data: TpchData, seed: int = 48) -> list[dict[str, list[Path]]]:
    """Per step, each table's files read in it: every table's files in name order, spread
    over the steps by its own draw."""
    rng = random.Random(seed)
    steps: list[dict[str, list[Path]]] = [{} for _ in range(STEPS)]
    for table, files in data.files("parquet").items():
        for step, f in zip(sorted(rng.choices(range(STEPS), k=len(files))), files, strict=True):
            steps[step].setdefault(table, []).append(f)
    return steps


def incremental(name: str, text: str, data: TpchData, storage: Path) -> None:
    """Query `name` (its text: `queries`) run as a dataflow over the scheduled steps, its
    integrated output compared with DuckDB's over the files read so far."""
    flow = Dataflow(plan(parse(text), TABLES))
    loc = StorageLocation.open(str(storage), fingerprint=flow.fingerprint, settings=SETTINGS)
    DataflowRun(flow).open(loc)
    integral: Rows = Counter()
    read: dict[str, list[Path]] = {t: [] for t in TABLES}
    compared = []
    try:
        for step, files in enumerate(schedule(data), start=1):
            delta = {t: _read(fs, TABLES[t]) for t, fs in files.items()}
            for r in flow.step(delta)[name].to_pylist():
                w = r.pop(WEIGHT)
                integral[tuple(norm(v) for v in r.values())] += w
            for t, fs in files.items():
                read[t] += fs
            if step in (EARLY, STEPS):
                assert +integral == integral, f"step {step}: negative weights"
                tables = {t: (schemas()[t], read[t]) for t in TABLES}
                want = oracle(name, text, tables, "parquet")
                assert integral == want, f"step {step}: {+(integral - want)} not {want - integral}"
                compared.append(want)
    finally:
        loc.close()
    assert compared[-1], f"{name}: DuckDB has no rows; the test would prove nothing"


def _read(files: list[Path], schema: pa.Schema) -> pa.Table:
    """Files as a `files` table reads them: the declared columns and types."""
    return pa.concat_tables(pq.read_table(f).cast(schema) for f in files)


def test_the_example_holds_the_22_queries() -> None:
    assert list(QUERIES) == [f"q{n}" for n in range(1, 23)]
    assert [s.from_ for s in SPEC.sinks] == list(QUERIES)


@pytest.mark.parametrize(
    ("line", "names"),
    [("Refused", REFUSED), ("Not run", NOT_RUN), ("Failing", FAILING), ("Equal", COMPARED)],
)
def test_the_readme_names_the_queries(line: str, names: Iterable[str]) -> None:
    text = (SPEC_PATH.parent / "README.md").read_text()
    m = re.search(rf"^{line} today: ([^.]*)\.", text, re.MULTILINE)
    assert m, f"README.md: no line '{line} today: ...'"
    named = [q.strip() for q in m.group(1).replace("\n", " ").split(",")]
    assert named == (_ordered(names) or ["none"])


def test_the_example_declares_the_generated_schemas(tpch_data: TpchData) -> None:
    """tpchgen-cli's Parquet columns and types (its strings are Arrow's string views) are
    the example's schemas."""
    for table, files in tpch_data.files("parquet").items():
        got = [
            (f.name, pa.string() if f.type == pa.string_view() else f.type)
            for f in pq.read_schema(files[0])
        ]
        assert got == [(f.name, f.type) for f in TABLES[table]], table
        assert len(files) > 1, f"{table}: one file; the tables should arrive in several"


@pytest.mark.parametrize("name", _ordered(REFUSED))
def test_a_refused_query_fails_with_its_refusal(name: str) -> None:
    try:
        plan(parse(QUERIES[name]), TABLES)
    except SqlError as e:
        assert "; ".join(str(p) for p in e.problems) == REFUSED[name]
    else:
        pytest.fail(f"{name} plans now: move it out of REFUSED (tests/spindle_sql/test_tpch.py)")


@pytest.mark.parametrize("name", _ordered(NOT_RUN))
def test_a_query_not_run_plans(name: str) -> None:
    plan(parse(QUERIES[name]), TABLES)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            q, marks=pytest.mark.xfail(strict=True, raises=FAILING[q][0], reason=FAILING[q][1])
        )
        if q in FAILING
        else q
        for q in RUN
    ],
)
def test_a_query_equals_duckdb_step_by_step(name: str, tpch_data: TpchData, tmp_path: Path) -> None:
    incremental(name, QUERIES[name], tpch_data, tmp_path)


def test_the_example_pipeline_plans_once_no_query_is_refused() -> None:
    """The whole spec plans exactly when every query does (docs/examples/tpch/README.md)."""
    if not REFUSED:
        plan_spec(SPEC)
        return
    with pytest.raises(SpecError) as e:
        plan_spec(SPEC)
    assert {field for field, _ in e.value.errors} == {"sql"}
