"""Typed scalar expressions: what the planner makes of a SQL expression once its names are
resolved and its types known. Evaluated on Arrow between stateful operators
(`evaluate.py`), and printed back as Spark SQL for the part Spark runs (`to_spark`).

Every node carries its Arrow result type. Column references name a column of the input
relation by its internal name (the planner's, unique within a relation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType


@dataclass(frozen=True)
class Literal:
    """A constant; `value` is a Python value of `type` (None: SQL NULL)."""

    value: Any
    type: pa.DataType


@dataclass(frozen=True)
class Call:
    """A function or operator of `functions.FUNCTIONS` applied to `args`."""

    fn: str
    args: tuple[Expr, ...]
    type: pa.DataType


@dataclass(frozen=True)
class Case:
    """CASE WHEN c1 THEN v1 ... ELSE otherwise END (otherwise None: NULL)."""

    whens: tuple[tuple[Expr, Expr], ...]
    otherwise: Expr | None
    type: pa.DataType


@dataclass(frozen=True)
class Cast:
    arg: Expr
    type: pa.DataType


@dataclass(frozen=True)
class UdfCall:
    """A Python UDF (`udfs.Udf`: its declaration, digest and, in a pipeline's process, its
    code) applied to `args`, each already of the declared argument type."""

    udf: Any  # udfs.Udf (typed loosely: udfs imports the function library)
    args: tuple[Expr, ...]
    type: pa.DataType


Expr = Column | Literal | Call | Case | Cast | UdfCall


def columns(e: Expr) -> set[str]:
    """The input columns `e` reads."""
    if isinstance(e, Column):
        return {e.name}
    if isinstance(e, Literal):
        return set()
    if isinstance(e, Call | UdfCall):
        return set().union(*(columns(a) for a in e.args)) if e.args else set()
    if isinstance(e, Cast):
        return columns(e.arg)
    out = set().union(*(columns(c) | columns(v) for c, v in e.whens))
    return out | (columns(e.otherwise) if e.otherwise is not None else set())


__all__ = ["Call", "Case", "Cast", "Column", "Expr", "Literal", "UdfCall", "columns"]
