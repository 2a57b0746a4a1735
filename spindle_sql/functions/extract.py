"""Functions that pick a part of a string, with Spark's semantics: `regexp_extract(s, re,
idx)` (a Java regular expression, translated to RE2 as RLIKE's is; the group `idx` of the
first match, '' where there is none or the group took no part) and `split_part(s, delim,
n)` (the `n`th part, 1-based, negative from the end; '' out of range; n = 0 an error).
Vectorised on Arrow; a non-literal pattern or delimiter runs once per distinct value.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .base import (
    EvaluationError,
    Function,
    Val,
    expect,
    is_integral,
    is_null,
    is_scalar,
    is_string,
    to_array,
)
from .strings import by_pattern, java_regex

STR = pa.string()


def _check(fn: str, ints: tuple[int, ...]) -> Callable[[list[pa.DataType]], pa.DataType]:
    def check(ts: list[pa.DataType]) -> pa.DataType:
        for i, t in enumerate(ts):
            ok = is_null(t) or (is_integral(t) if i in ints else is_string(t))
            if not ok:
                kinds = ["an int" if i in ints else "a string" for i in range(len(ts))]
                raise expect(fn, ", ".join(kinds), ts)
        return STR

    return check


def _constant(fn: str, what: str, v: Val) -> int | None:
    if not is_scalar(v):
        raise EvaluationError(f"{fn}: the {what} must be a constant")
    return None if not v.is_valid else int(v.as_py())


def _nulls(s: Val, n: int) -> Val:
    return pa.scalar(None, STR) if is_scalar(s) else pa.nulls(n, STR)


def _groups(pattern: str) -> tuple[str, int]:
    """An RE2 pattern with its capturing groups named g1, g2, ... (and the whole match g0),
    and how many there are."""
    out, count, i, in_class = ["(?P<g0>"], 0, 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "^":
                out.append("[^")
                i += 2
                continue
        elif c == "(" and pattern[i + 1 : i + 2] != "?":
            count += 1
            out.append(f"(?P<g{count}>")
            i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out) + ")", count


def _regexp_extract(args: list[Val], n: int) -> Val:
    if any(is_null(a.type) for a in args):
        return _nulls(args[0], n)
    group = _constant("regexp_extract", "group index", args[2]) if len(args) == 3 else 1
    if group is None:
        return _nulls(args[0], n)

    def extract(s: Val, pattern: str) -> Val:
        named, count = _groups(java_regex(pattern))
        if not 0 <= group <= count:
            raise EvaluationError(
                f"regexp_extract: the regular expression {pattern!r} has {count} group(s); "
                f"there is no group {group}"
            )
        try:
            found = pc.struct_field(pc.extract_regex(s, pattern=named), [group])
        except pa.ArrowInvalid as e:
            raise EvaluationError(f"invalid regular expression {pattern!r}: {e}") from e
        return pc.if_else(pc.is_null(s), pa.scalar(None, STR), pc.fill_null(found, ""))

    return by_pattern(args[0], args[1], n, extract, STR)


def _split_part(args: list[Val], n: int) -> Val:
    if any(is_null(a.type) for a in args):
        return _nulls(args[0], n)
    part = _constant("split_part", "part number", args[2])
    if part is None:
        return _nulls(args[0], n)
    if part == 0:
        raise EvaluationError("split_part: the part number must not be 0 (parts count from 1)")

    def split(s: Val, delim: str) -> Val:
        strings = to_array(s, 1 if is_scalar(s) else n)
        if delim == "":  # Spark: the string is not split
            out = strings if part in (1, -1) else pc.if_else(pc.is_valid(strings), "", strings)
        else:
            lists = pc.split_pattern(strings, pattern=delim)
            parts = pa.concat_arrays([lists.flatten(), pa.array([""])])  # "" for out of range
            offsets = lists.offsets.to_numpy()
            lengths = np.diff(offsets)
            k = np.full(lengths.shape, part - 1) if part > 0 else lengths + part
            inside = (k >= 0) & (k < lengths)
            out = parts.take(pa.array(np.where(inside, offsets[:-1] + k, len(parts) - 1)))
            out = pc.if_else(pc.is_null(strings), pa.scalar(None, STR), out)
        return out[0] if is_scalar(s) else out

    return by_pattern(args[0], args[1], n, split, STR)


def functions() -> list[Function]:
    return [
        Function("regexp_extract", 2, 3, _check("regexp_extract", (2,)), _regexp_extract, "nulls"),
        Function("split_part", 3, 3, _check("split_part", (2,)), _split_part, "nulls"),
    ]


__all__ = ["functions"]
