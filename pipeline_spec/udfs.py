"""A spec's Python user-defined functions (`udfs`): one Python module, written inline
(`code`) or kept in a file under the configured file roots (`path`), and the declared
signature of each function SQL views may call (`functions`).

Declarations give the types, so the control plane plans a view that calls a UDF without
importing the module: it only parses it (`check_source`: syntax, and a top-level function
of each declared name taking that many arguments). The module is run only by the
pipeline's own processes (`workers/runtime/udfs.py`).
"""

from __future__ import annotations

import ast
import hashlib
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from .fields import SpecModel
from .kinds import Part
from .types import TYPE_NAMES_DOC, arrow_type

# A SQL identifier as views call it (lowercase: SQL names are case-insensitive).
UDF_NAME_RE = r"^[a-z_][a-z0-9_]{0,63}$"
MAX_CODE = 200_000  # characters, as `sql`


def _sql_type(name: str) -> str:
    arrow_type(name)  # ValueError naming the type
    return name


SqlType = Annotated[str, AfterValidator(_sql_type)]


class UdfDeclaration(SpecModel):
    """One function views may call: its name, its arguments' types and its result's."""

    name: str = Field(pattern=UDF_NAME_RE, description="the name views call it by")
    args: list[SqlType] = Field(
        min_length=1,
        max_length=32,
        description=f"each argument's Spark SQL type ({TYPE_NAMES_DOC}), at least one (a "
        "function of nothing is a constant); a call's arguments are cast to them where "
        "Spark would widen implicitly",
    )
    returns: SqlType = Field(description="the result's Spark SQL type")
    kind: Literal["scalar", "aggregate"] = Field(
        "scalar",
        description="scalar: a function called once per batch with one Arrow array per "
        "argument (all of the batch's rows), returns one Arrow array of as many values; "
        "aggregate: a class with create, accumulate, finish and optionally retract and "
        "merge (docs/sql.md, Python aggregates)",
    )


class Udfs(Part):
    """The module and its declared functions."""

    code: str | None = Field(
        None, min_length=1, max_length=MAX_CODE, description="the module's Python source"
    )
    path: str | None = Field(
        None,
        min_length=1,
        description="or a .py file holding it, inside the configured file roots; read "
        "when the spec is validated and again when each run starts",
    )
    functions: list[UdfDeclaration] = Field(min_length=1, max_length=256)

    def file_path(self) -> str | None:
        return self.path

    @model_validator(mode="after")
    def _one_source(self) -> Udfs:
        if (self.code is None) == (self.path is None):
            raise ValueError("give the module as code or as a path, one of them")
        if self.path is not None and not self.path.endswith(".py"):
            raise ValueError("path: a Python module's file ends in .py")
        names = [f.name for f in self.functions]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"functions: names must be unique, repeated: {dup}")
        if self.code is not None:
            problems = check_source(self.code, self.functions)
            if problems:
                raise ValueError("code: " + "; ".join(problems))
        return self


def check_source(source: str, functions: list[UdfDeclaration]) -> list[str]:
    """What is wrong with module `source` for these declarations, found by parsing it
    (never by running it): a syntax error at its line, or a declared function that is not
    a top-level `def` taking its declared number of positional arguments."""
    try:
        tree = ast.parse(source, filename="udfs")
    except SyntaxError as e:
        return [f"line {e.lineno}: {e.msg}"]
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    problems = []
    for f in functions:
        if f.kind == "aggregate":
            problems += _aggregate_problems(f, classes.get(f.name))
            continue
        d = defs.get(f.name)
        if d is None:
            problems.append(f"function {f.name!r} is not defined at the module's top level")
        elif isinstance(d, ast.AsyncFunctionDef):
            problems.append(f"function {f.name!r} (line {d.lineno}) is async: UDFs are plain")
        elif not _takes(d.args, len(f.args)):
            problems.append(
                f"function {f.name!r} (line {d.lineno}) does not take {len(f.args)} "
                "positional arguments, as declared"
            )
    return problems


# An aggregate class's methods: how many positional arguments each takes besides self
# (`None`: the declared arguments, after the accumulator), and whether it must be there.
_METHODS = {"create": (0, True), "accumulate": (None, True), "finish": (1, True),
            "retract": (None, False), "merge": (2, False)}  # fmt: skip


def _aggregate_problems(f: UdfDeclaration, c: ast.ClassDef | None) -> list[str]:
    if c is None:
        return [f"aggregate {f.name!r} is not a class at the module's top level"]
    methods = {n.name: n for n in c.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    problems = []
    for name, (n, required) in _METHODS.items():
        m = methods.get(name)
        if m is None:
            if required:
                problems.append(f"aggregate {f.name!r} (line {c.lineno}) has no method {name!r}")
            continue
        takes = 1 + (1 + len(f.args) if n is None else n)  # self, then its arguments
        if isinstance(m, ast.AsyncFunctionDef) or not _takes(m.args, takes):
            problems.append(
                f"aggregate {f.name!r}: method {name!r} (line {m.lineno}) does not take "
                f"{takes - 1} arguments"
                + (f" (the accumulator, then the {len(f.args)} declared)" if n is None else "")
            )
    return problems


def _takes(a: ast.arguments, n: int) -> bool:
    positional = len(a.posonlyargs) + len(a.args)
    required = positional - len(a.defaults)
    kw_required = sum(1 for d in a.kw_defaults if d is None)
    return kw_required == 0 and required <= n and (n <= positional or a.vararg is not None)


def digest(source: str) -> str:
    """The module's identity in operator fingerprints: a change to its code changes the
    fingerprints of the operators its functions' results reach."""
    return hashlib.sha256(source.encode()).hexdigest()[:16]


__all__ = ["UDF_NAME_RE", "UdfDeclaration", "Udfs", "check_source", "digest"]
