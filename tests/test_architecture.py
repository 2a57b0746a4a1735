"""The packages' dependency rules, on the import graph of the source (grimp): every import
statement counts, those inside functions and under TYPE_CHECKING too.

- `pipeline_spec` and `local_servers` import nothing else of Spindle's; `storage_engine`
  imports no package above it; `oracles` (the tests' and benchmarks' references) reaches no
  runtime package, and nothing of the product imports it; `sql` (SQL to dataflow) imports
  only the engine and the spec, and of the engine not the storage location, checkpoints or
  commits (the runtime binds the dataflow to those); the control plane (`backend`) does
  not import Spark.
- The packages form a one-way graph (`LAYERS`): `pipeline_spec` <- `storage_engine` <- `sql`
  <- the Spark runtime (`workers.runtime`) <- the Celery jobs (`workers.jobs`), and `backend`
  <- the jobs. No cycle between them, counting every module's imports but the composition
  root's (`backend.__main__`, the embedded `serve`: the one module that imports both the
  control plane and the workers).
- The runtime imports neither `backend` nor the jobs (it is given its control plane:
  `workers.jobs.driver` gives it the database's); `backend` reaches `workers` only from its
  composition root.
- The wheel installs only the product's packages (pyproject.toml's `packages.find`), and
  what it installs imports none of the repository's other packages (`bench`, `oracles`,
  `local_servers`, the tests): an installed Spindle would fail on such an import.
- Tests import the benchmarks only to test them (`tests/bench/`).
- No import cycle between modules.
- No module over 600 lines unless its docstring says why (a paragraph starting
  "Why one long module:").
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable, Iterator
from fnmatch import fnmatch
from pathlib import Path

import grimp
import pytest

PACKAGES = (
    "pipeline_spec",
    "storage_engine",
    "spindle_sql",
    "backend",
    "workers",
    "spindle_cli",
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
        ("pipeline_spec", "spindle_cli"),
        ("pipeline_spec", "pyspark"),
        ("storage_engine", "backend"),
        ("storage_engine", "workers"),
        ("storage_engine", "spindle_cli"),
        ("storage_engine", "pyspark"),
        ("storage_engine", "spindle_sql"),
        ("pipeline_spec", "spindle_sql"),
        *(("spindle_sql", p) for p in ("backend", "workers", "spindle_cli", "pyspark")),
        ("backend", "pyspark"),
        ("backend", "workers.runtime.runner"),
        ("spindle_cli", "pyspark"),
        ("spindle_cli", "workers"),
        *(
            ("local_servers", p)
            for p in ("pipeline_spec", "storage_engine", "spindle_sql", "backend", "workers")
        ),
        *(("oracles", p) for p in ("backend", "workers", "spindle_cli", "pyspark")),
        *(
            (p, "oracles")
            for p in ("pipeline_spec", "storage_engine", "spindle_sql", "backend", "workers")
        ),
    ],
)
def test_a_package_does_not_reach(graph: grimp.ImportGraph, importer: str, imported: str) -> None:
    chains = graph.find_shortest_chains(importer=importer, imported=imported, as_packages=True)
    assert not chains, f"{importer} imports {imported}: {sorted(chains)[0]}"


# The repository's packages that are tools for its tests and benchmarks, not the product.
DEV_TOOLS = frozenset({"bench", "oracles", "local_servers"})


def _top_level_packages() -> set[str]:
    return {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}


def _installed_packages() -> set[str]:
    """The top-level packages the wheel installs: those pyproject.toml's include list names."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    return {p for p in _top_level_packages() if any(fnmatch(p, pattern) for pattern in include)}


def test_the_wheel_leaves_the_dev_tools_out() -> None:
    installed = _installed_packages()
    assert installed & DEV_TOOLS == set()
    assert {"backend", "workers", "spindle_cli"} <= installed <= set(PACKAGES)


def test_installed_code_imports_only_installed_packages(graph: grimp.ImportGraph) -> None:
    installed = _installed_packages()
    left_out = _top_level_packages() - installed
    imports = sorted(
        f"{importer} imports {imported}"
        for importer in graph.modules
        if importer.split(".")[0] in installed
        for imported in graph.find_modules_directly_imported_by(importer)
        if imported.split(".")[0] in left_out
    )
    assert imports == []


# What keeps state where, and checkpoints it: the runtime's (workers/runtime/dataflow_run.py),
# not the compiler's. The engine's operators reach them (they take a location to open on), so the
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
    ours = sorted(m for m in importers if m == "spindle_sql" or m.startswith("spindle_sql."))
    assert ours == [], f"{ours} import {imported}"


# The packages whose graph is one-way, and the one module exempt: it imports both sides.
LAYERS = (
    "pipeline_spec",
    "storage_engine",
    "spindle_sql",
    "workers.runtime",
    "workers.jobs",
    "backend",
)
RUNTIME = "workers.runtime"
JOBS = "workers.jobs"
COMPOSITION_ROOT = "backend.__main__"


def _layer(module: str) -> str | None:
    """The package of LAYERS `module` belongs to, if any (`workers` itself: none)."""
    return next((p for p in LAYERS if module == p or module.startswith(p + ".")), None)


def _package_graph(graph: grimp.ImportGraph) -> grimp.ImportGraph:
    """`graph` squashed into LAYERS: an import between two of them for every module import
    between their modules, the composition root's left out."""
    out = grimp.ImportGraph()
    for importer in graph.modules:
        a = _layer(importer)
        if a is None or importer == COMPOSITION_ROOT:
            continue
        for imported in graph.find_modules_directly_imported_by(importer):
            b = _layer(imported)
            if b is not None and b != a:
                out.add_import(importer=a, imported=b)
    return out


def test_the_packages_form_a_one_way_graph(graph: grimp.ImportGraph) -> None:
    assert list(_cycles(_package_graph(graph))) == []


def test_the_package_cycle_finder_finds_a_cycle_no_module_is_on() -> None:
    """sql imports the engine and one engine module imports sql: no module cycle, a package
    one; the composition root importing both sides is none."""
    g = grimp.ImportGraph()
    for a, b in (
        ("spindle_sql.planner", "storage_engine.ops"),
        ("storage_engine.location", "spindle_sql.functions"),
        ("workers.jobs.tasks", "backend.db"),
        ("backend.__main__", "workers.jobs.celery_app"),
    ):
        g.add_import(importer=a, imported=b)
    assert list(_cycles(g)) == []
    assert list(_cycles(_package_graph(g))) == [frozenset({"spindle_sql", "storage_engine"})]


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
        hits = sorted(m for m in via if m == package or m.startswith(package + "."))
        out += [_chain(via, m) for m in hits[:1]]
    return out


def _runtime_crossings(graph: grimp.ImportGraph) -> list[list[str]]:
    """The import chains from the runtime's modules into `backend` or the jobs."""
    mods = {m for m in graph.modules if _layer(m) == RUNTIME}
    return [
        chain
        for package in ("backend", JOBS)
        for chain in _crossings(graph, mods, package, frozenset())
    ]


def test_the_runtime_imports_neither_backend_nor_the_jobs(graph: grimp.ImportGraph) -> None:
    assert _runtime_crossings(graph) == []


def test_backend_reaches_workers_only_from_its_composition_root(
    graph: grimp.ImportGraph,
) -> None:
    mods = {m for m in graph.modules if m.split(".")[0] == "backend"} - {COMPOSITION_ROOT}
    assert _crossings(graph, mods, "workers", frozenset({COMPOSITION_ROOT})) == []


def test_the_crossing_finder_finds_a_runtime_import_of_backend_or_the_jobs() -> None:
    g = grimp.ImportGraph()
    for a, b in (
        ("workers.runtime.driver", "workers.runtime.control"),
        ("workers.runtime.control", "workers.runtime.control_plane"),
        ("workers.runtime.runner", "workers.runtime.helpers"),
        ("workers.runtime.helpers", "backend.settings"),
        ("workers.runtime.spare", "workers.jobs.control_db"),
        ("workers.jobs.control_db", "workers.runtime.control_plane"),
        ("workers.jobs.control_db", "backend.db"),
    ):
        g.add_import(importer=a, imported=b)
    assert _runtime_crossings(g) == [
        ["workers.runtime.helpers", "backend.settings"],
        ["workers.runtime.runner", "workers.runtime.helpers", "backend.settings"],
        ["workers.runtime.spare", "workers.jobs.control_db", "backend.db"],
        ["workers.runtime.spare", "workers.jobs.control_db"],
    ]


def test_the_crossing_finder_finds_a_backend_import_of_workers() -> None:
    g = grimp.ImportGraph()
    for a, b in (
        ("backend.__main__", "workers.jobs.celery_app"),
        ("backend.api.app", "backend.services.queue"),
        ("backend.services.queue", "workers.jobs.tasks"),
    ):
        g.add_import(importer=a, imported=b)
    mods = {m for m in g.modules if m.split(".")[0] == "backend"} - {COMPOSITION_ROOT}
    assert _crossings(g, mods, "workers", frozenset({COMPOSITION_ROOT})) == [
        ["backend.api.app", "backend.services.queue", "workers.jobs.tasks"],
        ["backend.services.queue", "workers.jobs.tasks"],
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
