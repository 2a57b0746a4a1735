"""Faster Spark start-up: a class-data-sharing (CDS) archive for the drivers' JVM.

A driver's JVM loads and verifies tens of thousands of classes from Spark's jars before its
first micro-batch completes; most of a cold start is that. The JDK can instead map them from
an archive dumped by an earlier JVM that ran the same code (`-XX:ArchiveClassesAtExit`, then
`-XX:SharedArchiveFile`): a session starts and its first query completes seconds sooner
(docs/benchmarks.md, "Machinery that must pay its way").

    python -m workers.runtime.spark_cds build     # make bootstrap runs it once per install
    python -m workers.runtime.spark_cds path      # the archive every session maps, if it exists

Contract:
- Light to import (no pyspark, no spec models): a driver computes its JVM options from here
  before its heavy imports (`driver_jvm`).
- The archive lives in `SPINDLE_SPARK_CDS_DIR` (default: `share/spindle` of the running
  Python's prefix, i.e. inside `.venv/`), named by a key of the JDK and of Spark's jars. A
  changed JDK or Spark gets a new name, so it is never mapped stale: sessions start without
  one until `build` runs again. `SPINDLE_SPARK_CDS=false` turns its use off.
- The JVM checks the archive itself (JDK build, class path with each jar's size and time) and
  silently starts without it when anything differs: a missing, foreign or damaged archive
  costs start-up time, never correctness.
- The JVM never archives classes of signed jars. Janino and commons-compiler (Spark's code
  generation compiler, ~330 classes loaded, and their signatures checked, at every first
  query) are signed, so `build` also writes copies of them without their signature files
  beside the archive, and every driver (the workload included) puts those copies first on
  its class path (`driver_class_path`): the archive then holds their classes, and a cold
  first batch is sooner. Their classes are the same; only the jar signatures
  (which Spark does not check) are gone.
- `build` dumps the classes of a real workload: a files-source pipeline (JSON lines, a
  transform, a group and a window aggregate, a files sink) and the Nexmark join of
  docs/examples/nexmark-q3.yaml, two steps each, in one session. The archive is written
  beside its final name and renamed into place once the JVM exited cleanly, so a reader sees
  a whole archive or none.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    pass

JVM_EXIT_TIMEOUT_S = 300.0  # dumping takes a few seconds after the session stops
# Signed jars of Spark's whose copies without signatures go first on drivers' class path.
_UNSIGNED = ("janino-", "commons-compiler-")
_SIGNATURE = re.compile(r"META-INF/[^/]+\.(SF|RSA|DSA|EC)$")


def _settings() -> tuple[bool, Path]:
    """`SPINDLE_SPARK_CDS` and `SPINDLE_SPARK_CDS_DIR`, read as `backend.settings.Settings`
    reads them (which documents them): the runtime does not import the control plane."""
    from pydantic import TypeAdapter

    enabled = TypeAdapter(bool).validate_python(os.environ.get("SPINDLE_SPARK_CDS", "true"))
    directory = os.environ.get("SPINDLE_SPARK_CDS_DIR")
    return enabled, Path(directory) if directory else Path(sys.prefix) / "share" / "spindle"


def _key() -> str:
    """What the archive depends on: the `java` that Spark will start (its resolved path, size
    and time) and Spark's jars (names, sizes, times)."""
    from .spark_install import java_binary

    java = java_binary(os.environ)
    parts: list[object] = [importlib.metadata.version("pyspark")]
    if java is not None:
        real = os.path.realpath(java)
        st = os.stat(real)
        parts.append((real, st.st_size, st.st_mtime_ns))
    parts.append("unsigned-copies-1")  # archives built before the copies differ
    for entry in sorted(os.scandir(_spark_jars()), key=lambda e: e.name):
        st = entry.stat()
        parts.append((entry.name, st.st_size, st.st_mtime_ns))
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def _spark_jars() -> Path:
    from .spark_install import spark_home

    return spark_home() / "jars"


def archive_path() -> Path:
    return _archive_in(_settings()[1])


def directory() -> Path:
    """Where the archive and the drivers' other start-up data (`driver_jvm`) are kept."""
    return _settings()[1]


def _archive_in(directory: Path) -> Path:
    return directory / f"spark-{_key()}.jsa"


def _copies_in(directory: Path) -> Path:
    return directory / f"jars-{_key()}"


def driver_class_path() -> str:
    """The unsigned copies that go first on a driver's class path, or "" (not built, or
    turned off)."""
    enabled, directory = _settings()
    return _class_path(_copies_in(directory)) if enabled else ""


def _class_path(copies: Path) -> str:
    return os.pathsep.join(str(p) for p in sorted(copies.glob("*.jar"))) if copies.is_dir() else ""


def _write_unsigned_copies(dest: Path) -> None:
    """Copies of the `_UNSIGNED` jars without their signature files, in `dest` (made whole
    in a scratch directory first, then renamed into place)."""
    if dest.is_dir():
        return
    scratch = dest.with_name(dest.name + f".{os.getpid()}.mut")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    for jar in sorted(_spark_jars().glob("*.jar")):
        if not jar.name.startswith(_UNSIGNED):
            continue
        with zipfile.ZipFile(jar) as src, zipfile.ZipFile(scratch / jar.name, "w") as out:
            for info in src.infolist():
                if not _SIGNATURE.match(info.filename):
                    out.writestr(info, src.read(info.filename))
    os.replace(scratch, dest)


def java_options() -> str:
    """The JVM option that maps the archive, or "" (none built, or turned off)."""
    enabled, directory = _settings()
    if not enabled:
        return ""
    path = _archive_in(directory)
    return f"-XX:SharedArchiveFile={path}" if path.is_file() else ""


def workload_class_path() -> str:
    """The class path the archive's workload runs with: the unsigned copies' (`warm_up`)."""
    return _class_path(_copies_in(_settings()[1]))


# -- building ------------------------------------------------------------------------------


def build(force: bool = False) -> Path:
    """Dump the archive (see the module docstring); returns its path. Raises RuntimeError
    with the workload's output when the JVM did not produce one."""
    path = archive_path()
    if path.is_file() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    copies = _copies_in(path.parent)
    partial = path.with_name(path.name + f".{os.getpid()}.mut")
    partial.unlink(missing_ok=True)
    try:
        _write_unsigned_copies(copies)
        proc = subprocess.run(
            [sys.executable, "-m", "workers.runtime.warm_up", str(partial)],
            cwd=Path(__file__).resolve().parents[1],
            capture_output=True,
            text=True,
            timeout=JVM_EXIT_TIMEOUT_S * 2,
            env={**os.environ, "SPINDLE_SPARK_CDS": "false"},
        )
        if proc.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
            raise RuntimeError(
                f"the JVM wrote no class-data archive (exit {proc.returncode}):\n{tail}"
            )
        os.replace(partial, path)
    except BaseException:
        shutil.rmtree(copies, ignore_errors=True)  # of no use without the archive
        raise
    finally:
        partial.unlink(missing_ok=True)
    for old in path.parent.glob("spark-*.jsa"):
        if old != path:  # archives of an earlier JDK or Spark install
            old.unlink(missing_ok=True)
    for old in path.parent.glob("jars-*"):
        if old != copies:
            shutil.rmtree(old, ignore_errors=True)
    for old in path.parent.glob("launch-*.json"):  # `driver_jvm`'s, for the options before
        old.unlink(missing_ok=True)
    return path


# -- command line --------------------------------------------------------------------------

app = typer.Typer(help="The class-data-sharing archive of the drivers' JVM.", no_args_is_help=True)


@app.command("build")
def build_cmd(
    force: Annotated[bool, typer.Option(help="Rebuild even if it exists.")] = False,
) -> None:
    """Build the archive for this JDK and Spark install (about a minute)."""
    t0 = time.monotonic()
    path = build(force=force)
    typer.echo(f"{path} ({path.stat().st_size / 2**20:.0f} MiB, {time.monotonic() - t0:.0f} s)")


@app.command("path")
def path_cmd() -> None:
    """Print the archive's path; exit 1 if it has not been built."""
    path = archive_path()
    typer.echo(str(path))
    if not path.is_file():
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
