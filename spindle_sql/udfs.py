"""Python user-defined scalar functions as views call them (issue 52): a declaration from
the spec (name, argument and result types, the module's digest) and, in the pipeline's
own processes only, the function itself (`impl`, given by the runtime, which loads the
module: `workers/runtime/udfs.py`). Planning needs only the declaration, so the control
plane plans views that call UDFs without running them.

A call passes one Arrow array per argument, of the declared types and as many values as
the batch has rows (a literal argument repeated), and takes back one array of as many
values of the declared result type. Anything else, or an exception, is a `UdfError`
naming the function and, when one row alone reproduces it, that row's arguments.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from .functions import EvaluationError, Val
from .functions.base import spark_name

# Rows tried one at a time to find the one a failing batch failed on.
_MAX_ROWS_TRIED = 10_000


class UdfError(EvaluationError):
    """A UDF raised, or returned the wrong length or type: the step fails, and nothing of
    it is committed. `message`: one line; `detail`: the traceback of the function's
    exception, if it raised, which the error's text carries too (a Spark task's error
    reaches the driver as text only)."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(f"{message}\n{detail}" if detail else message)
        self.message, self.detail = message, detail


class Declared:
    """A declared Python function of a spec: compared, hashed and printed by its
    declaration and digest (operator fingerprints cover those), never by the implementation
    it carries (`impl`, given in a pipeline's own processes only)."""

    def __init__(
        self,
        name: str,
        args: Sequence[pa.DataType],
        result: pa.DataType,
        digest: str,
        impl: Any = None,
    ) -> None:
        self.name, self.args, self.result, self.digest = name, tuple(args), result, digest
        self.impl = impl

    def _key(self) -> tuple[Any, ...]:
        return (type(self).__name__, self.name, self.args, self.result, self.digest)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Declared) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


class Udf(Declared):
    """A declared scalar function (its `impl`: the module's function)."""

    def __repr__(self) -> str:
        args = ", ".join(spark_name(t) for t in self.args)
        return f"udf {self.name}({args}) -> {spark_name(self.result)} @{self.digest}"

    def __call__(self, vals: list[Val], n: int) -> pa.Array:
        """The function on `n` rows: `vals`, one per argument, arrays of `n` values or
        scalars (repeated here)."""
        if self.impl is None:
            raise UdfError(f"udf {self.name}: not loaded in this process")
        arrays = [pa.repeat(v, n) if isinstance(v, pa.Scalar) else v for v in vals]
        try:
            out = self.impl(*arrays)
        except (Exception, SystemExit) as e:  # sys.exit() must not end the pipeline's process
            raise self._failed(arrays, e) from None
        return self._checked(out, n)

    def _checked(self, out: Any, n: int) -> pa.Array:
        if isinstance(out, pa.ChunkedArray):
            out = out.combine_chunks()
        if not isinstance(out, pa.Array):
            raise UdfError(
                f"udf {self.name} returned a {type(out).__name__}: it must return a "
                f"pyarrow Array of {spark_name(self.result)}"
            )
        if len(out) != n:
            raise UdfError(f"udf {self.name} returned {len(out)} values for {n} rows")
        if out.type != self.result:
            if not pa.types.is_null(out.type):
                raise UdfError(
                    f"udf {self.name} returned {out.type} values: it is declared to return "
                    f"{spark_name(self.result)} ({self.result})"
                )
            out = pa.nulls(n, self.result)
        return out

    def _failed(self, arrays: list[pa.Array], e: BaseException) -> UdfError:
        """The error of a batch the function raised on: on the first row that raises alone
        if one does (a vectorised function cannot say which row it failed on)."""
        detail = "".join(traceback.format_exception(e))
        n = len(arrays[0]) if arrays else 0
        assert self.impl is not None
        for i in range(min(n, _MAX_ROWS_TRIED)):
            row = [a.slice(i, 1) for a in arrays]
            try:
                self.impl(*row)
            except (Exception, SystemExit) as one:
                values = ", ".join(repr(a[0].as_py()) for a in row)
                detail = "".join(traceback.format_exception(one, chain=False))
                message = f"udf {self.name} failed on row ({values}): {type(one).__name__}: {one}"
                return UdfError(message, detail)
        message = f"udf {self.name} failed on a batch of {n} rows: {type(e).__name__}: {e}"
        return UdfError(message, detail)


def declared(
    functions: Sequence[tuple[str, Sequence[pa.DataType], pa.DataType]],
    digest: str,
    impls: Mapping[str, Callable[..., Any]] | None = None,
) -> dict[str, Udf]:
    """The scalar `Udf`s of one module (`digest`), with their implementations where given."""
    return {
        name: Udf(name, args, result, digest, (impls or {}).get(name))
        for name, args, result in functions
    }


__all__ = ["Declared", "Udf", "UdfError", "declared"]
