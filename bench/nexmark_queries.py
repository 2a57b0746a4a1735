"""The Nexmark queries of docs/examples/nexmark/ as each system of `bench.nexmark` runs them.

Spindle runs the examples' SQL. Flink SQL reads the same text (Spindle's window table
functions are Flink's), except where Flink's dialect differs (below). Spark's streaming SQL
has no window table functions: the windowed queries are written with `window()` and
`session_window()`, the same queries in Spark's form. Every other view is the examples' own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from oracles.nexmark import PROCESSING_TIME
from pipeline_spec.datagen import DATAGEN_SCHEMAS
from pipeline_spec.model import FilesSource, PipelineSpec, parse_spec

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples" / "nexmark"
EVENTS_DDL = DATAGEN_SCHEMAS["nexmark"]

_HOP = "window(date_time, '10 seconds', '2 seconds')"
SPARK_VIEWS = {
    "q5": f"""SELECT c.auction, c.num FROM (
        SELECT auction, count(*) AS num, window.start AS starttime, window.end AS endtime
        FROM bid GROUP BY auction, {_HOP}
      ) c JOIN (
        SELECT max(n.num) AS maxn, n.starttime, n.endtime FROM (
          SELECT count(*) AS num, window.start AS starttime, window.end AS endtime
          FROM bid GROUP BY auction, {_HOP}
        ) n GROUP BY n.starttime, n.endtime
      ) m ON c.starttime = m.starttime AND c.endtime = m.endtime AND c.num >= m.maxn""",
    "q7": """SELECT b.auction, b.price, b.bidder, b.date_time, b.extra FROM bid b JOIN (
        SELECT max(price) AS maxprice, window.start AS window_start, window.end AS window_end
        FROM bid GROUP BY window(date_time, '10 seconds')
      ) b1 ON b.price = b1.maxprice
        AND b.date_time BETWEEN b1.window_start AND b1.window_end""",
    "q8": """SELECT p.id, p.name, p.starttime FROM (
        SELECT id, name, window.start AS starttime, window.end AS endtime
        FROM person GROUP BY id, name, window(date_time, '10 seconds')
      ) p JOIN (
        SELECT seller, window.start AS starttime, window.end AS endtime
        FROM auction GROUP BY seller, window(date_time, '10 seconds')
      ) a ON p.id = a.seller AND p.starttime = a.starttime AND p.endtime = a.endtime""",
    "q11": """SELECT bidder, count(*) AS bid_count, session_window.start AS starttime,
        session_window.end AS endtime
      FROM bid GROUP BY bidder, session_window(date_time, '10 seconds')""",
}

# Nexmark's count_char UDF (q14): Spindle runs the Python UDF of the example, as Flink's
# reference runs a Java one; the peers run the same count as built-ins (`extra` is never
# NULL, where the two would differ).
_BUILTIN_UDFS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"count_char\((\w+), '(.)'\)"), r"length(\1) - length(replace(\1, '\2', ''))"),
]

# Flink's AVG of a BIGINT is a BIGINT (truncated); LENGTH and SPLIT_PART are not Flink's
# (SPLIT_INDEX is NULL where SPLIT_PART is empty);
# `key`, `value` and `day` are reserved words in Flink SQL.
_FLINK_REPLACE: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    *_BUILTIN_UDFS,
    (re.compile(r"\bavg\((q\.final|price)\)", re.I), r"avg(CAST(\1 AS DOUBLE))"),
    (re.compile(r"\blength\(", re.I), "CHAR_LENGTH("),
    (
        re.compile(r"split_part\(url, '/', (\d)\)"),
        lambda m: f"COALESCE(SPLIT_INDEX(url, '/', {int(m.group(1)) - 1}), '')",
    ),
    (re.compile(r"\bs\.(key|value)\b"), r"s.`\1`"),
    (re.compile(r"\bAS day\b"), "AS `day`"),
]

_FLINK_TYPES = {"int": "INT", "bigint": "BIGINT", "string": "STRING", "timestamp": "TIMESTAMP(3)"}


@dataclass(frozen=True)
class Query:
    name: str
    spec: PipelineSpec
    views: list[tuple[str, str]]  # (name, SELECT text), in order; the query's view is last

    @property
    def lateness_s(self) -> float | None:
        """The events' lateness, for the windowed queries (None: no event time)."""
        et = self.spec.source.event_time
        return et.lateness if et is not None else None

    @property
    def side_input(self) -> Path | None:
        """q13's side table: a directory of CSV files (`key`, `value`) with a header."""
        for t in self.spec.tables[1:]:
            assert isinstance(t, FilesSource) and t.table == "side_input"
            return ROOT / t.path
        return None


def load(name: str) -> Query:
    """Query `name`'s example spec and its views' SQL text."""
    spec = parse_spec(yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text()))
    assert spec.sql is not None
    views = []
    for stmt in re.split(r";\s*(?=CREATE\s+VIEW)", spec.sql.strip().rstrip(";"), flags=re.I):
        m = re.match(r"\s*CREATE\s+VIEW\s+(\w+)\s+AS\s+(.*)$", stmt, re.I | re.S)
        assert m, f"{name}: not a view: {stmt[:60]}"
        views.append((m.group(1), m.group(2).strip()))
    return Query(name, spec, views)


def names() -> list[str]:
    """The queries the benchmark runs: not those over processing time (q12), whose rows
    depend on when each system took its steps, so no one oracle checks them all
    (tests/spindle_sql/test_nexmark.py checks Spindle's against its own logged times)."""
    every = (p.stem for p in EXAMPLES.glob("q*.yaml"))
    return sorted((n for n in every if n not in PROCESSING_TIME), key=lambda n: int(n[1:]))


def spark_statements(q: Query, checked: bool = False) -> list[str]:
    """Spark's statements; `checked`: for the run whose output is compared, where a windowed
    query's watermark must see the sentinel. Spark pushes the table views' `event_type = k`
    filters below the watermark (they do not name its column), so the sentinel would never
    move it and append mode would never emit the last windows; a conjunct naming `date_time`
    stays above it. The timed run is planned as Spark plans it."""
    out = []
    for view, text in q.views:
        text = SPARK_VIEWS.get(view, text) if view == q.name else text
        for pattern, repl in _BUILTIN_UDFS:
            text = pattern.sub(repl, text)
        if checked and q.lateness_s is not None:
            text = re.sub(r"event_type = (\d)", r"(event_type = \1 OR date_time IS NULL)", text)
        out.append(f"CREATE OR REPLACE TEMP VIEW {view} AS {text}")
    return out


def flink_statements(q: Query) -> list[str]:
    out = []
    for view, text in q.views:
        for pattern, repl in _FLINK_REPLACE:
            text = pattern.sub(repl, text)
        out.append(f"CREATE TEMPORARY VIEW {view} AS {text}")
    return out


def flink_events_ddl(path: str, lateness_s: float | None) -> str:
    cols = []
    for col in EVENTS_DDL.split(","):
        name, typ = col.split()
        cols.append(f"`{name}` {_FLINK_TYPES[typ]}")
    if lateness_s is not None:
        cols.append(f"WATERMARK FOR date_time AS date_time - INTERVAL '{lateness_s:g}' SECOND")
    return (
        f"CREATE TABLE events ({', '.join(cols)}) WITH ('connector' = 'filesystem', "
        f"'path' = '{path}', 'format' = 'json')"
    )


def flink_side_ddl(path: str) -> str:
    """q13's side table: its CSV file's header line is skipped as a parse error."""
    return (
        "CREATE TABLE side_input (`key` BIGINT, `value` STRING) WITH ("
        f"'connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv', "
        "'csv.ignore-parse-errors' = 'true')"
    )
