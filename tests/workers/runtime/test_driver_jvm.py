"""A driver's JVM started early (`workers.runtime.driver_jvm`): the session connects to it, and to a
JVM of its own when the early one cannot serve it. Each case runs in a fresh process (a
process has one Spark gateway)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

_PROBE = """
import json, os, sys
from workers.runtime import driver_jvm
driver_jvm.launch(*driver_jvm.driver_options(None, None))
early = driver_jvm._launched.proc if driver_jvm._launched else None
from workers.runtime.session import spark_session
spark = spark_session("probe", **json.loads(sys.argv[1]))
gateway = spark.sparkContext._gateway
# PySpark's workers hash strings only with PYTHONHASHSEED set, as spark-submit sets it.
pairs = spark.sparkContext.parallelize(["a", "b", "a"], 2).map(lambda w: (w, 1))
print(json.dumps({
    "own_launch": gateway.proc is not None,  # PySpark launched (and owns) the JVM
    "early_alive": early is not None and early.poll() is None,
    "env_left": "PYSPARK_GATEWAY_PORT" in os.environ,
    "rows": spark.range(3).count(),
    "secrets": {
        "python": os.environ.get("SPINDLE_S3_SECRET_KEY"),
        "jvm": spark._jvm.java.lang.System.getenv("SPINDLE_S3_SECRET_KEY"),
        "jvm_password": spark._jvm.java.lang.System.getenv("PGPASSWORD"),
        "worker": spark.sparkContext.parallelize([0], 1)
        .map(lambda _: os.environ.get("SPINDLE_S3_SECRET_KEY")).collect()[0],
    },
    "counts": sorted(pairs.reduceByKey(lambda a, b: a + b).collect()),
    "collectors": sorted(
        b.getName() for b in spark._jvm.java.lang.management.ManagementFactory
        .getGarbageCollectorMXBeans()
    ),
}))
print(json.dumps({"early_program": os.path.basename(early.args[0]) if early else None}))
spark.stop()
"""
COUNTS = [["a", 2], ["b", 1]]
PARALLEL = ["PS MarkSweep", "PS Scavenge"]


def _run_probe(
    env: dict[str, str] | None = None, session: dict[str, object] | None = None
) -> list[dict[str, object]]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(session or {})],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return [json.loads(line) for line in out.stdout.strip().splitlines()[-2:]]


def _probe(**session: object) -> dict[str, object]:
    return _run_probe(session=session)[0]


def test_the_session_connects_to_the_jvm_started_early() -> None:
    env = {"SPINDLE_S3_SECRET_KEY": "s3cret", "PGPASSWORD": "pw"}
    assert _run_probe(env)[0] == {
        "own_launch": False,
        "early_alive": True,
        "env_left": False,
        "rows": 3,
        "counts": COUNTS,
        "collectors": PARALLEL,  # driver_jvm._COLLECTOR
        # The JVM, where a spec's expressions run, and its Python workers hold no secret.
        "secrets": {"python": "s3cret", "jvm": None, "jvm_password": None, "worker": None},
    }


@pytest.mark.full
def test_a_session_with_other_options_starts_its_own_jvm() -> None:
    # Options that pick a collector keep it (two would stop the JVM from starting).
    got = _probe(java_options="-XX:+UseSerialGC")
    assert got == {
        "own_launch": True,
        "early_alive": False,
        "env_left": False,
        "rows": 3,
        "counts": COUNTS,
        "collectors": ["Copy", "MarkSweepCompact"],
        "secrets": {"python": None, "jvm": None, "jvm_password": None, "worker": None},
    }


def test_the_jvm_starts_from_the_launchers_kept_answer(tmp_path: Path) -> None:
    """The first launch asks Spark's launcher for the `java` command and keeps it; the next
    one runs what is kept (a wrong command kept costs a JVM of PySpark's own, nothing
    else)."""
    env = {"SPINDLE_SPARK_CDS_DIR": str(tmp_path)}
    first, started = _run_probe(env)
    assert first["own_launch"] is False and first["counts"] == COUNTS
    assert started == {"early_program": "java"}
    (kept,) = tmp_path.glob("launch-*.json")
    assert json.loads(kept.read_text())[0].endswith("java")
    marker = tmp_path / "ran"
    kept.write_text(json.dumps([sys.executable, "-c", f"open({str(marker)!r}, 'w')"]))
    second, _ = _run_probe(env)
    assert marker.exists()  # the kept command is what started
    assert second["own_launch"] is True and second["rows"] == 3


@pytest.mark.full
def test_a_spark_env_script_means_spark_submit(tmp_path: Path) -> None:
    """Only the shell can apply conf/spark-env.sh: then the JVM starts through spark-submit."""
    (tmp_path / "spark-env.sh").write_text("export SPINDLE_PROBE_FROM_ENV_SH=1\n")
    got, started = _run_probe({"SPARK_CONF_DIR": str(tmp_path)})
    assert started == {"early_program": "spark-submit"}
    assert got["own_launch"] is False and got["counts"] == COUNTS
