"""What every benchmark report carries: machine, versions, revision; figures cleaned for JSON."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from workers.runtime import cpu_dispatch

Log = Callable[[str], None]


def log_to_stderr(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def quiet(msg: str) -> None:
    pass


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def package_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def machine_info() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_bytes": _mem_total(),
        "platform": platform.platform(),
        "load_average_at_start": list(os.getloadavg()),
        "numpy_simd": _numpy_simd(),
    }


def _numpy_simd() -> dict[str, Any]:
    """The SIMD kernels NumPy dispatches to, and the features turned off for it
    (workers/runtime/cpu_dispatch.py turns AVX-512 off on AMD Zen 4)."""
    found = np.__config__.CONFIG.get("SIMD Extensions", {}).get("found", [])
    return {"found": list(found), "disabled": os.environ.get(cpu_dispatch.VARIABLE)}


def engine_revision() -> dict[str, Any]:
    """The git commit the engine was measured at, and whether its files had local edits."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", repo, *args], capture_output=True, text=True, timeout=10, check=True
        )
        return done.stdout.strip()

    try:
        return {
            "commit": git("rev-parse", "--short", "HEAD"),
            "engine_modified": bool(git("status", "--porcelain", "--", "storage_engine")),
        }
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "engine_modified": None}


def versions(**extra: str) -> dict[str, str]:
    """Versions of Python, pyarrow, NumPy and Spindle, plus the peers' (`extra`)."""
    return {
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "numpy": np.__version__,
        "spindle": package_version("spindle"),
        **extra,
    }


def clean(x: Any) -> Any:
    """Round floats for the report; reject NaN/inf (a bug in the benchmark, not a result)."""
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [clean(v) for v in x]
    if isinstance(x, float | np.floating):
        f = float(x)
        if not math.isfinite(f):
            raise ValueError(f"non-finite figure {f}")
        return round(f, 4) if abs(f) < 100 else round(f, 1)
    if isinstance(x, np.integer):
        return int(x)
    return x


Run = Callable[[str, str | None, Log], dict[str, Any]]


def run_cli(
    prog: str,
    doc: str,
    run: Run,
    summary: Callable[[dict[str, Any]], str],
    argv: Sequence[str] | None = None,
    quick_help: str = "fewer rows and runs",
) -> int:
    """A benchmark's command line: `--json` (only the report on stdout, else the progress
    on stderr and `summary(report)`), `--quick`, `--dir`; `run(mode, dir, log)` makes the
    report (mode `full`, `quick`, or the tests' hidden `smoke`)."""
    p = argparse.ArgumentParser(prog=prog, description=doc.split("\n")[0])
    p.add_argument("--json", action="store_true", help="print only the JSON report to stdout")
    p.add_argument("--quick", action="store_true", help=quick_help)
    p.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dir", default=None, help="where to put temporary files (default: tmp)")
    args = p.parse_args(argv)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    report = run(mode, args.dir, quiet if args.json else log_to_stderr)
    print(json.dumps(report, indent=2) if args.json else summary(report))
    return 0
