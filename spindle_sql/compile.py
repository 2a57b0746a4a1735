"""A SQL scalar expression (sqlglot's tree) becomes a typed `expr.Expr`: names resolved in a
`Scope`, functions looked up in `functions.FUNCTIONS` (types checked there), literals typed
as Spark types them. Errors are `SqlError`s at the node's line and column.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import sqlglot
from sqlglot import exp

from pipeline_spec.types import arrow_type

from . import functions as F
from .errors import Problem, SqlError
from .expr import Call, Case, Cast, Column, Expr, Literal, UdfCall
from .functions.base import TIMESTAMP
from .intervals import IntervalError, interval
from .parse import Script

_BINARY: dict[type[exp.Expr], str] = {
    exp.Add: "+",
    exp.Sub: "-",
    exp.Mul: "*",
    exp.Div: "/",
    exp.Mod: "%",
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.NullSafeEQ: "<=>",
    exp.And: "and",
    exp.Or: "or",
    exp.Like: "like",
    exp.RegexpLike: "rlike",
}

# sqlglot's names for some Spark functions, and ours (Spark's).
_SPARK = sqlglot.Dialect.get_or_raise("spark").generator()
_ALIASES = {
    "currenttimestamp": "proctime",  # CURRENT_TIMESTAMP, a step's processing time
    "now": "proctime",
    "dayofmonth": "day",
    "tsordstodate": "to_date",
    "ceil": "ceil",
    "pow": "power",
    "nvl": "coalesce",
    "ifnull": "coalesce",
    "substr": "substring",
    "charlength": "length",
    "regexpextract": "regexp_extract",
    "splitpart": "split_part",
    "concatws": "concat_ws",
    "addmonths": "add_months",
}
# EXTRACT's fields (Spark's names and abbreviations) and the function giving each.
_EXTRACT = {
    **dict.fromkeys(("YEAR", "Y", "YEARS", "YR", "YRS"), "year"),
    **dict.fromkeys(("QUARTER", "QTR"), "quarter"),
    **dict.fromkeys(("MONTH", "MON", "MONS", "MONTHS"), "month"),
    **dict.fromkeys(("WEEK", "W", "WEEKS"), "weekofyear"),
    **dict.fromkeys(("DAY", "D", "DAYS"), "day"),
    **dict.fromkeys(("DAYOFWEEK", "DOW"), "dayofweek"),
    **dict.fromkeys(("DOY",), "dayofyear"),
    **dict.fromkeys(("HOUR", "H", "HOURS", "HR", "HRS"), "hour"),
    **dict.fromkeys(("MINUTE", "M", "MIN", "MINS", "MINUTES"), "minute"),
}


@dataclass(frozen=True)
class Field:
    """A column visible in a query: `qualifier.name` to the user, `internal` in the plan.
    A `qualified_only` one is named only with its qualifier (a side's column of a JOIN ...
    USING, whose plain name is the joined column's)."""

    qualifier: str | None
    name: str
    internal: str
    type: pa.DataType
    qualified_only: bool = False


class Scope:
    """The columns a clause can name, and expressions already computed below it (group keys
    and aggregates after a GROUP BY, by their SQL text)."""

    def __init__(
        self,
        fields: list[Field],
        computed: Mapping[str, Expr] | None = None,
        hidden: str | None = None,
        outer: Scope | None = None,
    ) -> None:
        self.fields = fields
        self.computed = dict(computed or {})
        # Why a column of the FROM clause is not visible (e.g. not grouped by).
        self.hidden = hidden
        # A correlated subquery's: the query it is in, whose columns it may also name.
        self.outer = outer

    def resolve(self, name: str, qualifier: str | None) -> list[Field]:
        found = [
            f
            for f in self.fields
            if f.name == name
            and (f.qualifier == qualifier if qualifier is not None else not f.qualified_only)
        ]
        if not found and self.outer is not None:
            return self.outer.resolve(name, qualifier)
        return found

    def internal(self) -> set[str]:
        """The internal names of this scope's columns (not the outer scope's)."""
        done = {c.name for c in self.computed.values() if isinstance(c, Column)}
        return {f.internal for f in self.fields} | done


def key(node: exp.Expr) -> str:
    """An expression's identity for matching GROUP BY items and aggregates."""
    return node.sql(dialect="spark").lower()


def literal(node: exp.Expr) -> Literal | None:
    """A literal's value and Spark type, or None if `node` is no literal."""
    if isinstance(node, exp.Null):
        return Literal(None, pa.null())
    if isinstance(node, exp.Boolean):
        return Literal(bool(node.this), pa.bool_())
    if not isinstance(node, exp.Literal):
        return None
    text = str(node.this)
    if node.is_string:
        return Literal(text, pa.string())
    if "e" in text.lower():
        return Literal(float(text), pa.float64())
    if "." in text:
        d = Decimal(text)
        digits = d.as_tuple()
        scale = max(0, -int(digits.exponent)) if isinstance(digits.exponent, int) else 0
        precision = max(len(digits.digits), scale, 1)
        return Literal(d, pa.decimal128(precision, scale))
    n = int(text)
    if -(2**31) <= n < 2**31:
        return Literal(n, pa.int32())
    if -(2**63) <= n < 2**63:
        return Literal(n, pa.int64())
    return Literal(Decimal(n), pa.decimal128(min(len(text), 38), 0))


class Compiler:
    """Compiles the scalar expressions of one query clause against `scope`."""

    def __init__(self, script: Script, scope: Scope) -> None:
        self.script = script
        self.scope = scope

    def error(self, node: exp.Expr, message: str) -> SqlError:
        line, col = self.script.at(node)
        return SqlError([Problem(message, line, col)])

    def __call__(self, node: exp.Expr) -> Expr:
        done = self.scope.computed.get(key(node))
        if done is not None:
            return done
        handler = _HANDLERS.get(type(node))
        if handler is not None:
            return handler(self, node)
        if isinstance(node, exp.AggFunc):
            raise self.error(node, f"aggregate {key(node)} is not allowed here")
        if isinstance(node, exp.Func):
            return self._function(node)
        raise self.error(node, f"{node.sql(dialect='spark')!r}: not supported in a view")

    def call(self, node: exp.Expr, fn: str, args: list[Expr]) -> Call:
        function = F.FUNCTIONS.get(fn)
        if function is None:
            raise self.error(node, f"function {fn!r} is not supported in views (docs/sql.md)")
        n = len(args)
        if n < function.min_args or (function.max_args is not None and n > function.max_args):
            raise self.error(node, f"{fn}: wrong number of arguments ({n})")
        try:
            types = [a.type for a in args]
            if function.literal_type is not None:
                values = [a.value if isinstance(a, Literal) else None for a in args]
                t = function.literal_type(types, values)
            else:
                t = function.result_type(types)
        except F.FunctionTypeError as e:
            raise self.error(node, str(e)) from None
        return Call(fn, tuple(args), t)

    def _column(self, node: exp.Column) -> Expr:
        if isinstance(node.this, exp.Star):
            raise self.error(node, "* is only allowed as a whole select item")
        name = node.name.lower()
        qualifier = node.table.lower() or None
        found = self.scope.resolve(name, qualifier)
        shown = f"{qualifier}.{name}" if qualifier else name
        if not found:
            why = self.scope.hidden if self.scope.hidden else "unknown column"
            raise self.error(node, f"{why}: {shown}")
        if len(found) > 1:
            raise self.error(node, f"ambiguous column {shown}: qualify it with a table name")
        f = found[0]
        return Column(f.internal, f.type)

    def _literal(self, node: exp.Expr) -> Expr:
        lit = literal(node)
        assert lit is not None
        return lit

    def _binary(self, node: exp.Expr) -> Expr:
        fn = _BINARY[type(node)]
        if isinstance(node, exp.Add | exp.Sub) and (
            isinstance(node.this, exp.Interval) or isinstance(node.expression, exp.Interval)
        ):
            return self._plus_interval(node)
        out = self.call(node, fn, [self(node.this), self(node.expression)])
        # `a NOT LIKE b` is Like(negate=True) to the parser, not Not(Like(...)).
        return self.call(node, "not", [out]) if node.args.get("negate") else out

    def _plus_interval(self, node: exp.Expr) -> Expr:
        """`x ± INTERVAL ...` (or `INTERVAL ... + x`) with Spark's result: a date stays a
        date with months or days (add_months, date_add), else becomes a timestamp."""
        at, other = node.expression, node.this
        if isinstance(other, exp.Interval):
            if isinstance(node, exp.Sub):
                raise self.error(node, "an interval minus a date or timestamp is not defined")
            at, other = other, at
        if isinstance(other, exp.Interval):
            raise self.error(node, "adding intervals together is not supported")
        try:
            value = interval(at)
        except IntervalError as e:
            raise self.error(at, str(e)) from None
        if isinstance(node, exp.Sub):
            value = value.negated()
        base = self(other)
        if base.type not in (pa.date32(), TIMESTAMP) and not pa.types.is_null(base.type):
            raise self.error(
                node, f"an interval is added to a date or timestamp, not {F.spark_name(base.type)}"
            )
        if base.type == pa.date32() and value.kind == "months":
            return self.call(node, "add_months", [base, Literal(value.months, pa.int32())])
        if base.type == pa.date32() and value.kind == "days":
            if not -(2**31) <= value.days < 2**31:
                raise self.error(at, "interval out of range")
            return self.call(node, "date_add", [base, Literal(value.days, pa.int32())])
        months, micros = Literal(value.months, pa.int32()), Literal(value.micros, pa.int64())
        return self.call(node, "timestamp_plus", [base, months, micros])

    def _extract(self, node: exp.Expr) -> Expr:
        field = node.this.name.upper() if isinstance(node.this, exp.Var) else ""
        fn = _EXTRACT.get(field)
        if fn is None:
            known = "YEAR, QUARTER, MONTH, WEEK, DAY, DAYOFWEEK, DOY, HOUR, MINUTE"
            raise self.error(node, f"EXTRACT({field or '?'} FROM ...): use one of {known}")
        return self.call(node, fn, [self(node.expression)])

    def _trim_spaces(self, node: exp.Expr) -> Expr:
        position = str(node.args.get("position") or "BOTH").upper()
        fn = {"LEADING": "ltrim", "TRAILING": "rtrim"}.get(position, "trim")
        return self.call(node, fn, [self(node.this)])

    def _date_add(self, node: exp.Expr) -> Expr:
        """date_add and date_sub, which the parser reads as one node (date_sub's days
        multiplied by -1)."""
        unit = node.args.get("unit")
        if not isinstance(unit, exp.Var) or unit.name.upper() != "DAY":
            raise self.error(node, "date_add and date_sub add days")
        days = node.expression
        minus_one = (
            isinstance(days, exp.Mul)
            and isinstance(days.expression, exp.Neg)
            and isinstance(days.expression.this, exp.Literal)
            and str(days.expression.this.this) == "1"
        )
        if minus_one:
            return self.call(node, "date_sub", [self(node.this), self(days.this)])
        return self.call(node, "date_add", [self(node.this), self(days)])

    def _unix_timestamp(self, node: exp.Expr) -> Expr:
        # The format only applies to strings, which unix_timestamp does not take here.
        return self.call(node, "unix_timestamp", [self(node.this)])

    def _paren(self, node: exp.Expr) -> Expr:
        return self(node.this)

    def _not(self, node: exp.Expr) -> Expr:
        inner = node.this
        if isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null):
            return self.call(node, "is_not_null", [self(inner.this)])
        return self.call(node, "not", [self(inner)])

    def _is(self, node: exp.Expr) -> Expr:
        if not isinstance(node.expression, exp.Null):
            raise self.error(node, "only IS NULL and IS NOT NULL are supported")
        fn = "is_not_null" if node.args.get("negate") else "is_null"
        return self.call(node, fn, [self(node.this)])

    def _neg(self, node: exp.Expr) -> Expr:
        lit = literal(node.this)
        if lit is not None and lit.value is not None and lit.type != pa.string():
            return Literal(-lit.value, lit.type)
        return self.call(node, "neg", [self(node.this)])

    def _in(self, node: exp.Expr) -> Expr:
        if node.args.get("query") is not None:
            return self._subquery(node)
        return self.call(node, "in", [self(node.this), *(self(e) for e in node.expressions)])

    def _subquery(self, node: exp.Expr) -> Expr:
        # Subqueries are planned into joins before their clause is compiled
        # (`subqueries.py`), which gives their columns in `Scope.computed`.
        raise self.error(
            node, "a subquery is supported in WHERE, HAVING and the select list, not here"
        )

    def _between(self, node: exp.Expr) -> Expr:
        value = self(node.this)
        low = self.call(node, ">=", [value, self(node.args["low"])])
        high = self.call(node, "<=", [value, self(node.args["high"])])
        return self.call(node, "and", [low, high])

    def _case(self, node: exp.Expr) -> Expr:
        subject = node.this
        whens: list[tuple[Expr, Expr]] = []
        for w in node.args.get("ifs") or []:
            cond = self(w.this)
            if subject is not None:
                cond = self.call(w, "=", [self(subject), cond])
            whens.append((cond, self(w.args["true"])))
        default = node.args.get("default")
        otherwise = self(default) if default is not None else None
        return self._case_of(node, whens, otherwise)

    def _if(self, node: exp.Expr) -> Expr:
        false = node.args.get("false")
        return self._case_of(
            node,
            [(self(node.this), self(node.args["true"]))],
            self(false) if false is not None else None,
        )

    def _case_of(
        self, node: exp.Expr, whens: list[tuple[Expr, Expr]], otherwise: Expr | None
    ) -> Expr:
        for cond, _ in whens:
            if cond.type not in (pa.bool_(), pa.null()):
                raise self.error(node, f"a WHEN condition must be boolean, not {cond.type}")
        values = [v for _, v in whens] + ([otherwise] if otherwise is not None else [])
        try:
            t = F.common_type([v.type for v in values])
        except F.FunctionTypeError as e:
            raise self.error(node, f"CASE: {e}") from None
        whens = [(c, _cast_to(v, t)) for c, v in whens]
        return Case(tuple(whens), _cast_to(otherwise, t) if otherwise is not None else None, t)

    def _cast(self, node: exp.Expr) -> Expr:
        arg = self(node.this)
        name = node.args["to"].sql(dialect="spark").lower()
        try:
            target = arrow_type(name)
        except ValueError as e:
            raise self.error(node, f"cannot cast to {name}: {e}") from None
        if not F.cast_type_ok(arg.type, target):
            raise self.error(node, f"cannot cast {arg.type} to {name}")
        return Cast(arg, target)

    def _trunc(self, node: exp.Expr) -> Expr:
        unit = str(node.args["unit"].name if node.args.get("unit") is not None else "").lower()
        return self.call(node, "date_trunc", [Literal(unit, pa.string()), self(node.this)])

    def _date_format(self, node: exp.Expr) -> Expr:
        # sqlglot reads date_format(t, f) as TimeToStr(TimeStrToTime(t), f), a literal f
        # turned into its own time format: Spark's generator gives the user's pattern back.
        this = node.this.this if isinstance(node.this, exp.TimeStrToTime) else node.this
        fmt = node.args["format"]
        if isinstance(fmt, exp.Literal) and fmt.is_string:
            written = sqlglot.parse_one(_SPARK.format_time(node) or "''", read="spark")
            pattern: Expr = Literal(written.name, pa.string())
        else:
            pattern = self(fmt)
        return self.call(node, "date_format", [self(this), pattern])

    def _function(self, node: exp.Func) -> Expr:
        args: list[exp.Expr] = []
        if isinstance(node, exp.Anonymous):
            name = str(node.this).lower()
            name = "proctime" if name == "now" else name
            args = list(node.expressions)
            udf = self.script.udfs.get(name)
            if udf is not None:
                return self._udf(node, udf, [self(a) for a in args])
        else:
            name = _ALIASES.get(node.key, node.key)
            for k in node.arg_types:  # grammar.py allows only the arguments that are these
                v = node.args.get(k)
                if isinstance(v, list):
                    args += v
                elif isinstance(v, exp.Expr):
                    args.append(v)
        function = F.FUNCTIONS.get(name)
        if function is not None and not function.public:
            raise self.error(node, f"function {name!r} is not supported in views (docs/sql.md)")
        return self.call(node, name, [self(a) for a in args])

    def _udf(self, node: exp.Expr, udf: Any, args: list[Expr]) -> UdfCall:
        """A call of a Python UDF (`udf_args`)."""
        return UdfCall(udf, tuple(self.udf_args(node, udf, args)), udf.result)

    def udf_args(self, node: exp.Expr, udf: Any, args: list[Expr]) -> list[Expr]:
        """A Python function's arguments cast to its declared types where Spark would cast
        implicitly (a wider number, a NULL), refused otherwise."""
        if len(args) != len(udf.args):
            raise self.error(
                node, f"{udf.name}: takes {len(udf.args)} arguments, as declared ({len(args)})"
            )
        cast = []
        for i, (a, want) in enumerate(zip(args, udf.args, strict=True)):
            try:
                ok = a.type == want or F.common_type([a.type, want]) == want
            except F.FunctionTypeError:
                ok = False
            if not ok:
                got, declared = F.spark_name(a.type), F.spark_name(want)
                raise self.error(
                    node, f"{udf.name}: argument {i + 1} is {got}, declared {declared}"
                )
            cast.append(_cast_to(a, want))
        return cast


def _cast_to(e: Expr, t: pa.DataType) -> Expr:
    return e if e.type == t else Cast(e, t)


_HANDLERS: dict[type[exp.Expr], Callable[[Compiler, exp.Expr], Expr]] = {
    exp.Column: lambda c, n: c._column(n),  # type: ignore[arg-type]
    exp.Literal: Compiler._literal,
    exp.Null: Compiler._literal,
    exp.Boolean: Compiler._literal,
    exp.Paren: Compiler._paren,
    exp.Not: Compiler._not,
    exp.Is: Compiler._is,
    exp.Neg: Compiler._neg,
    exp.In: Compiler._in,
    exp.Between: Compiler._between,
    exp.Case: Compiler._case,
    exp.If: Compiler._if,
    exp.Cast: Compiler._cast,
    exp.TryCast: Compiler._cast,
    exp.TimestampTrunc: Compiler._trunc,
    exp.TimeToStr: Compiler._date_format,
    exp.Extract: Compiler._extract,
    exp.Exists: Compiler._subquery,
    exp.Subquery: Compiler._subquery,
    exp.Trim: Compiler._trim_spaces,
    exp.TsOrDsAdd: Compiler._date_add,
    exp.StrToUnix: Compiler._unix_timestamp,
    **dict.fromkeys(_BINARY, Compiler._binary),
}

__all__ = ["Compiler", "Field", "Scope", "key", "literal"]
