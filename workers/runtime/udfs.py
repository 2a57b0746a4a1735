"""A spec's Python UDF module run in the pipeline's own processes (`load`), into a module of
its own, whose functions views call (`spindle_sql.udfs.Udf`). The run reads the module's
file into the spec first (`pipeline_spec.udf_source.inline`).

Nothing else runs a UDF module: the control plane only parses it (`pipeline_spec.udfs`).
"""

from __future__ import annotations

import linecache
import re
import sys
import types
from typing import Any

from pipeline_spec import model as S
from pipeline_spec.exits import UDF_ERROR_HEADING
from pipeline_spec.udfs import digest
from spindle_sql.udfs import UdfError

# A UdfError raised in a Spark task reaches the driver as the task's error text.
_IN_TASK = re.compile(r"UdfError: (udf .*)$", re.M)


def load(spec: S.PipelineSpec) -> dict[str, Any]:
    """The declared functions of `spec`'s inline UDF module, which runs now (once per
    process and module: a module's second load is the first's), an aggregate's class as an
    instance; SpecError at `udfs` if it raises or does not define them."""
    u = spec.udfs
    if u is None:
        return {}
    if u.code is None:
        raise ValueError("internal: the UDF module's file is read first (udf_source.inline)")
    name = f"spindle_udfs_{digest(u.code)}"
    module = sys.modules.get(name)
    if module is None:
        module = _run(name, u.code)
    out: dict[str, Any] = {}
    for f in u.functions:
        fn = getattr(module, f.name, None)
        if f.kind == "aggregate":
            if not isinstance(fn, type):
                raise S.SpecError([("udfs", f"the module defines no class {f.name!r}")])
            try:  # one instance: its methods are called per group
                out[f.name] = fn()
            except (Exception, SystemExit) as e:
                raise S.SpecError(
                    [("udfs", f"aggregate {f.name}(): {type(e).__name__}: {e}")]
                ) from None
        elif not callable(fn):
            raise S.SpecError([("udfs", f"the module defines no function {f.name!r}")])
        else:
            out[f.name] = fn
    return out


def _run(name: str, code: str) -> types.ModuleType:
    # Its source is registered as the module's file so that tracebacks show its lines.
    filename = f"<udfs {name}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    module = types.ModuleType(name)
    module.__file__ = filename
    try:
        exec(compile(code, filename, "exec"), module.__dict__)
    except (Exception, SystemExit) as e:
        raise S.SpecError([("udfs", f"the module raised {type(e).__name__}: {e}")]) from None
    sys.modules[name] = module  # once per process: executors plan again for every task
    return module


def udf_failure(e: BaseException) -> tuple[str, str] | None:
    """If `e` is a UDF's failure (raised here, or in a partitioned run's task), its one-line
    message and the function's traceback."""
    if isinstance(e, UdfError):
        return e.message, e.detail
    m = _IN_TASK.search(str(e))
    return (m.group(1), str(e)) if m else None


__all__ = ["UDF_ERROR_HEADING", "load", "udf_failure"]
