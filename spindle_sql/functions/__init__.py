"""The scalar function library the SQL compiler and evaluator share: `FUNCTIONS`, every
function and operator by lower-case name, each with its type rule and its vectorised
implementation on Arrow, following Spark 4's SQL semantics in ANSI mode (the default, and
what Spindle's Spark sessions run). Also the type rules shared with the planner:
`common_type` (CASE, COALESCE, UNION, IN lists) and `cast_type_ok` (CAST).

The functions live in topic modules: `arith` (arithmetic, math), `logic` (comparisons,
logic, IN, conditionals), `strings`, `extract`, `datetimes`, with casts in
`cast`/`parsing` and decimal arithmetic in `decimals`; `base` holds what they share.

A function's `impl` gets its arguments evaluated: an array of one value per row, or for a
literal a `pa.Scalar` (not broadcast); given only scalars it may return a scalar, which
the evaluator broadcasts. `evaluate.py` decides which rows each argument is evaluated on
(`Function.lazy`), so that run-time errors come from the rows Spark evaluates.

Operators use these names: + - * / % neg = <> < <= > >= <=> and or not is_null
is_not_null like rlike in (BETWEEN is rewritten by the compiler).
"""

from __future__ import annotations

from . import (
    arith,
    datetimes,
    extract,
    logic,
    strings,
)
from .base import (
    EvaluationError,
    Function,
    FunctionTypeError,
    Val,
    common_type,
    spark_name,
)
from .cast import cast_array, cast_type_ok, cast_value


def _registry() -> dict[str, Function]:
    out: dict[str, Function] = {}
    modules = (arith, logic, strings, extract)
    for module in (*modules, datetimes):
        for f in module.functions():
            assert f.name not in out, f.name
            out[f.name] = f
    return out


FUNCTIONS: dict[str, Function] = _registry()


__all__ = [
    "FUNCTIONS",
    "EvaluationError",
    "Function",
    "FunctionTypeError",
    "Val",
    "cast_array",
    "cast_type_ok",
    "cast_value",
    "common_type",
    "spark_name",
]
