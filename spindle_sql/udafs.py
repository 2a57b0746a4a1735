"""Python user-defined aggregate functions as views call them (issue 52): a declaration from
the spec (name, argument and result types, the module's digest) and, in the pipeline's own
processes only, an instance of the module's class of that name (`impl`), which the engine's
`UdfGroupAggregate` calls through this class (`storage_engine.circuit.AggregateFunction`).

The class's contract (docs/sql.md, Python aggregates): `create()` an empty accumulator, a
JSON value; `accumulate(acc, *args)` the accumulator with a group's rows added, each
argument an Arrow array of the declared type; `finish(acc)` the group's result, a Python
value of the declared result type; optionally `retract(acc, *args)` the rows removed (then
the aggregate is incremental; without it, each touched group is recomputed from all its
rows) and `merge(acc, other)` two accumulators as one. An exception, or a result that is
not of the declared type, is a `UdfError` naming the function and the group.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from sqlglot import exp

from .functions.base import spark_name
from .parse import Script
from .udfs import Declared, UdfError


class UdafCall(exp.Expression, exp.AggFunc):
    """A call of a Python aggregate in a view's query: an aggregate wherever the planner
    looks for one (`marked`)."""

    arg_types = {"this": True, "expressions": False}


class Udaf(Declared):
    """A declared aggregate (its `impl`: an instance of the module's class)."""

    def __repr__(self) -> str:
        args = ", ".join(spark_name(t) for t in self.args)
        return f"udaf {self.name}({args}) -> {spark_name(self.result)} @{self.digest}"

    @property
    def retracts(self) -> bool:
        return callable(getattr(self._impl(), "retract", None))

    @property
    def merges(self) -> bool:
        return callable(getattr(self._impl(), "merge", None))

    def _impl(self) -> Any:
        if self.impl is None:
            raise UdfError(f"udf {self.name}: not loaded in this process")
        return self.impl

    def _call(self, method: str, group: tuple[Any, ...], *args: Any) -> Any:
        fn: Callable[..., Any] = getattr(self._impl(), method)
        try:
            return fn(*args)
        except (Exception, SystemExit) as e:  # sys.exit() must not end the pipeline's process
            raise UdfError(
                f"udf {self.name} failed in {method} on group {_shown(group)}: "
                f"{type(e).__name__}: {e}",
                "".join(traceback.format_exception(e)),
            ) from None

    def create(self, group: tuple[Any, ...]) -> Any:
        return self._call("create", group)

    def accumulate(self, acc: Any, args: list[pa.Array], group: tuple[Any, ...]) -> Any:
        return self._call("accumulate", group, acc, *args)

    def retract(self, acc: Any, args: list[pa.Array], group: tuple[Any, ...]) -> Any:
        return self._call("retract", group, acc, *args)

    def merge(self, acc: Any, other: Any, group: tuple[Any, ...]) -> Any:
        return self._call("merge", group, acc, other)

    def finish(self, acc: Any, group: tuple[Any, ...]) -> Any:
        value = self._call("finish", group, acc)
        try:
            return pa.scalar(value, self.result).as_py()
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            raise UdfError(
                f"udf {self.name} returned {value!r} for group {_shown(group)}: it is declared "
                f"to return {spark_name(self.result)}"
            ) from None


def marked(script: Script) -> Script:
    """`script` with every call of one of its Python aggregates as a `UdafCall` (sqlglot
    reads an unknown function as `exp.Anonymous`), positions kept."""
    names = {n for n, u in script.udfs.items() if isinstance(u, Udaf)}
    if not names:
        return script

    def mark(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Anonymous) and str(node.this).lower() in names:
            call = UdafCall(this=str(node.this).lower(), expressions=list(node.expressions))
            call.meta.update(node.meta)
            return call
        return node

    views = []
    for v in script.views:
        query = v.query.transform(mark)
        assert isinstance(query, exp.Query)
        views.append(dataclasses.replace(v, query=query))
    return dataclasses.replace(script, views=views)


def _shown(group: tuple[Any, ...]) -> str:
    return "(" + ", ".join(repr(v) for v in group) + ")"


__all__ = ["Udaf", "UdafCall", "marked"]
