"""What of the parser's tree the planner and compiler read: every node type they handle,
with every argument (child or flag) of it they honour. `check` refuses any other node, and
any argument a node carries that is not listed, or a flag with a value not listed, at its
line and column.

A parser release may represent a construct differently: `a NOT LIKE b` became
`Like(negate=True)` in sqlglot 30, which a compiler reading only `Like`'s operands turned
into LIKE; `ltrim(x)` became `Trim(position=LEADING)`, read as `trim`. With this table, a
construct the compiler has not been taught is an error, never a silently different query.
The table lists what the Spark dialect of the pinned sqlglot produces for the language
docs/sql.md describes; `tests/spindle_sql/test_grammar.py` checks that every documented construct
passes and that unknown flags are refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from sqlglot import exp

from .errors import Problem

# An argument's rule: CHILD, a node (or list of nodes) checked in turn; ANY, a value read
# whole by the code that handles the node (a name, a type, a window frame bound); a set, the
# values a flag may have (None, absent, always may).
CHILD = "child"
ANY = "any"
Rule = str | frozenset[object]
Shape = Mapping[str, Rule]
Extra = Callable[[exp.Expr], str | None]  # a node-wide check: a problem, or None

_TRUE = frozenset({True})
_FALSE = frozenset({False})
_BOOL = frozenset({True, False})
_BINARY: Shape = {"this": CHILD, "expression": CHILD}
_UNARY: Shape = {"this": CHILD}

NODES: dict[type[exp.Expr], Shape] = {
    # -- queries -------------------------------------------------------------------------
    exp.Select: {
        "expressions": CHILD,
        "from_": CHILD,
        "joins": CHILD,
        "where": CHILD,
        "group": CHILD,
        "having": CHILD,
        "with_": CHILD,
        "distinct": CHILD,
        # Refused by the planner with a message of their own.
        "order": ANY,
        "limit": ANY,
        "offset": ANY,
    },
    exp.Union: {"this": CHILD, "expression": CHILD, "distinct": _BOOL, "with_": CHILD},
    exp.Subquery: {"this": CHILD, "alias": CHILD},
    exp.From: _UNARY,
    exp.Join: {
        "this": CHILD,
        "on": CHILD,
        "using": CHILD,
        "kind": frozenset({"CROSS", "INNER", "OUTER"}),
        "side": frozenset({"LEFT", "RIGHT", "FULL"}),
    },
    exp.Table: {"this": CHILD, "alias": CHILD, "db": ANY, "catalog": ANY},
    exp.TableAlias: {"this": CHILD, "columns": CHILD},
    exp.With: {"expressions": CHILD, "recursive": _FALSE},
    exp.CTE: {"this": CHILD, "alias": CHILD},
    exp.Where: _UNARY,
    exp.Having: _UNARY,
    exp.Group: {"expressions": CHILD},
    exp.Distinct: {"expressions": CHILD},
    exp.Alias: {"this": CHILD, "alias": CHILD},
    exp.Star: {},
    exp.Column: {"this": CHILD, "table": CHILD},
    exp.Identifier: {"this": ANY, "quoted": _BOOL},
    exp.Var: {"this": ANY},
    # -- values and operators ------------------------------------------------------------
    exp.Literal: {"this": ANY, "is_string": _BOOL},
    exp.Null: {},
    exp.Boolean: {"this": _BOOL},
    exp.Paren: _UNARY,
    exp.Not: _UNARY,
    exp.Neg: _UNARY,
    exp.And: _BINARY,
    exp.Or: _BINARY,
    exp.Add: _BINARY,
    exp.Sub: _BINARY,
    exp.Mul: _BINARY,
    exp.Div: {**_BINARY, "typed": _FALSE, "safe": _TRUE},
    exp.Mod: {**_BINARY, "safe": _TRUE},
    exp.EQ: _BINARY,
    exp.NEQ: _BINARY,
    exp.GT: _BINARY,
    exp.GTE: _BINARY,
    exp.LT: _BINARY,
    exp.LTE: _BINARY,
    exp.NullSafeEQ: _BINARY,
    exp.Like: {**_BINARY, "negate": _BOOL},
    exp.RegexpLike: _BINARY,
    exp.Is: {**_BINARY, "negate": _BOOL},
    exp.In: {"this": CHILD, "expressions": CHILD, "query": CHILD},
    exp.Between: {"this": CHILD, "low": CHILD, "high": CHILD},
    exp.Exists: _UNARY,
    exp.Case: {"this": CHILD, "ifs": CHILD, "default": CHILD},
    exp.If: {"this": CHILD, "true": CHILD, "false": CHILD},
    exp.Cast: {"this": CHILD, "to": ANY},
    exp.TryCast: {"this": CHILD, "to": ANY},  # Spark's CAST, to this parser
    exp.Interval: {"this": CHILD, "unit": CHILD},
    exp.Extract: {"this": CHILD, "expression": CHILD},
    # -- aggregates and windows ----------------------------------------------------------
    exp.Count: {"this": CHILD, "expressions": CHILD, "big_int": _TRUE},
    exp.Sum: _UNARY,
    exp.Avg: _UNARY,
    exp.Min: _UNARY,
    exp.Max: _UNARY,
    exp.Filter: _BINARY,
    exp.Window: {
        "this": CHILD,
        "partition_by": CHILD,
        "order": CHILD,
        "spec": CHILD,
        "over": frozenset({"OVER"}),
    },
    exp.WindowSpec: {"kind": ANY, "start": ANY, "start_side": ANY, "end": ANY, "end_side": ANY},
    exp.Order: {"expressions": CHILD},
    exp.Ordered: {"this": CHILD, "desc": _BOOL, "nulls_first": _BOOL},
    exp.RowNumber: {},
    exp.Rank: {},
    exp.DenseRank: {},
    exp.Lag: {"this": CHILD, "offset": CHILD, "default": CHILD},
    exp.Lead: {"this": CHILD, "offset": CHILD, "default": CHILD},
    # -- functions read by name (`compile.Compiler._function`) ----------------------------
    exp.Anonymous: {"this": ANY, "expressions": CHILD},
    exp.Abs: _UNARY,
    exp.Ceil: {"this": CHILD, "decimals": CHILD},
    exp.Floor: {"this": CHILD, "decimals": CHILD},
    exp.Round: {"this": CHILD, "decimals": CHILD},
    exp.Sqrt: _UNARY,
    exp.Exp: _UNARY,
    exp.Ln: _UNARY,
    exp.Pow: _BINARY,
    exp.Coalesce: {"this": CHILD, "expressions": CHILD, "is_nvl": _BOOL, "is_null": _BOOL},
    exp.Nullif: _BINARY,
    exp.Greatest: {"this": CHILD, "expressions": CHILD, "ignore_nulls": _TRUE},
    exp.Least: {"this": CHILD, "expressions": CHILD, "ignore_nulls": _TRUE},
    exp.Concat: {"expressions": CHILD, "safe": _TRUE, "coalesce": _FALSE},
    exp.ConcatWs: {"expressions": CHILD, "safe": _TRUE, "coalesce": _TRUE, "flatten": _TRUE},
    exp.Upper: _UNARY,
    exp.Lower: _UNARY,
    exp.Length: _UNARY,
    exp.Substring: {"this": CHILD, "start": CHILD, "length": CHILD, "zero_start": _TRUE},
    exp.Trim: {"this": CHILD, "position": frozenset({"LEADING", "TRAILING", "BOTH"})},
    exp.Replace: {"this": CHILD, "expression": CHILD, "replacement": CHILD},
    exp.StartsWith: _BINARY,
    exp.EndsWith: _BINARY,
    exp.Contains: _BINARY,
    exp.RegexpExtract: {
        "this": CHILD,
        "expression": CHILD,
        "group": CHILD,
        "null_if_pos_overflow": _TRUE,
    },
    exp.SplitPart: {"this": CHILD, "delimiter": CHILD, "part_index": CHILD},
    exp.Year: _UNARY,
    exp.Quarter: _UNARY,
    exp.Month: _UNARY,
    exp.Day: _UNARY,
    exp.DayOfMonth: _UNARY,
    exp.DayOfWeek: _UNARY,
    exp.DayOfYear: _UNARY,
    exp.WeekOfYear: _UNARY,
    exp.Hour: _UNARY,
    exp.Minute: _UNARY,
    exp.Second: _UNARY,
    exp.TsOrDsToDate: {"this": CHILD, "safe": _TRUE},
    exp.TimestampTrunc: {"this": CHILD, "unit": CHILD},
    exp.TimeToStr: {"this": CHILD, "format": CHILD},
    exp.TimeStrToTime: _UNARY,  # inside date_format's first argument
    exp.TsOrDsAdd: {"this": CHILD, "expression": CHILD, "unit": CHILD},
    exp.AddMonths: _BINARY,
    exp.DateDiff: _BINARY,
    exp.StrToUnix: {"this": CHILD, "format": ANY},
    exp.CurrentTimestamp: {},  # the step's processing time, as PROCTIME() and NOW()
}


def _ordered(node: exp.Expr) -> str | None:
    # The planner orders NULLs as Spark does by default (first ascending, last descending).
    desc = bool(node.args.get("desc"))
    nulls_first = node.args.get("nulls_first")
    if nulls_first is not None and bool(nulls_first) == desc:
        return "NULLS FIRST with DESC and NULLS LAST with ASC are not supported"
    return None


EXTRA: dict[type[exp.Expr], Extra] = {exp.Ordered: _ordered}
# Words for arguments in messages, where the argument's name is not the SQL's.
_WORDS: dict[tuple[type[exp.Expr] | None, str], str] = {
    (None, "symmetric"): "SYMMETRIC",
    (None, "method"): "NATURAL",
    (None, "safe"): "the TRY_ form",
    (None, "format"): "a format",
    (None, "escape"): "ESCAPE",
    (exp.Trim, "expression"): "trimming characters other than spaces",
}


def _word(node: exp.Expr, name: str) -> str:
    found = _WORDS.get((type(node), name)) or _WORDS.get((None, name))
    return found or name.upper().replace("_", " ")


def check(query: exp.Expr, at: Callable[[exp.Expr], tuple[int, int]]) -> list[Problem]:
    """Every node of `query`'s tree that the table does not allow, as problems (the first
    per node); `at` gives a node's line and column."""
    problems = []
    for node, why in _refused(query):
        line, col = 0, 0
        n: exp.Expr | None = node
        while n is not None and not line:  # a node the parser made has no position
            line, col = at(n)
            n = n.parent
        problems.append(Problem(f"{_text(node)}: {why}", line, col))
    return problems


def _refused(node: exp.Expr) -> Iterator[tuple[exp.Expr, str]]:
    shape = NODES.get(type(node))
    if shape is None:
        yield node, "not supported in a view (docs/sql.md lists the language)"
        return
    for name, value in node.args.items():
        if value is None or (isinstance(value, list) and not value):
            continue
        rule = shape.get(name)
        if rule is None:
            yield node, f"{_word(node, name)} is not supported here"
            return
        if rule == CHILD:
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, exp.Expr):
                    yield from _refused(child)
        elif isinstance(rule, frozenset) and value not in rule:
            yield node, f"{_word(node, name)} {value!r} is not supported here"
            return
    extra = EXTRA.get(type(node))
    why = extra(node) if extra is not None else None
    if why is not None:
        yield node, why


def _text(node: exp.Expr) -> str:
    try:
        text = node.sql(dialect="spark")
    except Exception:  # a node the generator cannot print still gets a message
        text = type(node).__name__
    return repr(text if len(text) <= 60 else text[:57] + "...")


__all__ = ["ANY", "CHILD", "NODES", "check"]
