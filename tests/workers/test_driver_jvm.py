"""A driver's JVM started early (`workers.driver_jvm`): the session connects to it, and to a
JVM of its own when the early one cannot serve it. Each case runs in a fresh process (a
process has one Spark gateway)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import json, os, sys
from workers import driver_jvm
driver_jvm.launch(*driver_jvm.driver_options(None, None))
early = driver_jvm._launched.proc if driver_jvm._launched else None
from workers.runner import spark_session
spark = spark_session("probe", **json.loads(sys.argv[1]))
gateway = spark.sparkContext._gateway
print(json.dumps({
    "own_launch": gateway.proc is not None,  # PySpark launched (and owns) the JVM
    "early_alive": early is not None and early.poll() is None,
    "env_left": "PYSPARK_GATEWAY_PORT" in os.environ,
    "rows": spark.range(3).count(),
}))
spark.stop()
"""


def _probe(**session: object) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(session)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_the_session_connects_to_the_jvm_started_early() -> None:
    assert _probe() == {"own_launch": False, "early_alive": True, "env_left": False, "rows": 3}


def test_a_session_with_other_options_starts_its_own_jvm() -> None:
    got = _probe(java_options="-XX:+UseSerialGC")
    assert got == {"own_launch": True, "early_alive": False, "env_left": False, "rows": 3}
