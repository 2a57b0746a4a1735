"""Python scalar UDFs in views (issue 52): declared in the spec, parsed but never run by
planning, called by the dataflow with Arrow arrays; their errors (a raise, a wrong length
or type) name the function and the row; their code is in the operators' fingerprints; a
non-deterministic one gives another answer on replay."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pipeline_spec.model import PipelineSpec, SpecError, parse_spec
from pipeline_spec.udf_source import inline
from pipeline_spec.udfs import check_source
from spindle_sql.dataflow import Dataflow
from spindle_sql.spec import plan_spec
from spindle_sql.udfs import UdfError
from storage_engine import EngineSettings, StorageLocation
from storage_engine.schema import WEIGHT
from workers.runtime.dataflow_run import DataflowRun
from workers.runtime.udfs import load

CODE = '''
import random

import pyarrow as pa
import pyarrow.compute as pc


def shout(s, times):
    """s upper-cased, then `times` exclamation marks."""
    marks = pc.binary_repeat(pa.repeat("!", len(s)), times)
    return pc.binary_join_element_wise(pc.utf8_upper(s), marks, "")


def bucket(x):
    return pc.cast(pc.floor(pc.divide(x, 10.0)), pa.int64())


def fails_on_b(s):
    if pc.any(pc.equal(s, "b")).as_py():
        raise ValueError("b is not welcome")
    return s


def too_short(s):
    return s.slice(1)


def wrong_type(s):
    return pc.utf8_length(s)


def not_an_array(s):
    return s.to_pylist()


def leaves(s):
    import sys

    sys.exit(0)


def noisy(x):
    return pa.array([v + random.random() for v in x.to_pylist()])
'''

DECLARED = [
    {"name": "shout", "args": ["string", "bigint"], "returns": "string"},
    {"name": "bucket", "args": ["double"], "returns": "bigint"},
    {"name": "fails_on_b", "args": ["string"], "returns": "string"},
    {"name": "too_short", "args": ["string"], "returns": "string"},
    {"name": "wrong_type", "args": ["string"], "returns": "string"},
    {"name": "not_an_array", "args": ["string"], "returns": "string"},
    {"name": "noisy", "args": ["double"], "returns": "double"},
    {"name": "leaves", "args": ["string"], "returns": "string"},
]


def _spec(sql: str, code: str = CODE, functions: list[dict[str, Any]] = DECLARED) -> PipelineSpec:
    return parse_spec(
        {
            "name": "u",
            "tables": [
                {
                    "kind": "log",
                    "stream": "t",
                    "table": "t",
                    "schema": {"k": "string", "x": "double", "n": "int"},
                }
            ],
            "sql": sql,
            "udfs": {"code": code, "functions": functions},
        }
    )


ROWS = pa.table(
    {
        "k": pa.array(["a", "b", None, "a"]),
        "x": pa.array([1.0, 12.5, 30.0, 19.0]),
        "n": pa.array([1, 2, 3, 0], pa.int32()),
    }
)


class _Flow:
    """A spec's dataflow on a fresh location, its UDFs loaded."""

    def __init__(self, spec: PipelineSpec, path: Path) -> None:
        planned = plan_spec(spec, udf_impls=load(spec))
        self.flow = Dataflow(planned.views)
        self.loc = StorageLocation.open(
            str(path), fingerprint=self.flow.fingerprint, settings=EngineSettings()
        )
        self.run = DataflowRun(self.flow)
        self.run.open(self.loc)

    def step(self, rows: pa.Table = ROWS) -> dict[str, Counter[tuple[Any, ...]]]:
        out = self.flow.step({"t": rows})
        got: dict[str, Counter[tuple[Any, ...]]] = {}
        for view, delta in out.items():
            c: Counter[tuple[Any, ...]] = Counter()
            for r in delta.to_pylist():
                w = r.pop(WEIGHT)
                c[tuple(r.values())] += w
            got[view] = c
        return got


def test_a_scalar_udf_in_a_projection_and_a_group_by(tmp_path: Path) -> None:
    spec = _spec(
        "CREATE VIEW v AS SELECT k, shout(k, n) AS s FROM t WHERE k IS NOT NULL;"
        "CREATE VIEW w AS SELECT bucket(x) AS b, count(*) AS c FROM t GROUP BY bucket(x)"
    )
    f = _Flow(spec, tmp_path)
    try:
        got = f.step()
        # n is an int, declared bigint: cast as Spark widens.
        assert got["v"] == Counter({("a", "A!"): 1, ("b", "B!!"): 1, ("a", "A"): 1})
        assert got["w"] == Counter({(0, 1): 1, (1, 2): 1, (3, 1): 1})
    finally:
        f.loc.close()


def test_planning_checks_calls_against_the_declarations() -> None:
    def problems(sql: str) -> str:
        with pytest.raises(SpecError) as e:
            plan_spec(_spec(sql))
        return str(e.value)

    assert "bucket: argument 1 is string, declared double" in problems(
        "CREATE VIEW v AS SELECT bucket(k) FROM t"
    )
    assert "line 1" in problems("CREATE VIEW v AS SELECT bucket(k) FROM t")
    assert "shout: takes 2 arguments, as declared (1)" in problems(
        "CREATE VIEW v AS SELECT shout(k) FROM t"
    )
    with pytest.raises(SpecError, match=r"udfs\.functions\.0\.name.*built-in"):
        plan_spec(
            _spec(
                "CREATE VIEW v AS SELECT k FROM t",
                "def upper(s):\n    return s\n",
                [{"name": "upper", "args": ["string"], "returns": "string"}],
            )
        )


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("def f(:\n", "line 1"),
        ("def g(s):\n    return s\n", "'f' is not defined at the module's top level"),
        ("def f(a, b):\n    return a\n", "does not take 1 positional arguments"),
        ("async def f(s):\n    return s\n", "is async"),
        ("if True:\n    def f(s):\n        return s\n", "not defined at the module's top level"),
    ],
)
def test_the_module_is_checked_by_parsing_it(code: str, message: str) -> None:
    decl = [{"name": "f", "args": ["string"], "returns": "string"}]
    with pytest.raises(SpecError, match=message):
        _spec("CREATE VIEW v AS SELECT f(k) FROM t", code, decl)


def test_a_module_that_raises_or_exits_as_it_loads_is_a_spec_error() -> None:
    decl = [{"name": "f", "args": ["string"], "returns": "string"}]
    for top in ("raise RuntimeError('no config')", "import sys; sys.exit(3)"):
        spec = _spec(
            "CREATE VIEW v AS SELECT f(k) FROM t", f"{top}\n\ndef f(s):\n    return s\n", decl
        )
        with pytest.raises(SpecError, match="udfs: the module raised"):
            load(spec)
    with pytest.raises(SpecError, match=r"udfs\.functions\.0\.args"):
        _spec(
            "CREATE VIEW v AS SELECT k FROM t",
            "def f():\n    return 1\n",
            [{"name": "f", "args": [], "returns": "int"}],
        )


def test_parsing_never_runs_the_module(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').write('ran')\n\ndef f(s):\n    return s\n"
    decl = [{"name": "f", "args": ["string"], "returns": "string"}]
    spec = _spec("CREATE VIEW v AS SELECT f(k) FROM t", code, decl)
    plan_spec(spec)
    assert check_source(code, spec.udfs.functions if spec.udfs else []) == []
    assert not marker.exists()
    load(spec)  # the pipeline's process runs it
    assert marker.read_text() == "ran"


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        ("fails_on_b", r"udf fails_on_b failed on row \('b'\): ValueError: b is not welcome"),
        ("too_short", "udf too_short returned 3 values for 4 rows"),
        ("wrong_type", "udf wrong_type returned int32 values: it is declared to return string"),
        ("not_an_array", "udf not_an_array returned a list: it must return a pyarrow Array"),
        # sys.exit(0) in a UDF must not look like a pipeline that stopped cleanly.
        ("leaves", r"udf leaves failed on row \('a'\): SystemExit: 0"),
    ],
)
def test_a_failing_udf_fails_the_step_naming_it(fn: str, message: str, tmp_path: Path) -> None:
    f = _Flow(_spec(f"CREATE VIEW v AS SELECT {fn}(k) AS r FROM t"), tmp_path)
    try:
        with pytest.raises(UdfError, match=message) as e:
            f.step()
        if fn == "fails_on_b":  # the function's own traceback, with its line of code
            assert 'raise ValueError("b is not welcome")' in e.value.detail
    finally:
        f.loc.close()


def test_a_udf_under_a_case_runs_only_on_its_rows(tmp_path: Path) -> None:
    f = _Flow(
        _spec(
            "CREATE VIEW v AS SELECT CASE WHEN k = 'b' THEN 'skip' ELSE fails_on_b(k) END AS r "
            "FROM t"
        ),
        tmp_path,
    )
    try:
        assert f.step()["v"] == Counter({("a",): 2, ("skip",): 1, (None,): 1})
    finally:
        f.loc.close()


def test_changing_the_code_changes_only_the_operators_it_reaches() -> None:
    sql = (
        "CREATE VIEW v AS SELECT bucket(x) AS b, count(*) AS c FROM t GROUP BY bucket(x);"
        "CREATE VIEW w AS SELECT k, count(*) AS c FROM t GROUP BY k"
    )

    def fingerprints(code: str) -> dict[str, str]:
        flow = Dataflow(plan_spec(_spec(sql, code)).views)
        return dict(flow.circuit.operator_fingerprints)

    before, after = fingerprints(CODE), fingerprints(CODE + "\n# a comment\n")
    assert before.keys() == after.keys()
    changed = {op for op in before if before[op] != after[op]}
    assert changed and all(op.startswith("v.") for op in changed)
    assert fingerprints(CODE) == before  # the same code: the same state


def test_a_file_module_is_read_inside_the_roots(tmp_path: Path) -> None:
    (tmp_path / "fns.py").write_text(CODE)
    doc = _spec("CREATE VIEW v AS SELECT bucket(x) AS b FROM t").model_dump(by_alias=True)
    doc["udfs"] = {"path": "fns.py", "functions": DECLARED}
    spec = parse_spec(doc)
    assert inline(spec, [tmp_path]).udfs.code == CODE  # type: ignore[union-attr]
    with pytest.raises(SpecError, match=r"udfs\.path"):
        inline(spec, [tmp_path / "elsewhere"])


def test_a_non_deterministic_udf_gives_another_answer_on_replay(tmp_path: Path) -> None:
    """What docs/sql.md warns of: a step redone after a crash or a restore computes the
    UDF again. A deterministic one gives the same rows; this one gives other rows, so the
    view's integral differs from the first run's (and its retractions no longer match)."""
    sql = "CREATE VIEW v AS SELECT k, sum(noisy(x)) AS s, sum(bucket(x)) AS b FROM t GROUP BY k"
    spec = _spec(sql)

    def run(path: Path) -> tuple[Counter[tuple[Any, ...]], Counter[tuple[Any, ...]]]:
        f = _Flow(spec, path)
        try:
            got = f.step()["v"]
            return Counter({(k, b): w for (k, _s, b), w in got.items()}), got
        finally:
            f.loc.close()

    det_1, first = run(tmp_path / "a")
    det_2, replayed = run(tmp_path / "b")
    assert det_1 == det_2  # the deterministic part is the same
    assert first != replayed  # the noisy sums are not
