"""The Spark configuration of pipeline drivers (`SPINDLE_SPARK_CONF`): a JSON object of
`spark.*` keys and their values, such as the executors' memory and cores on a cluster.

The control plane's settings validate it (`backend/settings.py`, `spark_conf`) and the worker
passes it to every driver it starts, in the variable; a driver applies it to its Spark
session (`workers/runtime/session.py`) after Spindle's own defaults, so a key given here
wins over those (`spark.ui.enabled`, `spark.sql.shuffle.partitions`, ...), and validates it
again: a driver started by hand reads the variable too.

Refused, each with its reason (`RESERVED`): the keys Spindle sets from elsewhere or relies
on (the master, the application's name, client mode, UTC), and the driver's JVM options,
which are read when the driver's JVM starts, before any of this configuration applies.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping

ENV = "SPINDLE_SPARK_CONF"

_AT_JVM_START = "read when the driver's JVM starts, before this configuration applies"
RESERVED: dict[str, str] = {
    "spark.master": "set SPINDLE_SPARK_MASTER instead",
    "spark.app.name": "Spindle names the drivers' applications",
    "spark.submit.deployMode": "drivers run in client mode, as child processes of the worker",
    "spark.sql.session.timeZone": "Spindle's results are computed in UTC",
    "spark.driver.memory": _AT_JVM_START,
    "spark.driver.extraJavaOptions": _AT_JVM_START,
    "spark.driver.defaultJavaOptions": _AT_JVM_START,
    "spark.driver.extraClassPath": _AT_JVM_START,
    "spark.driver.extraLibraryPath": _AT_JVM_START,
}
_KEY = re.compile(r"spark\.\S+")


class SparkConfError(ValueError):
    """A Spark configuration that drivers cannot take: the message names the key."""


def parse_spark_conf(value: object) -> dict[str, str]:
    """The configuration as Spark takes it (every value a string) from its JSON text or the
    decoded object; `None` or an empty text is no configuration. Values are strings,
    numbers (`2`, `0.5`) or booleans (`true`); keys start with `spark.` and are not
    `RESERVED`. Raises SparkConfError naming the first bad key."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise SparkConfError(f"{ENV}: not JSON ({e})") from None
    if not isinstance(value, Mapping):
        raise SparkConfError(
            f"{ENV}: a JSON object of spark.* keys and their values, not {_kind(value)}"
        )
    out: dict[str, str] = {}
    for key, v in value.items():
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise SparkConfError(f"{ENV}: {key!r} is not a Spark configuration key (spark.*)")
        if key in RESERVED:
            raise SparkConfError(f"{ENV}: {key} cannot be set here: {RESERVED[key]}")
        if isinstance(v, bool):
            out[key] = "true" if v else "false"
        elif isinstance(v, int | float) and not (isinstance(v, float) and not math.isfinite(v)):
            out[key] = str(v)
        elif isinstance(v, str):
            out[key] = v
        else:
            raise SparkConfError(
                f"{ENV}: {key}: the value must be a string, a number or a boolean, not {_kind(v)}"
            )
    return out


def _kind(v: object) -> str:
    """How JSON names the value's type."""
    if v is None:
        return "null"
    if isinstance(v, Mapping):
        return "an object"
    if isinstance(v, list | tuple):
        return "an array"
    if isinstance(v, float):
        return f"the number {v}"
    return type(v).__name__


__all__ = ["ENV", "RESERVED", "SparkConfError", "parse_spark_conf"]
