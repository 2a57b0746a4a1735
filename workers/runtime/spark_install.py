"""Where Spark and the Java it runs on are installed, found without importing PySpark (a
driver asks before its heavy imports: `driver_jvm`, `spark_cds`)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path


def spark_home() -> Path:
    """PySpark's install (its `bin/spark-submit` and jars), found without importing it."""
    import importlib.util

    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pyspark is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def java_binary(env: Mapping[str, str]) -> str | None:
    """The `java` that bin/spark-class runs: JAVA_HOME's, else the first on PATH (None if
    there is none)."""
    home = env.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java", path=env.get("PATH"))
    return java if java is not None and os.path.exists(java) else None
