"""A driver's JVM started before the driver's Python modules have loaded.

`python -m workers.runtime.driver run` spends a good part of its start-up on its imports
(interpreter, pyarrow, pyspark, the engine), then starts Spark, whose first part is launching
the JVM and its Py4J gateway: the two need not take turns (docs/benchmarks.md, "Figures
behind design choices"). `launch()` starts the JVM the way PySpark's
`launch_gateway` does (`spark-submit ... pyspark-shell`, the connection details written to a
file it names), with the driver options of `spark_session` that only a JVM launch can take
(Java options, class path); `attach()`, called by `spark_session` before it builds the
session, waits for the gateway and hands it to PySpark through `PYSPARK_GATEWAY_PORT` and
`PYSPARK_GATEWAY_SECRET`, as a Python driver under `spark-submit` is handed its JVM.

The JVM is started without `bin/spark-submit`: that script and `bin/spark-class` are a shell,
then a JVM of Spark's launcher library (`org.apache.spark.launcher.Main`) that prints the
real `java` command line, then that command. `launch` runs the launcher itself once per
distinct set of inputs and keeps its answer beside the class-data archive
(`launch-<key>.json`), so a driver execs `java` at once and its gateway is up sooner.

Contract:
- Imports only the standard library: it runs before the heavy imports it overlaps.
- The command is the one `spark-submit` would exec, in the environment it would give: its
  cache key covers everything the launcher reads (its arguments, the `java` it runs, Spark's
  install, the environment variables of Spark, Hadoop, YARN and Java, the configuration
  directory's `spark-defaults.conf`). Where the scripts do what the launcher cannot know (a
  `spark-env.sh` to source, Spark's own test switches), `spark-submit` runs as before.
- Best effort: a JVM that fails to start or to write its connection details is logged at
  debug level and left; `spark_session` then launches one as usual.
- The JVM exits when this process does: its gateway ends when its standard input, a pipe
  held here, closes (PySpark's own launch relies on the same).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .spark_install import java_binary, spark_home

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


# The driver's collector, unless its options pick one. A driver's heap is small (state lives
# in the engine, in Python) and its work is short micro-batches: the parallel collector's
# young pauses cost less than G1's barriers, concurrent cycles (started by every humongous
# Arrow or file buffer) and remark pauses: bench.pipeline's batch p50 and p99 are lower
# with it (docs/benchmarks.md). Metaspace starts at 256 MB: Spark's generated classes
# otherwise cross its first threshold a few batches in, and the parallel collector answers
# that with a full collection.
_COLLECTOR = "-XX:+UseParallelGC -XX:MetaspaceSize=256m"
_PICKS_COLLECTOR = re.compile(r"-XX:\+Use\w+GC\b")


def driver_options(java_options: str | None, class_path: str | None) -> tuple[str, str]:
    """(Java options, class path) of a driver's JVM: the class-data archive's (`spark_cds`),
    or the given ones instead; with a larger thread stack (Spark 4.0's stream thread
    overflows its default stack in a Java regex on some micro-batch plans, seen with
    JSON-parsing batches) and `_COLLECTOR` unless the options pick a collector."""
    from . import spark_cds

    extra = spark_cds.java_options() if java_options is None else java_options
    first = spark_cds.driver_class_path() if class_path is None else class_path
    collector = "" if _PICKS_COLLECTOR.search(extra) else _COLLECTOR
    return " ".join(o for o in ("-Xss32m", collector, extra) if o), first


def launch(java_options: str, class_path: str) -> None:
    """Start the JVM now, with these driver options (see `attach`)."""
    global _launched
    if _launched is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    if os.environ.get("PYSPARK_SUBMIT_ARGS"):
        return  # spark-submit arguments of the user's: PySpark's own launch applies them
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    info = Path(tempfile.mkdtemp(prefix="spindle-jvm-")) / "gateway"
    args = []
    if java_options:
        args += ["--conf", f"spark.driver.extraJavaOptions={java_options}"]
    if class_path:
        args += ["--conf", f"spark.driver.extraClassPath={class_path}"]
    args.append("pyspark-shell")
    home = spark_home()
    env = {**jvm_environment(os.environ), "SPARK_CONNECT_MODE": "0"}
    command, env = _direct(home, env, args) or ([str(home / "bin" / "spark-submit"), *args], env)
    env["_PYSPARK_DRIVER_CONN_INFO_PATH"] = str(info)
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            env=env,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
    except OSError as e:
        log.debug("could not start the driver's JVM early: %s", e)
        return
    _launched = _Launched(proc, info, (java_options, class_path))


# Variables the JVM (and the Python workers it starts) never needs: Spindle's settings, and
# credentials by their usual names. The run's expressions execute there.
_PRIVATE_PREFIXES = ("SPINDLE_", "AWS_", "MINIO_", "PG", "CELERY_", "REDIS_")
_PRIVATE_WORDS = ("SECRET", "PASSWORD", "PASSWD", "TOKEN", "CREDENTIAL", "PRIVATE")


def jvm_environment(env: Mapping[str, str]) -> dict[str, str]:
    """`env` less what the driver's JVM must not hold: the database URL, the object store's
    keys, tokens. The Python driver keeps them; nothing a spec runs can read them there."""
    return {
        k: v
        for k, v in env.items()
        if not k.upper().startswith(_PRIVATE_PREFIXES)
        and not any(w in k.upper() for w in _PRIVATE_WORDS)
    }


# What bin/spark-submit and bin/load-spark-env.sh export for the JVM, besides SPARK_HOME and
# SPARK_CONF_DIR (`_submit_env`).
_SCRIPT_ENV = {"PYTHONHASHSEED": "0", "SPARK_ENV_LOADED": "1", "SPARK_SCALA_VERSION": "2.13"}
# Environment variables that the scripts act on themselves: with any of these set,
# spark-submit runs.
_SCRIPT_SWITCHES = ("SPARK_TESTING", "SPARK_SQL_TESTING", "SPARK_PREPEND_CLASSES")
# Prefixes of the environment variables the launcher may read (its cache key).
_LAUNCHER_ENV = ("SPARK_", "HADOOP_", "YARN_", "JAVA", "_JAVA", "JDK_", "PYSPARK_")


def _direct(
    home: Path, env: dict[str, str], args: list[str]
) -> tuple[list[str], dict[str, str]] | None:
    """The `java` command and environment that `spark-submit ARGS` would exec, or None
    where spark-submit itself must run."""
    direct = _submit_env(home, env)
    if direct is None:
        return None
    command = _java_command(home, direct, args)
    return None if command is None else (command, direct)


def _submit_env(home: Path, env: dict[str, str]) -> dict[str, str] | None:
    """The environment `spark-submit` gives Spark's launcher and the JVM, or None where only
    the scripts can make it (a `spark-env.sh` to source, a script switch)."""
    conf = env.get("SPARK_CONF_DIR") or str(home / "conf")
    if os.path.exists(os.path.join(conf, "spark-env.sh")) or any(
        env.get(k) for k in _SCRIPT_SWITCHES
    ):
        return None
    return {**env, "SPARK_HOME": str(home), "SPARK_CONF_DIR": conf, **_SCRIPT_ENV}


def _java_command(home: Path, env: dict[str, str], args: list[str]) -> list[str] | None:
    """The command `spark-submit ARGS` would exec, from the cache or from Spark's launcher
    (then cached); None if the launcher cannot say."""
    java = java_binary(env)
    if java is None:
        return None
    cache = _cache_file(home, env, args, java)
    try:
        cached = json.loads(cache.read_text()) if cache is not None else None
        if isinstance(cached, list) and all(isinstance(a, str) for a in cached):
            return cached
    except (OSError, ValueError):
        pass
    launcher = [java, "-Xmx128m", *env.get("SPARK_LAUNCHER_OPTS", "").split()]
    launcher += ["-cp", str(home / "jars" / "*"), "org.apache.spark.launcher.Main"]
    try:
        out = subprocess.run(
            [*launcher, "org.apache.spark.deploy.SparkSubmit", *args],
            env=env,
            capture_output=True,
            timeout=_WAIT_S,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as e:
        log.debug("Spark's launcher did not give a command: %s", e)
        return None
    # Lines for the user, then a NUL line, then the command's arguments, each NUL-ended.
    _, sep, rest = out.partition(b"\0\n")
    command = [a.decode() for a in rest.split(b"\0")[:-1]]
    if not sep or not command:
        return None
    if cache is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            partial = cache.with_name(f"{cache.name}.{os.getpid()}.mut")
            partial.write_text(json.dumps(command))
            os.replace(partial, cache)
        except OSError as e:  # e.g. a read-only install: every launch asks the launcher
            log.debug("could not keep the launch command: %s", e)
    return command


def _cache_file(home: Path, env: dict[str, str], args: list[str], java: str) -> Path | None:
    """Where the launcher's answer for these inputs is kept (beside the class-data archive)."""
    from . import spark_cds

    real = os.path.realpath(java)
    defaults = Path(env["SPARK_CONF_DIR"]) / "spark-defaults.conf"
    try:
        st = os.stat(real)
        conf = defaults.read_bytes() if defaults.exists() else b""
        jars = os.stat(home / "jars").st_mtime_ns
    except OSError:
        return None
    parts = [
        args,
        [real, st.st_size, st.st_mtime_ns],
        [str(home), jars],
        sorted((k, v) for k, v in env.items() if k.startswith(_LAUNCHER_ENV)),
        hashlib.sha256(conf).hexdigest(),
    ]
    key = hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]
    return spark_cds.directory() / f"launch-{key}.json"


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
