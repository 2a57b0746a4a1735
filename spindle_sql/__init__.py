"""Pipelines in SQL: views (`CREATE VIEW name AS SELECT ...`, Spark SQL) over input tables,
planned into an incremental dataflow of the engine's operators. Pure Python: no Spark, so
the control plane validates SQL as it is submitted.

    views = compile_views(text, {"bid": bid_schema})   # SqlError at a line and column
    flow = Dataflow(views)
    loc = StorageLocation.open(path, fingerprint=flow.fingerprint)
    DataflowRun(flow).open(loc)  # the runtime's (workers/): state kept, restored, committed
    out = flow.step({"bid": delta})                     # {view: delta}
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from . import planner
from .dataflow import Dataflow
from .errors import Problem, SqlError
from .parse import parse
from .planner import PlannedView


def compile_views(text: str, tables: Mapping[str, pa.Schema]) -> dict[str, PlannedView]:
    """The views of `text` planned over input tables of these schemas."""
    return planner.plan(parse(text), tables)


__all__ = ["Dataflow", "PlannedView", "Problem", "SqlError", "compile_views"]
