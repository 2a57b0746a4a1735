"""Every SQL mistake is refused before anything runs, with a message naming what is wrong and
the line and column where it is."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spindle_sql import SqlError, compile_views

TABLES = {
    "bid": pa.schema(
        [
            ("auction", pa.int64()),
            ("bidder", pa.int64()),
            ("price", pa.int64()),
            ("channel", pa.string()),
            ("date_time", pa.timestamp("us", tz="UTC")),
        ]
    ),
    "person": pa.schema([("id", pa.int64()), ("name", pa.string()), ("state", pa.string())]),
}


def problem(text: str) -> tuple[str, int, int]:
    with pytest.raises(SqlError) as e:
        compile_views(text, TABLES)
    first = e.value.problems[0]
    return first.message, first.line, first.column


@pytest.mark.parametrize(
    ("text", "message", "line", "column"),
    [
        (
            "CREATE VIEW v AS\nSELECT auction, prise FROM bid",
            "unknown column: prise",
            2,
            17,
        ),
        (
            "CREATE VIEW v AS SELECT x FROM bids",
            "unknown table or view 'bids' (known: bid, person)",
            1,
            32,
        ),
        (
            "CREATE VIEW v AS SELECT auction, count(*) AS n FROM bid GROUP BY bidder",
            "not in GROUP BY and not aggregated: auction",
            1,
            25,
        ),
        (
            "CREATE VIEW v AS SELECT auction, count(*) AS n FROM bid GROUP BY 3",
            "GROUP BY 3: a position in the select list is 1 to 2",
            1,
            66,
        ),
        (
            "CREATE VIEW v AS SELECT id FROM bid JOIN person ON bidder = id\n"
            "CREATE VIEW w AS SELECT 1",
            "syntax error",
            2,
            1,
        ),
        (
            "CREATE VIEW v AS SELECT auction FROM bid ORDER BY auction",
            "ORDER is not supported in a view",
            1,
            51,
        ),
        (
            "CREATE VIEW v AS SELECT upper(price) AS p FROM bid",
            "upper",
            1,
            25,
        ),
        (
            "CREATE VIEW v AS SELECT b.auction FROM bid b JOIN bid c ON b.auction = c.auction "
            "WHERE auction > 1",
            "ambiguous column auction",
            1,
            88,
        ),
        ("DROP TABLE bid", "only CREATE VIEW", 1, 1),
        ("CREATE VIEW bid AS SELECT 1 AS x FROM person", "has the name of a table", 1, 1),
        (
            "CREATE VIEW v AS SELECT price, price FROM bid",
            "several columns named price",
            1,
            1,
        ),
        (
            "CREATE VIEW v AS SELECT auction FROM bid WHERE price",
            "WHERE needs a boolean condition",
            1,
            48,
        ),
        (
            "CREATE VIEW v AS SELECT java_method('java.lang.System', 'getenv') AS x FROM bid",
            "not supported in views",
            1,
            25,
        ),
        (
            "CREATE VIEW v AS SELECT * FROM\n"
            "  TABLE(SESSION(TABLE bid PARTITION BY bidr, DESCRIPTOR(date_time), "
            "INTERVAL '1' SECOND))",
            "unknown column: bidr",
            2,
            40,
        ),
        (
            "CREATE VIEW v AS SELECT * FROM\n"
            "  TABLE(SESSION(TABLE bid PARTITION BY (bidder, chanel), DESCRIPTOR(date_time), "
            "INTERVAL '1' SECOND))",
            "unknown column: chanel",
            2,
            49,
        ),
        (
            "CREATE VIEW v AS SELECT * FROM TABLE(SESSION(TABLE bid, DESCRIPTOR(price), "
            "INTERVAL '1' SECOND))",
            "price is int64, not a timestamp",
            1,
            38,
        ),
        (
            "CREATE VIEW v AS SELECT date_format(date_time, 'EEE HH') FROM bid",
            "date_format: pattern 'EEE' is not supported",
            1,
            25,
        ),
        (
            "CREATE VIEW v AS\nSELECT date_format(date_time, channel) FROM bid",
            "date_format: the format must be a constant string",
            2,
            8,
        ),
        (
            "CREATE VIEW v AS SELECT * FROM TABLE(SESSION(TABLE bid, DESCRIPTOR(date_time)))",
            "SESSION takes a table, a time column and a gap",
            1,
            38,
        ),
        (
            "CREATE VIEW v AS SELECT sum(price) OVER (PARTITION BY bidder ORDER BY date_time "
            "RANGE BETWEEN 3 PRECEDING AND CURRENT ROW) FROM bid",
            "the RANGE frame's offset: expected an interval",
            1,
            25,
        ),
        (
            "CREATE VIEW v AS SELECT sum(price) OVER (ORDER BY date_time "
            "RANGE BETWEEN INTERVAL '1' MONTH PRECEDING AND CURRENT ROW) FROM bid",
            "a RANGE frame's INTERVAL must have a fixed length, not months",
            1,
            25,
        ),
        (
            "CREATE VIEW v AS SELECT sum(price) OVER (ORDER BY auction, date_time "
            "RANGE BETWEEN 2 PRECEDING AND CURRENT ROW) FROM bid",
            "a RANGE frame with an offset needs ORDER BY one column",
            1,
            25,
        ),
        (
            "CREATE VIEW v AS SELECT sum(price) OVER (ORDER BY channel "
            "RANGE BETWEEN 2 PRECEDING AND CURRENT ROW) FROM bid",
            "a RANGE frame with an offset orders by an integer, floating, date or timestamp "
            "column, not string",
            1,
            25,
        ),
        (
            "CREATE VIEW v AS\nSELECT auction, RANK() OVER (PARTITION BY bidder) FROM bid",
            "RANK() OVER (...) needs ORDER BY",
            2,
            17,
        ),
        (
            "CREATE VIEW v AS SELECT lag(price) OVER (ORDER BY date_time "
            "ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM bid",
            "LAG(PRICE) takes no frame",
            1,
            25,
        ),
        (
            "CREATE VIEW v AS SELECT lag(price, auction) OVER (ORDER BY date_time) FROM bid",
            "the offset must be an integer literal",
            1,
            25,
        ),
        (
            "CREATE VIEW v AS SELECT lead(price, 1, 'none') OVER (ORDER BY date_time) FROM bid",
            "the default must be of type int64",
            1,
            25,
        ),
        (
            "CREATE VIEW v AS SELECT sum(price) OVER (ORDER BY date_time "
            "ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) FROM bid",
            "the frame must end at the current row",
            1,
            25,
        ),
        (
            "CREATE VIEW v AS SELECT max(channel) OVER (ORDER BY date_time ROWS 2 PRECEDING) "
            "FROM bid",
            "max OVER a window of rows of string is not supported",
            1,
            25,
        ),
        (
            "CREATE VIEW v AS SELECT auction, count(*) AS n,\n"
            "  sum(price) OVER (ORDER BY date_time ROWS 2 PRECEDING) FROM bid GROUP BY auction",
            "an aggregate OVER a window goes alone in its SELECT, without GROUP BY",
            2,
            3,
        ),
    ],
)
def test_mistakes_are_named_at_their_place(text: str, message: str, line: int, column: int) -> None:
    got, at_line, at_column = problem(text)
    assert message in got
    assert (at_line, at_column) == (line, column), got


def test_every_views_problem_is_reported() -> None:
    with pytest.raises(SqlError) as e:
        compile_views(
            "CREATE VIEW a AS SELECT nope FROM bid;\nCREATE VIEW b AS SELECT name FROM persons",
            TABLES,
        )
    assert [(p.line, p.column) for p in e.value.problems] == [(1, 25), (2, 35)]


def test_a_view_reads_a_view_defined_before_it() -> None:
    views = compile_views(
        "CREATE VIEW a AS SELECT auction, count(*) AS n FROM bid GROUP BY auction;\n"
        "CREATE VIEW b AS SELECT auction FROM a WHERE n > 3",
        TABLES,
    )
    assert list(views) == ["a", "b"]
    assert views["b"].names == ("auction",)
    assert views["b"].root.schema.field(0).type == pa.int64()
