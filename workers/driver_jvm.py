"""A driver's JVM started before the driver's Python modules have loaded.

`python -m workers.runner run` spends about 0.9 s on its imports (interpreter, pyarrow,
pyspark, the engine), then starts Spark, whose first part is launching the JVM and its Py4J
gateway (about 1 s): the two need not take turns. `launch()` starts the JVM the way PySpark's
`launch_gateway` does (`spark-submit ... pyspark-shell`, the connection details written to a
file it names), with the driver options of `spark_session` that only a JVM launch can take
(Java options, class path); `attach()`, called by `spark_session` before it builds the
session, waits for the gateway and hands it to PySpark through `PYSPARK_GATEWAY_PORT` and
`PYSPARK_GATEWAY_SECRET`, as a Python driver under `spark-submit` is handed its JVM.

Contract:
- Imports only the standard library: it runs before the heavy imports it overlaps.
- Best effort: a JVM that fails to start or to write its connection details is logged at
  debug level and left; `spark_session` then launches one as usual.
- The JVM exits when this process does: its gateway ends when its standard input, a pipe
  held here, closes (PySpark's own launch relies on the same).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_WAIT_S = 60.0  # for the connection details, as long as a session start may take


@dataclass
class _Launched:
    proc: subprocess.Popen[bytes]
    info: Path  # where the gateway writes its port and secret
    options: tuple[str, str]  # (java options, class path) it was started with


_launched: _Launched | None = None
# JVMs handed to PySpark: their stdin pipes must stay open as long as this process lives.
_keep: list[subprocess.Popen[bytes]] = []


def spark_home() -> Path:
    """PySpark's install (its `bin/spark-submit` and jars), found without importing it."""
    import importlib.util

    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pyspark is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def driver_options(java_options: str | None, class_path: str | None) -> tuple[str, str]:
    """(Java options, class path) of a driver's JVM: the class-data archive's (`spark_cds`),
    or the given ones instead, with a larger thread stack: Spark 4.0's stream thread
    overflows its default stack in a Java regex on some micro-batch plans (seen with
    JSON-parsing batches)."""
    from . import spark_cds

    extra = spark_cds.java_options() if java_options is None else java_options
    first = spark_cds.driver_class_path() if class_path is None else class_path
    return f"-Xss32m {extra}".strip(), first


def launch(java_options: str, class_path: str) -> None:
    """Start the JVM now, with these driver options (see `attach`)."""
    global _launched
    if _launched is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    if os.environ.get("PYSPARK_SUBMIT_ARGS"):
        return  # spark-submit arguments of the user's: PySpark's own launch applies them
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    info = Path(tempfile.mkdtemp(prefix="spindle-jvm-")) / "gateway"
    command = [str(spark_home() / "bin" / "spark-submit")]
    if java_options:
        command += ["--conf", f"spark.driver.extraJavaOptions={java_options}"]
    if class_path:
        command += ["--conf", f"spark.driver.extraClassPath={class_path}"]
    env = {**os.environ, "SPARK_CONNECT_MODE": "0", "_PYSPARK_DRIVER_CONN_INFO_PATH": str(info)}
    try:
        proc = subprocess.Popen(
            [*command, "pyspark-shell"],
            stdin=subprocess.PIPE,
            env=env,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
    except OSError as e:
        log.debug("could not start the driver's JVM early: %s", e)
        return
    _launched = _Launched(proc, info, (java_options, class_path))


def attach(java_options: str, class_path: str) -> None:
    """If a JVM was launched with these options, wait for its gateway and point PySpark at
    it (the next `SparkContext` connects instead of launching). Otherwise nothing."""
    global _launched
    got, _launched = _launched, None
    if got is None:
        return
    if got.options != (java_options, class_path):
        log.debug("the JVM started early has other options; starting another")
        got.proc.kill()
        return
    deadline = time.monotonic() + _WAIT_S
    while not got.info.is_file() and got.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        # As the gateway writes it: the port (4-byte int), then the secret (length, UTF-8).
        raw = got.info.read_bytes()
        (port,) = struct.unpack(">i", raw[:4])
        (n,) = struct.unpack(">i", raw[4:8])
        secret = raw[8 : 8 + n].decode()
        if len(secret) != n:
            raise ValueError("connection details cut short")
    except (OSError, ValueError, struct.error) as e:
        log.debug("the JVM started early did not start its gateway: %s", e)
        got.proc.kill()
        return
    finally:
        shutil.rmtree(got.info.parent, ignore_errors=True)
    os.environ["PYSPARK_GATEWAY_PORT"] = str(port)
    os.environ["PYSPARK_GATEWAY_SECRET"] = secret
    _keep.append(got.proc)


def detach() -> None:
    """After the session exists: later sessions of this process (after a stop) launch their
    own JVM, and child processes do not inherit the gateway's details."""
    os.environ.pop("PYSPARK_GATEWAY_PORT", None)
    os.environ.pop("PYSPARK_GATEWAY_SECRET", None)
