"""The packages' dependency rules, on the import graph of the source (grimp): every import
statement counts, those inside functions and under TYPE_CHECKING too.

- `pipeline_spec` and `local_servers` import nothing else of Spindle's; `storage_engine`
  imports no package above it; `oracles` (the tests' and benchmarks' references) reaches no
  runtime package, and nothing of the product imports it; `sql` (SQL to dataflow) imports
  only the engine and the spec, and of the engine not the storage location, checkpoints or
  commits (the runtime binds the dataflow to those); the control plane (`backend`) does
  not import Spark.
- The Spark runtime (`RUNTIME`, listed by module until it has a subpackage of its own)
  reaches `backend` only through the database's implementation of its control plane
  (`workers.control_db`); `backend` reaches `workers` only from its composition root
  (`backend.__main__`).
- Tests import the benchmarks only to test them (`tests/bench/`).
- No import cycle between modules.
- No module over 600 lines unless its docstring says why (a paragraph starting
  "Why one long module:").
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import grimp
import pytest

PACKAGES = (
    "pipeline_spec",
    "storage_engine",
    "sql",
    "backend",
    "workers",
    "cli",
    "local_servers",
    "oracles",
)
ROOT = Path(__file__).resolve().parents[1]
LONG_MODULE_LINES = 600
WHY_LONG = "Why one long module:"


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, include_external_packages=True, cache_dir=None)


def _cycles(graph: grimp.ImportGraph) -> Iterator[frozenset[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan's
    algorithm, iterative: the graph is deep)."""
    ours = {m for m in graph.modules if m.split(".")[0] in PACKAGES}
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & ours) for m in ours}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for root in sorted(ours):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on_stack.add(v)
            if i < len(edges[v]):
                work.append((v, i + 1))
                w = edges[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if work:  # v is done: its parent takes its low link
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] == index[v]:
                component = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.add(w)
                    if w == v:
                        break
                if len(component) > 1:
                    yield frozenset(component)


def test_no_import_cycle(graph: grimp.ImportGraph) -> None:
    assert list(_cycles(graph)) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    g = grimp.ImportGraph()
    for a, b in (
        ("workers.a", "workers.b"),
        ("workers.b", "workers.c"),
        ("workers.c", "workers.a"),
    ):
        g.add_import(importer=a, imported=b)
    g.add_import(importer="workers.c", imported="workers.d")
    assert list(_cycles(g)) == [frozenset({"workers.a", "workers.b", "workers.c"})]


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("pipeline_spec", "storage_engine"),
        ("pipeline_spec", "backend"),
        ("pipeline_spec", "workers"),
        ("pipeline_spec", "cli"),
        ("pipeline_spec", "pyspark"),
        ("storage_engine", "backend"),
        ("storage_engine", "workers"),
        ("storage_engine", "cli"),
        ("storage_engine", "pyspark"),
        ("storage_engine", "sql"),
        ("pipeline_spec", "sql"),
        *(("sql", p) for p in ("backend", "workers", "cli", "pyspark")),
        ("backend", "pyspark"),
        ("backend", "workers.runner"),
        ("cli", "pyspark"),
        ("cli", "workers"),
        *(
            ("local_servers", p)
            for p in ("pipeline_spec", "storage_engine", "sql", "backend", "workers")
        ),
        *(("oracles", p) for p in ("backend", "workers", "cli", "pyspark")),
        *((p, "oracles") for p in ("pipeline_spec", "storage_engine", "sql", "backend", "workers")),
    ],
)
def test_a_package_does_not_reach(graph: grimp.ImportGraph, importer: str, imported: str) -> None:
    chains = graph.find_shortest_chains(importer=importer, imported=imported, as_packages=True)
    assert not chains, f"{importer} imports {imported}: {sorted(chains)[0]}"


# What keeps state where, and checkpoints it: the runtime's (workers/dataflow_run.py), not the
# compiler's. The engine's operators reach them (they take a location to open on), so the
# rule is on what sql's own modules import.
STORAGE_MACHINERY = (
    "storage_engine.location",
    "storage_engine.location_commit",
    "storage_engine.location_gc",
    "storage_engine.location_scan",
    "storage_engine.location_view",
    "storage_engine.commit",
    "storage_engine.manifest",
)


@pytest.mark.parametrize("imported", STORAGE_MACHINERY)
def test_sql_does_not_import_the_storage_location_or_commits(
    graph: grimp.ImportGraph, imported: str
) -> None:
    importers = graph.find_modules_that_directly_import(imported)
    ours = sorted(m for m in importers if m == "sql" or m.startswith("sql."))
    assert ours == [], f"{ours} import {imported}"


# The Spark driver's modules: what `python -m workers.driver` runs, bar `control_db`. The
# rest of `workers` is the Celery jobs (launch, supervise, spares, offline operations).
RUNTIME = frozenset(
    f"workers.{m}"
    for m in [
        "batch_jobs",
        "checkpointing",
        "connectors.datagen_source",
        "connectors.delta_sink",
        "connectors.discard_sink",
        "connectors.files_sink",
        "connectors.files_source",
        "connectors.kafka_sink",
        "connectors.kafka_source",
        "connectors.letters",
        "connectors.log_source",
        "connectors.postgres_sink",
        "connectors.registry",
        "connectors.sink",
        "connectors.source",
        "connectors.view_sink",
        "control",
        "control_plane",
        "control_rest",
        "cpu_dispatch",
        "csv_lines",
        "dataflow_run",
        "dead_letters",
        "driver",
        "driver_files",
        "driver_jvm",
        "durability",
        "file_batches",
        "input_files",
        "json_lines",
        "keyed_changes",
        "micro_batch",
        "nexmark",
        "offset_log",
        "parquet_files",
        "plan",
        "progress",
        "restore",
        "run_metrics",
        "runner",
        "session",
        "sinks",
        "sources",
        "spare",
        "spark_cds",
        "spark_install",
        "step_ends",
        "step_input",
        "step_query",
        "warm_up",
        "watchdog",
    ]
)
# The one runtime module that may import `backend`: the driver is given it when no API URL
# is known.
DB_CONTROL_PLANE = "workers.control_db"
COMPOSITION_ROOT = "backend.__main__"


def _reach(graph: grimp.ImportGraph, start: str, exempt: frozenset[str]) -> dict[str, str]:
    """Every module `start` imports directly or through others, not through `exempt`;
    {module: the module that imports it on the way}."""
    via: dict[str, str] = {start: start}
    todo = [start]
    while todo:
        m = todo.pop()
        for n in graph.find_modules_directly_imported_by(m):
            if n not in via and n not in exempt:
                via[n] = m
                todo.append(n)
    return via


def _chain(via: dict[str, str], end: str) -> list[str]:
    out = [end]
    while via[out[-1]] != out[-1]:
        out.append(via[out[-1]])
    return out[::-1]


def _crossings(
    graph: grimp.ImportGraph, starts: Iterable[str], package: str, exempt: frozenset[str]
) -> list[list[str]]:
    """The import chains from `starts` into `package` that avoid `exempt`."""
    out = []
    for start in sorted(starts):
        via = _reach(graph, start, exempt)
        hits = sorted(m for m in via if m.split(".")[0] == package)
        out += [_chain(via, m) for m in hits[:1]]
    return out


def test_the_runtime_reaches_backend_only_through_its_database_control_plane(
    graph: grimp.ImportGraph,
) -> None:
    exempt = frozenset({DB_CONTROL_PLANE})
    assert _crossings(graph, RUNTIME, "backend", exempt) == []


def test_the_runtime_list_is_what_the_driver_runs(graph: grimp.ImportGraph) -> None:
    """A new module the driver imports is listed in RUNTIME (and so held to its rule)."""
    ours = {
        m
        for m in _reach(graph, "workers.driver", frozenset({DB_CONTROL_PLANE}))
        if m.startswith("workers.") and m != "workers"
    }
    assert sorted(ours - RUNTIME) == []
    assert sorted(RUNTIME - ours) == []


def test_backend_reaches_workers_only_from_its_composition_root(
    graph: grimp.ImportGraph,
) -> None:
    mods = {m for m in graph.modules if m.split(".")[0] == "backend"} - {COMPOSITION_ROOT}
    assert _crossings(graph, mods, "workers", frozenset({COMPOSITION_ROOT})) == []


def test_the_crossing_finder_finds_a_runtime_import_of_backend() -> None:
    g = grimp.ImportGraph()
    for a, b in (
        ("workers.driver", "workers.control"),
        ("workers.control", "workers.control_db"),
        ("workers.control_db", "backend.db"),
        ("workers.runner", "workers.helpers"),
        ("workers.helpers", "backend.settings"),
    ):
        g.add_import(importer=a, imported=b)
    runtime = ["workers.driver", "workers.control", "workers.runner"]
    exempt = frozenset({DB_CONTROL_PLANE})
    assert _crossings(g, runtime, "backend", exempt) == [
        ["workers.runner", "workers.helpers", "backend.settings"]
    ]


def _long_modules_without_a_reason() -> list[str]:
    out = []
    for package in (*PACKAGES, "bench"):
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if text.count("\n") <= LONG_MODULE_LINES:
                continue
            doc = ast.get_docstring(ast.parse(text)) or ""
            if WHY_LONG not in doc:
                out.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
    return out


def test_a_long_module_says_why_it_is_long() -> None:
    assert _long_modules_without_a_reason() == [], (
        f"split these, or say in the module's docstring {WHY_LONG!r} ..."
    )


def test_only_the_benchmarks_tests_import_bench() -> None:
    importers = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path.is_relative_to(ROOT / "tests" / "bench"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n == "bench" or n.startswith("bench.") for n in names):
                importers.append(str(path.relative_to(ROOT)))
    assert importers == []
