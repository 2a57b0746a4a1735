"""A wheel of this repository, installed (not editable) into a fresh virtual environment, is a
working Spindle (issue 49 item 6): `spindle --version`, `python -m backend serve` migrating a
new database and serving the API and the console, from a directory outside the checkout,
with none of the checkout on sys.path. It installs only the product's packages: none of the
repository's tools (`bench`, `oracles`, `local_servers`) nor the old names (`sql`, `cli`).

Offline and in seconds: the wheel is built from a copy of the sources (a build in the
checkout would leave build/ and spindle.egg-info/ there) by this environment's setuptools
(`--no-build-isolation`: nothing downloaded; pyproject.toml's dev extra brings one that
needs no `wheel` package), and installed without its dependencies. The fresh environment
then sees this one's site-packages through a .pth file, written after the install (pip
would otherwise find this environment's editable Spindle already installed). Python reads
.pth files in site directories only, not in the paths they add, so this environment's
editable install (a .pth naming the checkout) stays out: the test checks that it does.
Without a console build in the checkout, a stand-in index.html takes its place, so the
packaging is tested either way."""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from backend.api import ui
from tests.backend.live_platform import free_port
from tests.polling import wait_until

from .checks import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
VERSION = PYPROJECT["project"]["version"]
INSTALLED = {"backend", "workers", "storage_engine", "pipeline_spec", "spindle_sql", "spindle_cli"}
NOT_INSTALLED = ("bench", "oracles", "local_servers", "sql", "cli")
# The first setuptools that builds wheels by itself (older ones need the `wheel` package).
SETUPTOOLS_MIN = (70, 1)
CONSOLE = Path("backend") / "api" / "console"
# This environment's pip; every call below says --no-index: nothing is downloaded.
PIP = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
RUN_TIMEOUT_S = 180


@dataclass
class Installed:
    python: Path
    bin: Path
    env: dict[str, str]  # a clean environment: no PYTHONPATH, no SPINDLE_*, a new HOME
    cwd: Path  # outside the checkout
    wheel_files: set[str]
    console_index: bytes  # the index.html the wheel was built with

    def run(self, *args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(
            [str(a) for a in args],
            cwd=self.cwd,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        assert p.returncode == 0, f"{args} exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
        return p


def _sources(dest: Path) -> None:
    """What a fresh checkout has (tracked and new files, not ignored ones) of the files the
    build reads, every top-level package included: the include list must leave some out."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()} - {"tests", "e2e"}
    top_files = ("pyproject.toml", "README.md", "LICENSE")
    for name in listed.split("\0"):
        top = name.split("/")[0]
        if (top in packages or name in top_files) and (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    console = dest / CONSOLE
    if (ui.DIST / "index.html").is_file():  # `make ui` ran (make test does)
        shutil.copytree(ui.DIST, console)
    else:
        (console / "assets").mkdir(parents=True)
        (console / "index.html").write_text("<!doctype html><title>stand-in console</title>\n")
        (console / "assets" / "app.js").write_text("console.log('stand-in')\n")


def _build_wheel(src: Path, out: Path) -> Path:
    have = importlib.metadata.version("setuptools")
    if tuple(int(n) for n in re.findall(r"\d+", have)[:2]) < SETUPTOOLS_MIN:
        pytest.fail(
            f"setuptools {have} cannot build a wheel offline (it needs the `wheel` package): "
            "pyproject.toml's dev extra asks for a newer one; run `make bootstrap`"
        )
    build = [*PIP, "wheel", "--no-index", "--no-deps", "--no-build-isolation"]
    p = subprocess.run(
        [*build, str(src), "--wheel-dir", str(out)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert p.returncode == 0, f"pip wheel failed:\n{p.stdout}\n{p.stderr}"
    (wheel,) = out.glob("spindle-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    tmp = tmp_path_factory.mktemp("wheel")
    src, out, venv, home, cwd = (tmp / n for n in ("src", "out", "venv", "home", "elsewhere"))
    for d in (src, home, cwd):
        d.mkdir()
    _sources(src)
    wheel = _build_wheel(src, out)
    clean = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        check=True,
        env=clean,
        timeout=RUN_TIMEOUT_S,
    )
    python = venv / "bin" / "python"
    # This environment's pip installs into the fresh one (which has none of its own).
    p = subprocess.run(
        [*PIP, "--python", str(python), "install", "--no-index", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        env=clean,
        timeout=RUN_TIMEOUT_S,
    )
    assert p.returncode == 0, f"pip install failed:\n{p.stdout}\n{p.stderr}"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        env=clean,
    ).stdout.strip()
    deps = sysconfig.get_paths()["purelib"]  # this environment's: Spindle's dependencies
    (Path(purelib) / "spindle_test_dependencies.pth").write_text(deps + "\n")
    with zipfile.ZipFile(wheel) as z:
        files = set(z.namelist())
    return Installed(
        python, venv / "bin", clean, cwd, files, (src / CONSOLE / "index.html").read_bytes()
    )


def test_the_wheel_holds_the_product_its_migrations_and_console(installed: Installed) -> None:
    top = {name.split("/")[0] for name in installed.wheel_files}
    assert top == INSTALLED | {f"spindle-{VERSION}.dist-info"}
    revisions = sorted(p.name for p in (ROOT / "backend/migrations/versions").glob("*.py"))
    assert revisions
    for name in (
        "backend/migrations/env.py",
        "backend/migrations/script.py.mako",
        *(f"backend/migrations/versions/{r}" for r in revisions),
        f"{CONSOLE.as_posix()}/index.html",
        f"spindle-{VERSION}.dist-info/licenses/LICENSE",  # Apache-2.0
    ):
        assert name in installed.wheel_files, name


def test_spindle_version(installed: Installed) -> None:
    r = installed.run(installed.bin / "spindle", "--version")
    assert r.stdout == f"spindle {VERSION}\n"


def test_backend_serve_help(installed: Installed) -> None:
    r = installed.run(installed.python, "-m", "backend", "serve", "--help")
    assert "--data-dir" in r.stdout


PROBE = """
import importlib.util, json, sys, sysconfig
import workers.jobs.celery_app  # what serve's worker loads
from backend import migrate
from backend.api import ui

def where(name):
    spec = importlib.util.find_spec(name)
    if spec is None:
        return None
    return (spec.submodule_search_locations or [spec.origin])[0]

print(json.dumps({
    "purelib": sysconfig.get_paths()["purelib"],
    "sys_path": sys.path,
    "where": {n: where(n) for n in sys.argv[1:]},
    "migrations": str(migrate.MIGRATIONS),
    "head": migrate.head(),
    "console": str(ui.DIST),
}))
"""


def test_the_installed_packages_are_the_wheels_alone(installed: Installed) -> None:
    """Imports resolve in the fresh environment, never in the checkout, whose root is not on
    sys.path; the tools and the old names are not importable."""
    r = installed.run(installed.python, "-c", PROBE, *sorted(INSTALLED), *NOT_INSTALLED)
    got = json.loads(r.stdout)
    purelib = Path(got["purelib"])
    root = ROOT.resolve()
    # The dependencies' site-packages may lie inside the checkout (its .venv/): allowed.
    deps = Path(sysconfig.get_paths()["purelib"]).resolve()
    on_path = [Path(p).resolve() for p in got["sys_path"] if p]
    inside = [p for p in on_path if p != deps and (p == root or root in p.parents)]
    assert not inside, got["sys_path"]
    for name in INSTALLED:
        assert Path(got["where"][name]).parent == purelib, (name, got["where"][name])
    assert {n: got["where"][n] for n in NOT_INSTALLED} == dict.fromkeys(NOT_INSTALLED)
    migrations = Path(got["migrations"])
    assert purelib in migrations.parents and (migrations / "env.py").is_file()
    assert got["head"] is not None
    console = Path(got["console"])
    assert purelib in console.parents
    assert (console / "index.html").read_bytes() == installed.console_index


@pytest.fixture
def served(installed: Installed, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """`python -m backend serve` of the fresh environment on a new data directory: the API
    alone, to keep this short (the probe above imports what the worker loads)."""
    data, port = tmp_path / "data", free_port()
    log = tmp_path / "serve.log"
    serve = [str(installed.python), "-m", "backend", "serve", "--no-worker"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*serve, "--port", str(port), "--data-dir", str(data)],
            cwd=installed.cwd,
            env=installed.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited {proc.returncode}:\n{log.read_text()}")
        try:
            return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, 90, "the installed serve to answer /healthz")
        yield url, data
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log.read_text()


def test_the_installed_serve_migrates_and_serves(
    installed: Installed, served: tuple[str, Path]
) -> None:
    url, data = served
    console = httpx.get(f"{url}/ui/", timeout=10)
    assert console.status_code == 200 and console.content == installed.console_index
    token = (data / "admin-token").read_text().strip()
    auth = {"Authorization": f"Bearer {token}"}
    pipelines = httpx.get(f"{url}/api/v1/pipelines", headers=auth, timeout=10)
    assert pipelines.status_code == 200 and pipelines.json() == []  # the tables exist
    version = httpx.get(f"{url}/api/v1/version", headers=auth, timeout=10)
    assert version.status_code == 200 and version.json() == {"version": VERSION}
    current = "from backend import migrate; from backend.settings import Settings; "
    current += "print(migrate.current(Settings().db_url), migrate.head())"
    r = installed.run(installed.python, "-c", current, SPINDLE_DATA_DIR=str(data))
    at, head = r.stdout.split()
    assert at == head
