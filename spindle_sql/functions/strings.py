"""String functions with Spark's semantics: upper/lower with Java's full case mapping,
lengths and substrings in code points, trims of spaces only, concat (NULL if any argument
is) and concat_ws (skipping NULLs), replace, LIKE (Spark's escapes checked), RLIKE (Java
regular expressions translated to RE2, refusing what RE2 would read differently) and
startswith/endswith/contains.

Per-row Python, where there is no vectorised equivalent: upper/lower of non-ASCII strings
(Arrow's case mapping is Unicode's simple one, Java's the full one: 'ß' -> 'SS'), and
substring/replace with non-literal positions or search strings; LIKE/RLIKE with a
non-literal pattern run once per distinct pattern.
"""

from __future__ import annotations

import string
from collections.abc import Callable

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
from .cast import cast_type_ok, cast_value

STR = pa.string()
BOOL = pa.bool_()
ResultType = Callable[[list[pa.DataType]], pa.DataType]
Impl = Callable[[list[Val], int], Val]


def _signature(fn: str, kinds: str, result: pa.DataType) -> ResultType:
    """Arguments by kind: 's' a string, 'i' an int (tinyint to int), NULL for any."""

    def check(ts: list[pa.DataType]) -> pa.DataType:
        for t, k in zip(ts, kinds, strict=False):
            ok = is_null(t) or (is_string(t) if k == "s" else is_integral(t) and t != pa.int64())
            if not ok:
                want = {"s": "a string", "i": "an int"}
                what = ", ".join(want[k] for k in kinds[: len(ts)])
                raise expect(fn, what, ts)
        return result

    return check


def _strings(v: Val) -> Val:
    return v if is_string(v.type) else cast_value(v, STR)


def _all_null(args: list[Val], n: int, t: pa.DataType) -> Val | None:
    """The result when some argument is an untyped NULL (strict functions)."""
    if any(is_null(a.type) for a in args):
        return pa.scalar(None, t) if all(is_scalar(a) for a in args) else pa.nulls(n, t)
    return None


def _per_row(
    f: Callable[..., object], args: list[Val], n: int, t: pa.DataType, nulls: bool = True
) -> pa.Array:
    """Row by row in Python (NULL if any argument is, with `nulls`; else if the first is)."""
    cols = [to_array(a, n).to_pylist() for a in args]
    out = [
        None if row[0] is None or (nulls and None in row) else f(*row)
        for row in zip(*cols, strict=True)
    ]
    return pa.array(out, t)


# --- case, length, trim -------------------------------------------------------------------


def _case(upper: bool) -> Impl:
    def impl(args: list[Val], n: int) -> Val:
        s = args[0]
        if (done := _all_null(args, n, STR)) is not None:
            return done
        if is_scalar(s):
            v = s.as_py()
            return pa.scalar(None if v is None else (v.upper() if upper else v.lower()), STR)
        out = pc.ascii_upper(s) if upper else pc.ascii_lower(s)
        other = pc.invert(pc.fill_null(pc.string_is_ascii(s), True))
        if pc.any(other).as_py():
            rows = s.filter(other).to_pylist()
            fixed = [v.upper() if upper else v.lower() for v in rows]  # Java's full mapping
            out = pc.replace_with_mask(out, other, pa.array(fixed, STR))
        return out

    return impl


def _length(args: list[Val], n: int) -> Val:
    if (done := _all_null(args, n, pa.int32())) is not None:
        return done
    return pc.utf8_length(args[0]).cast(pa.int32())


def _trim(which: str) -> Impl:
    f = {"trim": pc.utf8_trim, "ltrim": pc.utf8_ltrim, "rtrim": pc.utf8_rtrim}[which]

    def impl(args: list[Val], n: int) -> Val:
        if (done := _all_null(args, n, STR)) is not None:
            return done
        return f(args[0], characters=" ")  # Spark trims spaces only

    return impl


# --- substring, replace, concat -----------------------------------------------------------

_INT_MAX = 2**31 - 1


def _substring_py(s: str, pos: int, length: int = _INT_MAX) -> str:
    """Spark's UTF8String.substringSQL."""
    start = pos - 1 if pos > 0 else (len(s) + pos if pos < 0 else 0)
    end = min(max(start + length, -(2**31)), _INT_MAX)
    start = max(start, 0)
    return "" if start >= end else s[start:end]


def _substring(args: list[Val], n: int) -> Val:
    if (done := _all_null(args, n, STR)) is not None:
        return done
    s, rest = args[0], args[1:]
    if not all(is_scalar(a) for a in rest):
        return _per_row(_substring_py, args, n, STR)
    vals = [a.as_py() for a in rest]
    if any(v is None for v in vals):
        return pa.scalar(None, STR) if is_scalar(s) else pa.nulls(n, STR)
    pos, length = vals[0], vals[1] if len(vals) > 1 else _INT_MAX
    if is_scalar(s):
        v = s.as_py()
        return pa.scalar(None if v is None else _substring_py(v, pos, length), STR)
    # Python slice bounds reproduce substringSQL: a negative start counts from the end.
    start = pos - 1 if pos > 0 else pos
    if pos < 0 and pos + length >= 0:
        return pc.utf8_slice_codeunits(s, max(start, -(2**62)))
    if length <= 0 or (pos >= 0 and start + length <= 0):
        return pc.if_else(pc.is_valid(s), "", pa.scalar(None, STR))
    return pc.utf8_slice_codeunits(s, start, min(start + length, 2**62))


def _replace_py(s: str, search: str, rep: str = "") -> str:
    return s if search == "" else s.replace(search, rep)


def _replace(args: list[Val], n: int) -> Val:
    if (done := _all_null(args, n, STR)) is not None:
        return done
    s, rest = args[0], args[1:]
    if is_scalar(s) or not all(is_scalar(a) for a in rest):
        out = _per_row(_replace_py, args, n, STR)
        return out[0] if all(is_scalar(a) for a in args) else out
    vals = [a.as_py() for a in rest]
    if any(v is None for v in vals):
        return pa.nulls(n, STR)
    search, rep = vals[0], vals[1] if len(vals) > 1 else ""
    return s if search == "" else pc.replace_substring(s, search, rep)


def _concat_type(fn: str, first_separator: bool) -> ResultType:
    def check(ts: list[pa.DataType]) -> pa.DataType:
        for i, t in enumerate(ts):
            want_string = first_separator and i == 0
            ok = is_null(t) or is_string(t) or (not want_string and cast_type_ok(t, STR))
            if not ok:
                raise expect(fn, "strings (or values castable to string)", ts)
        return STR

    return check


def _concat(args: list[Val], n: int) -> Val:
    if not args:
        return pa.scalar("", STR)
    if (done := _all_null(args, n, STR)) is not None:
        return done
    vals = [_strings(a) for a in args]
    if len(vals) == 1:
        return vals[0]
    return pc.binary_join_element_wise(*vals, "", null_handling="emit_null")


def _concat_ws(args: list[Val], n: int) -> Val:
    """Spark's concat_ws: NULL arguments skipped, NULL separator gives NULL. Arrow's
    skipping join drops rows whose values are all NULL (Arrow 26), so a last value that
    is never NULL keeps every row, and its separator is cut off again."""
    sep, rest = args[0], [a for a in args[1:] if not is_null(a.type)]
    if is_null(sep.type):
        return pa.scalar(None, STR) if all(is_scalar(a) for a in args) else pa.nulls(n, STR)
    if not rest:
        return pc.if_else(pc.is_valid(sep), "", pa.scalar(None, STR))
    vals = [_strings(a) for a in rest]
    if not is_scalar(sep):
        return _per_row(
            lambda p, *vs: p.join(v for v in vs if v is not None), [sep, *vals], n, STR, nulls=False
        )
    if not sep.is_valid:
        return pa.scalar(None, STR) if all(is_scalar(a) for a in args) else pa.nulls(n, STR)
    if all(is_scalar(v) for v in vals):
        return pa.scalar(sep.as_py().join(v.as_py() for v in vals if v.is_valid), STR)
    joined = pc.binary_join_element_wise(*vals, "", sep, null_handling="skip")
    width = len(sep.as_py())
    if width == 0:
        return joined
    some = _any_valid(vals)
    return pc.if_else(some, pc.utf8_slice_codeunits(joined, 0, -width), "")


def _any_valid(vals: list[Val]) -> Val:
    out = pc.is_valid(vals[0])
    for v in vals[1:]:
        out = pc.or_(out, pc.is_valid(v))
    return out


# --- patterns -----------------------------------------------------------------------------


def by_pattern(
    s: Val, p: Val, n: int, f: Callable[[Val, str], Val], result: pa.DataType = BOOL
) -> Val:
    """`f(strings, pattern)` for a literal pattern, else once per distinct pattern."""
    if is_scalar(p):
        if not p.is_valid:
            return pa.scalar(None, result) if is_scalar(s) else pa.nulls(n, result)
        return f(s, p.as_py())
    s = to_array(s, n)
    out = pa.nulls(n, result)
    for pattern in pc.unique(p).drop_null().to_pylist():
        rows = pc.fill_null(pc.equal(p, pattern), False)
        out = pc.replace_with_mask(out, rows, to_array(f(s.filter(rows), pattern), 0))
    return out


def _check_like(pattern: str) -> None:
    """Spark's escapes: a backslash only before %, _ or a backslash."""
    i = 0
    while i < len(pattern):
        if pattern[i] == "\\":
            if i + 1 == len(pattern):
                raise EvaluationError(f"invalid LIKE pattern {pattern!r}: escape at the end")
            if pattern[i + 1] not in "%_\\":
                raise EvaluationError(
                    f"invalid LIKE pattern {pattern!r}: the escape character is not allowed "
                    f"to precede {pattern[i + 1]!r}"
                )
            i += 1
        i += 1


def _like(args: list[Val], n: int) -> Val:
    if (done := _all_null(args, n, BOOL)) is not None:
        return done

    def match(s: Val, pattern: str) -> Val:
        _check_like(pattern)
        return pc.match_like(s, pattern)

    return by_pattern(args[0], args[1], n, match)


def _rlike(args: list[Val], n: int) -> Val:
    if (done := _all_null(args, n, BOOL)) is not None:
        return done

    def match(s: Val, pattern: str) -> Val:
        try:
            return pc.match_substring_regex(s, java_regex(pattern))
        except pa.ArrowInvalid as e:
            raise EvaluationError(f"invalid regular expression {pattern!r}: {e}") from e

    return by_pattern(args[0], args[1], n, match)


_TERMINATORS = r"\n\r\x{85}\x{2028}\x{2029}"
_SPACE_CLASS = r" \t\n\x0B\f\r"


def _quote(ch: str) -> str:
    """A character as an RE2 literal (RE2 takes a backslash before ASCII punctuation only)."""
    return "\\" + ch if ch in string.punctuation else ch


def _is_hex(text: str) -> bool:
    return all(ch in "0123456789abcdefABCDEF" for ch in text)


def java_regex(pattern: str) -> str:
    """A Java regular expression (as Spark's RLIKE runs it, with find()) as an RE2 one of
    the same meaning; EvaluationError for constructs RE2 lacks or reads differently
    (lookaround, backreferences, possessive quantifiers, inline flags, class unions and
    intersections, Unicode-aware \\b, POSIX and Java classes)."""

    def unsupported(what: str) -> EvaluationError:
        return EvaluationError(f"regular expression {pattern!r}: {what} is not supported")

    out: list[str] = []
    i, in_class, class_start = 0, False, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            if i + 1 == len(pattern):
                raise EvaluationError(f"regular expression {pattern!r} ends with an escape")
            e = pattern[i + 1]
            i += 2
            if e == "Q":
                end = pattern.find("\\E", i)
                end = len(pattern) if end < 0 else end
                out.append("".join(_quote(ch) for ch in pattern[i:end]))
                i = end + 2
            elif e == "s":
                out.append(_SPACE_CLASS if in_class else f"[{_SPACE_CLASS}]")
            elif e == "S" and not in_class:
                out.append(f"[^{_SPACE_CLASS}]")
            elif e == "Z" and not in_class:
                out.append(rf"(?:\r\n|[{_TERMINATORS}])?\z")
            elif e == "e":
                out.append(r"\x1B")
            elif e == "u" and len(pattern[i : i + 4]) == 4 and _is_hex(pattern[i : i + 4]):
                out.append(r"\x{" + pattern[i : i + 4] + "}")
                i += 4
            elif e == "x":
                out.append("\\x")
            elif e in "pP":
                if pattern[i : i + 1] == "{":
                    end = pattern.find("}", i)
                    name = pattern[i + 1 : end] if end > 0 else ""
                    if not (1 <= len(name) <= 2 and name[0].isupper() and name.isalpha()):
                        raise unsupported(f"\\{e}{{{name}}}")
                    out.append(f"\\{e}{{{name}}}")
                    i = end + 1
                elif pattern[i : i + 1].isupper():
                    out.append(f"\\{e}{pattern[i]}")
                    i += 1
                else:
                    raise unsupported(f"\\{e}")
            elif e in "dDwWntfa" or (e in "Az" and not in_class):
                out.append("\\" + e)
            elif not e.isalnum():  # a quoted character
                out.append(_quote(e))
            else:
                raise unsupported(f"the escape \\{e}")
            class_start = False
            continue
        if in_class:
            if c == "[" or pattern.startswith("&&", i):
                raise unsupported("a character class union or intersection")
            if c == "]" and class_start:
                raise unsupported("']' first in a character class")
            if c == "]":
                in_class = False
            class_start = c == "^" and pattern[i - 1] == "["
            out.append(c)
        elif c == "[":
            in_class, class_start = True, True
            out.append(c)
        elif c == ".":
            out.append(f"[^{_TERMINATORS}]")
        elif c == "$":
            out.append(rf"(?:\r\n|[{_TERMINATORS}])?\z")
        elif c == "(" and pattern.startswith("(?", i) and not pattern.startswith("(?:", i):
            raise unsupported("a (? group other than (?:")
        elif c in "*+?}" and pattern[i + 1 : i + 2] == "+":
            raise unsupported("a possessive quantifier")
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _affix(kind: str) -> Impl:
    def impl(args: list[Val], n: int) -> Val:
        if (done := _all_null(args, n, BOOL)) is not None:
            return done
        s, p = args
        if is_scalar(p):
            if not p.is_valid:
                return pa.scalar(None, BOOL) if is_scalar(s) else pa.nulls(n, BOOL)
            f = {"startswith": pc.starts_with, "endswith": pc.ends_with}.get(
                kind, pc.match_substring
            )
            return f(s, pattern=p.as_py())
        py = {"startswith": str.startswith, "endswith": str.endswith, "contains": str.__contains__}
        return _per_row(py[kind], [s, p], n, BOOL)

    return impl


def functions() -> list[Function]:
    upper, lower = _case(True), _case(False)
    out = [
        Function("upper", 1, 1, _signature("upper", "s", STR), upper, "nulls", safe=True),
        Function("ucase", 1, 1, _signature("ucase", "s", STR), upper, "nulls", safe=True),
        Function("lower", 1, 1, _signature("lower", "s", STR), lower, "nulls", safe=True),
        Function("lcase", 1, 1, _signature("lcase", "s", STR), lower, "nulls", safe=True),
        Function("concat", 0, None, _concat_type("concat", False), _concat),
        Function("concat_ws", 1, None, _concat_type("concat_ws", True), _concat_ws),
        Function("replace", 2, 3, _signature("replace", "sss", STR), _replace, "nulls", True),
        Function("like", 2, 2, _signature("like", "ss", BOOL), _like, "nulls"),
        Function("rlike", 2, 2, _signature("rlike", "ss", BOOL), _rlike, "nulls"),
    ]
    for name in ("length", "char_length", "character_length"):
        out.append(Function(name, 1, 1, _signature(name, "s", pa.int32()), _length, "nulls", True))
    for name in ("substring", "substr"):
        out.append(Function(name, 2, 3, _signature(name, "sii", STR), _substring, "nulls", True))
    for name in ("trim", "ltrim", "rtrim"):
        out.append(Function(name, 1, 1, _signature(name, "s", STR), _trim(name), "nulls", True))
    for name in ("startswith", "endswith", "contains"):
        out.append(Function(name, 2, 2, _signature(name, "ss", BOOL), _affix(name), "nulls", True))
    return out


__all__ = ["by_pattern", "functions", "java_regex"]
