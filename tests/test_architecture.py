"""The packages' dependency rules, on the import graph of the source (grimp): every import
statement counts, those inside functions and under TYPE_CHECKING too.

- `pipeline_spec` and `local_servers` import nothing else of Spindle's; `storage_engine`
  imports no package above it; `oracles` (the tests' and benchmarks' references) reaches no
  runtime package, and nothing of the product imports it; `sql` (SQL to dataflow) imports
  only the engine and the spec, and of the engine not the storage location, checkpoints or
  commits (the runtime binds the dataflow to those); the control plane (`backend`) does
  not import Spark.
- Tests import the benchmarks only to test them (`tests/bench/`).
- No import cycle between modules.
- No module over 600 lines unless its docstring says why (a paragraph starting
  "Why one long module:").
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
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
