"""A pipeline's SQL text becomes its views: `CREATE VIEW name AS query` statements separated
by semicolons, parsed by sqlglot's Spark dialect. Every error names its line and column in
the whole text. A view may carry properties, as Feldera's do: `CREATE VIEW name WITH
('emit_final' = 'column') AS query`.

Flink's and Feldera's window table functions are written `TABLE(HOP(TABLE bid, ...))`; the
Spark dialect does not read the inner `TABLE` keyword, so it is blanked out (same length:
positions stay those of the user's text) before parsing; SESSION's `PARTITION BY` becomes an
argument.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import ParseError, SqlglotError, TokenError
from sqlglot.tokenizer_core import Token, TokenType

from . import grammar
from .errors import Problem, SqlError, position

_WINDOW_TVF = re.compile(r"(\b(?:TUMBLE|HOP|SESSION)\s*\(\s*)(TABLE)(\s)", re.IGNORECASE)
# SESSION is a keyword to the Spark dialect, and `PARTITION BY` no function argument: Flink's
# `TABLE(SESSION(TABLE t PARTITION BY k, ...))` is read as `TABLE(SESS_TV(t, PARTITION_BY(k),
# ...))`, the names in place.
SESSION_CALL, PARTITION_CALL = "SESS_TV", "PARTITION_BY"
_SESSION_TVF = re.compile(r"(\bTABLE\s*\(\s*)SESSION(\s*\()", re.IGNORECASE)
_SESSION_PARTITION = re.compile(
    r"(\bSESSION\s*\(\s*(?:TABLE\s+)?[A-Za-z_]\w*)(\s+PARTITION\s+BY\s+)(\([^()]*\)|[A-Za-z_]\w*)",
    re.IGNORECASE,
)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
PROPERTIES = ("emit_final",)  # the view properties Spindle knows


@dataclass(frozen=True)
class View:
    """One `CREATE VIEW`: its name, its query, and where its text starts."""

    name: str
    query: exp.Query
    line: int
    column: int
    properties: tuple[tuple[str, str], ...] = ()
    columns: tuple[str, ...] = ()  # `CREATE VIEW name (a, b) AS`: its columns' names

    def property(self, name: str) -> str | None:
        return dict(self.properties).get(name)


@dataclass(frozen=True)
class Script:
    """The parsed SQL: views in text order, and the text (for positions of nodes); the
    Python functions its views may call (`udfs.Udf`, or `udafs.Udaf` for an aggregate, by
    name: the spec's, `spec.plan_spec`)."""

    text: str
    views: list[View]
    udfs: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def at(self, node: exp.Expr) -> tuple[int, int]:
        """(line, column) of a node of one of the views' queries (0, 0 if unknown)."""
        for n in [node, *node.walk()]:
            meta = getattr(n, "meta", None) or {}
            if "start" in meta:
                return position(self.text, int(meta["start"]))
            inner = getattr(n, "this", None)
            meta = getattr(inner, "meta", None) or {}
            if "start" in meta:
                return position(self.text, int(meta["start"]))
        return 0, 0


def _blank_window_tables(text: str) -> str:
    text = _SESSION_PARTITION.sub(_partition_call, text)
    text = _WINDOW_TVF.sub(lambda m: m.group(1) + " " * len(m.group(2)) + m.group(3), text)
    return _SESSION_TVF.sub(lambda m: m.group(1) + SESSION_CALL + m.group(2), text)


def _partition_call(m: re.Match[str]) -> str:
    """`t PARTITION BY k` as `t,PARTITION_BY  (k)`: `k` keeps its place (a single name gains
    the closing parenthesis after it)."""
    table, gap, keys = m.group(1), m.group(2), m.group(3)
    if not keys.startswith("("):
        return f"{table},{PARTITION_CALL}{' ' * (len(gap) - 14)}({keys})"
    return f"{table},{PARTITION_CALL}{' ' * (len(gap) - 13)}{keys}"


def _statements(text: str) -> list[list[Token]]:
    """The tokens of each statement of `text` (split at semicolons outside strings and
    comments)."""
    try:
        tokens = Spark().tokenize(text)
    except (TokenError, SqlglotError) as e:
        raise SqlError([Problem(f"cannot read the SQL: {e}")]) from None
    statements: list[list[Token]] = [[]]
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            statements.append([])
        else:
            statements[-1].append(tok)
    return [s for s in statements if s]


def parse(text: str) -> Script:
    """The views of `text`. Raises SqlError naming every statement that is not a view
    definition or cannot be read, and views defined twice."""
    source = _blank_window_tables(text)
    problems: list[Problem] = []
    views: list[View] = []
    for tokens in _statements(source):
        line, col = position(text, tokens[0].start)
        header = _header(tokens, text)
        if header is None:
            problems.append(
                Problem("only CREATE VIEW name AS SELECT ... statements are allowed", line, col)
            )
            continue
        if isinstance(header, Problem):
            problems.append(header)
            continue
        name, body, properties = header.name, header.body, header.properties
        if not _NAME.match(name):
            problems.append(
                Problem("a view's name must be a plain name (letters, digits, _)", line, col)
            )
            continue
        end = tokens[-1].end + 1
        # Blanked before the query, newlines kept: sqlglot's lines, columns and offsets are
        # then the whole text's.
        padded = re.sub(r"[^\n]", " ", source[:body]) + source[body:end]
        try:
            query = sqlglot.parse_one(padded, read=_Spark)
        except ParseError as e:
            problems.append(_syntax(e, line, col))
            continue
        except SqlglotError as e:
            problems.append(Problem(f"syntax error: {e}", line, col))
            continue
        if not isinstance(query, exp.Query):
            problems.append(Problem(f"view {name!r}: AS must be followed by a query", line, col))
            continue
        if any(v.name == name for v in views):
            problems.append(Problem(f"view {name!r} is defined twice", line, col))
            continue
        views.append(View(name, query, line, col, properties, header.columns))
    if not views and not problems:
        problems.append(Problem("no view: write at least one CREATE VIEW name AS SELECT ..."))
    script = Script(text, views)
    for view in views:
        problems += grammar.check(view.query, script.at)
    if problems:
        raise SqlError(problems)
    return script


COMMA = "comma"  # a Join's meta key: the join was written with a comma (`FROM a, b`)


class _Spark(Spark):
    """Spark's dialect, marking the joins written with a comma: the parser reads `FROM a,
    b` as `a CROSS JOIN b`, but a comma binds less tightly than JOIN (`a, b FULL JOIN c`
    is `a, (b FULL JOIN c)`), so the planner must know which is which."""

    class Parser(Spark.Parser):  # type: ignore[valid-type,misc]
        def _parse_join(self, *args: Any, **kwargs: Any) -> exp.Join | None:
            comma = self._curr is not None and self._curr.token_type == TokenType.COMMA
            join: exp.Join | None = super()._parse_join(*args, **kwargs)
            if comma and join is not None:
                join.meta[COMMA] = True
            return join


@dataclass(frozen=True)
class _Header:
    name: str
    body: int  # where the query starts
    properties: tuple[tuple[str, str], ...]
    columns: tuple[str, ...]


def _header(tokens: list[Token], text: str) -> _Header | Problem | None:
    """What `CREATE VIEW name [(col, ...)] [WITH ('key' = 'value', ...)] AS` says; None if
    the statement is no view definition; a Problem naming a malformed column list or
    property."""
    words = [t.text.upper() for t in tokens[:3]]
    if len(tokens) < 5 or words[:2] != ["CREATE", "VIEW"]:
        return None
    name, at = tokens[2].text.lower(), 3
    columns: list[str] = []
    if tokens[at].token_type == TokenType.L_PAREN:
        at, got = _column_list(tokens, at + 1, text)
        if isinstance(got, Problem):
            return got
        columns = got
    properties: list[tuple[str, str]] = []
    if at < len(tokens) and tokens[at].text.upper() == "WITH":
        at, found = _properties(tokens, at + 1, text)
        if isinstance(found, Problem):
            return found
        properties = found
    if at + 1 >= len(tokens) or tokens[at].text.upper() != "AS":
        return None
    return _Header(name, tokens[at + 1].start, tuple(properties), tuple(columns))


def _column_list(tokens: list[Token], at: int, text: str) -> tuple[int, list[str] | Problem]:
    """The names of `(a, b, ...)` from `at` (after the parenthesis), and where the tokens
    after it start."""
    names: list[str] = []
    while at < len(tokens):
        tok = tokens[at]
        if tok.token_type not in (TokenType.VAR, TokenType.IDENTIFIER) or not _NAME.match(tok.text):
            break
        names.append(tok.text.lower())
        at += 1
        if at < len(tokens) and tokens[at].token_type == TokenType.COMMA:
            at += 1
        elif at < len(tokens) and tokens[at].token_type == TokenType.R_PAREN:
            return at + 1, names
        else:
            break
    line, col = position(text, tokens[min(at, len(tokens) - 1)].start)
    return at, Problem("a view's column list is written (name, name, ...)", line, col)


def _properties(
    tokens: list[Token], at: int, text: str
) -> tuple[int, list[tuple[str, str]] | Problem]:
    """The `('key' = 'value', ...)` list at `at`, and where the tokens after it start."""
    kinds = [t.token_type for t in tokens]
    out: list[tuple[str, str]] = []
    wanted = [TokenType.STRING, TokenType.EQ, TokenType.STRING]
    if at < len(kinds) and kinds[at] == TokenType.L_PAREN:
        at += 1
        while kinds[at : at + 3] == wanted:
            key, value = tokens[at].text, tokens[at + 2].text
            if key.lower() not in PROPERTIES:
                line, col = position(text, tokens[at].start)
                known = ", ".join(repr(p) for p in PROPERTIES)
                return at, Problem(f"unknown view property {key!r} (known: {known})", line, col)
            out.append((key.lower(), value))
            at += 3
            if at < len(kinds) and kinds[at] == TokenType.COMMA:
                at += 1
            elif at < len(kinds) and kinds[at] == TokenType.R_PAREN:
                return at + 1, out
            else:
                break
    line, col = position(text, tokens[min(at, len(tokens) - 1)].start)
    return at, Problem("view properties are written WITH ('name' = 'value', ...)", line, col)


def _syntax(e: ParseError, line: int, col: int) -> Problem:
    err = e.errors[0] if e.errors else {}
    line, end = int(err.get("line") or line), int(err.get("col") or col)
    highlight = str(err.get("highlight") or "")
    column = max(1, end - len(highlight) + 1) if highlight else end
    why = str(err.get("description") or e).split("\n")[0]
    missing = re.search(r"Required keyword: '(\w+)' missing for <class '[\w.]*\.(\w+)'>", why)
    if missing:
        why = f"incomplete {missing.group(2).upper()}"
    return Problem(f"syntax error: {why}", line, column)


__all__ = ["Script", "View", "parse"]
