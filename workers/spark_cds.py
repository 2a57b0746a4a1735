"""Faster Spark start-up: a class-data-sharing (CDS) archive for the drivers' JVM.

A driver's JVM loads and verifies tens of thousands of classes from Spark's jars before its
first micro-batch completes; most of a cold start is that. The JDK can instead map them from
an archive dumped by an earlier JVM that ran the same code (`-XX:ArchiveClassesAtExit`, then
`-XX:SharedArchiveFile`). Measured on the 2-core machines Spindle is developed on: a session
starts in 4.6 s instead of 7.8 s and a first query completes 4.8 s sooner
(docs/benchmarks.md).

    python -m workers.spark_cds build     # make bootstrap runs it once per install
    python -m workers.spark_cds path      # the archive every session maps, if it exists

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
  its class path (`driver_class_path`): the archive then holds their classes (a cold first
  batch 0.1-0.15 s sooner, measured). Their classes are the same; only the jar signatures
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
import tempfile
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from pipeline_spec import model as S

_JVM_EXIT_TIMEOUT_S = 300.0  # dumping takes a few seconds after the session stops
# Signed jars of Spark's whose copies without signatures go first on drivers' class path.
_UNSIGNED = ("janino-", "commons-compiler-")
_SIGNATURE = re.compile(r"META-INF/[^/]+\.(SF|RSA|DSA|EC)$")


def _settings() -> tuple[bool, Path]:
    """`SPINDLE_SPARK_CDS` and `SPINDLE_SPARK_CDS_DIR` (backend.settings.Settings)."""
    from backend.settings import Settings

    s = Settings()
    return s.spark_cds, s.spark_cds_dir or Path(sys.prefix) / "share" / "spindle"


def _key() -> str:
    """What the archive depends on: the `java` that Spark will start (its resolved path, size
    and time) and Spark's jars (names, sizes, times)."""
    from .driver_jvm import java_binary

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
    from .driver_jvm import spark_home

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
            [sys.executable, "-m", "workers.spark_cds", "_workload", str(partial)],
            cwd=Path(__file__).resolve().parents[1],
            capture_output=True,
            text=True,
            timeout=_JVM_EXIT_TIMEOUT_S * 2,
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


def _workload(dump_to: Path) -> None:
    """In its own process: one session dumping its classes at exit to `dump_to`; the
    workload; then the JVM is told to exit and waited for, so the archive is complete when
    this returns."""
    from pyspark import SparkContext

    from .runner import Runner, spark_session

    spark = spark_session(
        "spindle-cds",
        java_options=f"-XX:ArchiveClassesAtExit={dump_to}",
        class_path=_class_path(_copies_in(_settings()[1])),
    )
    with tempfile.TemporaryDirectory(prefix="spindle-cds-") as tmp:
        work = Path(tmp)
        specs = [files_spec(work), nexmark_join_spec()]
        for i, spec in enumerate(specs):
            runner = Runner(spec, str(work / f"storage-{i}"), spark=spark, base_dir=str(work))
            try:
                runner.run(max_steps=2, stop_when_idle=5)
            finally:
                runner.close()
    gateway = SparkContext._gateway
    spark.stop()
    assert gateway is not None
    jvm = gateway.proc
    jvm.stdin.close()  # Spark's gateway exits when its standard input ends
    jvm.wait(timeout=_JVM_EXIT_TIMEOUT_S)


def nexmark_join_spec() -> S.PipelineSpec:
    """The archive's join workload: docs/examples/nexmark-q3.yaml without its sink."""
    from pipeline_spec.model import parse_spec

    return parse_spec(NEXMARK_JOIN)


# docs/examples/nexmark-q3.yaml without its sink (the worker image has no docs/).
NEXMARK_JOIN = {
    "name": "cds-nexmark",
    "source": {"kind": "datagen", "generator": "nexmark", "seed": 1, "rows_per_second": 10000},
    "state": [
        {
            "name": "auction_sellers",
            "kind": "join",
            "left": {
                "where": "event_type = 'auction'",
                "select": ["auction_id", "seller", "category"],
            },
            "right": {"where": "event_type = 'person'", "select": ["person_id", "name", "state"]},
            "left_on": ["seller"],
            "right_on": ["person_id"],
        }
    ],
}


def files_spec(work: Path, fmt: str = "json") -> S.PipelineSpec:
    """The archive's files workload: 2 files of 500 rows (customer, amount, ts) under
    `work` as JSON lines (`in/`), CSV with a header (`in-csv/`) or Parquet (`in-parquet/`),
    a transform, a group and a window aggregate, a files sink."""
    inp = work / ("in" if fmt == "json" else f"in-{fmt}")
    inp.mkdir()
    for f in range(2):
        rows = [
            {"customer": f"c{i % 50}", "amount": i, "ts": f"2024-01-01T00:0{f}:{i % 60:02d}Z"}
            for i in range(500)
        ]
        if fmt == "json":
            (inp / f"part-{f}.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        elif fmt == "csv":
            lines = ["customer,amount,ts"] + [
                f"{r['customer']},{r['amount']},{r['ts']}" for r in rows
            ]
            (inp / f"part-{f}.csv").write_text("\n".join(lines) + "\n")
        else:
            import pyarrow as pa
            import pyarrow.compute as pc
            import pyarrow.parquet as pq

            table = pa.table(
                {
                    "customer": [r["customer"] for r in rows],
                    "amount": pa.array([r["amount"] for r in rows], pa.int64()),
                    "ts": pc.assume_timezone(
                        pc.strptime([r["ts"] for r in rows], "%Y-%m-%dT%H:%M:%SZ", "us"), "UTC"
                    ),
                }
            )
            pq.write_table(table, inp / f"part-{f}.parquet")
    from pipeline_spec.model import parse_spec

    return parse_spec(
        {
            "name": "cds-workload",
            "source": {
                "kind": "files",
                "path": str(inp),
                "format": fmt,
                "schema": {"customer": "string", "amount": "bigint", "ts": "timestamp"},
                "max_files_per_step": 1,
            },
            "transform": {"where": "amount >= 0", "select": ["customer", "amount", "ts"]},
            "state": [
                {
                    "name": "per_customer",
                    "kind": "aggregate",
                    "group_by": ["customer"],
                    "aggregates": [
                        {"name": "n", "func": "count"},
                        {"name": "total", "func": "sum", "column": "amount"},
                        {"name": "top", "func": "max", "column": "amount"},
                    ],
                },
                {
                    "name": "per_minute",
                    "kind": "window_aggregate",
                    "time_column": "ts",
                    "size": 60,
                    "aggregates": [{"name": "n", "func": "count"}],
                },
            ],
            "sinks": [
                {"name": "out", "kind": "files", "from": "per_customer", "path": str(work / "out")}
            ],
            "checkpoint": {"every_steps": 1},
            "trigger": {"interval": "10ms"},
        }
    )


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


@app.command("_workload", hidden=True)
def workload_cmd(dump_to: Path) -> None:
    _workload(dump_to)


if __name__ == "__main__":
    app()
