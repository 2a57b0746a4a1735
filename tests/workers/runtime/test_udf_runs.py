"""Python UDFs in real runs (issue 52): the driver reads the module from its file under the
files root, runs it, and a view calling it equals the same view with the built-in function;
a UDF that raises fails the run with its traceback in the log and, as the last line (the
run's reason in the console and the CLI), the function and the row it failed on. Nothing
of that step is committed. A Python aggregate runs alike."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from workers.runtime.udfs import UDF_ERROR_HEADING

ROOT = Path(__file__).resolve().parents[3]

MODULE = """
import pyarrow as pa
import pyarrow.compute as pc


def shout(s):
    return pc.utf8_upper(s)


def picky(s):
    if pc.any(pc.equal(s, "user-3")).as_py():
        raise KeyError("user-3 is not in the directory")
    return s


class n_rows:
    def create(self):
        return 0

    def accumulate(self, acc, s):
        return acc + len(s)

    def retract(self, acc, s):
        return acc - len(s)

    def finish(self, acc):
        return acc
"""


def _spec(view: str, parallelism: int) -> dict[str, Any]:
    return {
        "name": "udf-run",
        "parallelism": parallelism,
        "source": {
            "kind": "datagen",
            "generator": "clicks",
            "seed": 3,
            "rows_per_second": 1e9,
            "max_rows_per_step": 2000,
            "users": 20,
        },
        "sql": view + "; CREATE VIEW builtin AS SELECT upper(user) AS u, count(*) AS n "
        "FROM input GROUP BY upper(user)",
        "udfs": {
            "path": "fns/shouting.py",
            "functions": [
                {"name": "shout", "args": ["string"], "returns": "string"},
                {"name": "picky", "args": ["string"], "returns": "string"},
                {"name": "n_rows", "kind": "aggregate", "args": ["string"], "returns": "bigint"},
            ],
        },
        "sinks": [
            {"name": n, "kind": "files", "from": n, "path": f"out/{n}", "format": "jsonl"}
            for n in ("v", "builtin")
        ],
        "trigger": {"interval": "50ms"},
        "checkpoint": {"every_steps": 1},
    }


def _run(tmp_path: Path, view: str, parallelism: int = 1) -> tuple[int, str]:
    (tmp_path / "fns").mkdir(exist_ok=True)
    (tmp_path / "fns" / "shouting.py").write_text(MODULE)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(_spec(view, parallelism)))
    cmd = [sys.executable, "-m", "workers.runtime.driver", "run", str(spec), "--storage",
           str(tmp_path / "state"), "--max-steps", "3", "--files-root", str(tmp_path)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stderr


def _integral(out: Path) -> Counter[tuple[Any, ...]]:
    rows: Counter[tuple[Any, ...]] = Counter()
    for f in sorted(out.glob("*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            w = r.pop("__weight")
            r.pop("__step")
            rows[tuple(sorted(r.items()))] += w
    return +rows


@pytest.mark.timeout(600)
@pytest.mark.parametrize("parallelism", [1, 2])
def test_a_view_calling_a_udf_from_a_file_equals_the_builtin(
    tmp_path: Path, parallelism: int
) -> None:
    """At parallelism 2 the executors run the module the driver read (a scalar function
    and an aggregate, on the shards)."""
    code, err = _run(
        tmp_path,
        "CREATE VIEW v AS SELECT shout(user) AS u, n_rows(user) AS n FROM input "
        "GROUP BY shout(user)",
        parallelism,
    )
    assert code == 0, err[-3000:]
    got, want = _integral(tmp_path / "out" / "v"), _integral(tmp_path / "out" / "builtin")
    assert got and got == want


@pytest.mark.timeout(600)
@pytest.mark.parametrize("parallelism", [1, 2])
def test_a_raising_udf_fails_the_run_naming_the_function_and_row(
    tmp_path: Path, parallelism: int
) -> None:
    """At parallelism 2 the error comes from a Spark task."""
    code, err = _run(tmp_path, "CREATE VIEW v AS SELECT picky(user) AS u FROM input", parallelism)
    assert code == 1, err[-3000:]
    # The driver's reason line (the JVM may still log after it: the control plane finds
    # it by its heading, `lifecycle._heading_line`).
    last = [line for line in err.splitlines() if line.startswith(UDF_ERROR_HEADING)][-1]
    assert last == (
        f"{UDF_ERROR_HEADING} udf picky failed on row ('user-3'): "
        "KeyError: 'user-3 is not in the directory'"
    )
    assert 'raise KeyError("user-3 is not in the directory")' in err  # the traceback
    assert not list((tmp_path / "out" / "v").glob("*.jsonl"))  # the step wrote nothing
