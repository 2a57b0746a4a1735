"""The CLI's pure parts: SSE parsing, following a log tail, ingest chunking, durations,
profile resolution, the config file's permissions, SQL errors placed in the spec file, the
dataflow table's shards."""

from __future__ import annotations

import io
import re
import stat
from pathlib import Path

import pytest
import typer
from rich.console import Console

from spindle_cli import config, specfile, sse
from spindle_cli.commands.checkpoints import parse_duration
from spindle_cli.commands.data import Chunks, records
from spindle_cli.commands.observe import _dataflow_table, appended, skew


def test_sse_events_comments_multiline_and_ids() -> None:
    wire = [
        ": ping",
        "event: step",
        "id: 7",
        'data: {"step": 1}',
        "",
        "",
        "data: a",
        "data: b",
        "",
        "event: step",  # no data: dropped
        "",
        "event: step",
        "id: 9",
        "data:x",
    ]
    got = list(sse.parse(wire))
    assert got == [
        sse.Event("step", '{"step": 1}', "7"),
        sse.Event("message", "a\nb", "7"),
        sse.Event("step", "x", "9"),
    ]


def test_appended_lines_of_a_growing_tail() -> None:
    assert appended([], ["a", "b"]) == ["a", "b"]
    assert appended(["a", "b", "c"], ["a", "b", "c"]) == []
    assert appended(["a", "b", "c"], ["b", "c", "d", "e"]) == ["d", "e"]
    # The newest tail starts mid-line (tailing by bytes): still aligned.
    assert appended(["x 1", "x 2", "x 3"], [" 2", "x 3", "x 4"]) == ["x 4"]
    # Repeated lines: the longest overlap wins.
    assert appended(["a", "a"], ["a", "a", "a"]) == ["a"]
    # Nothing in common (rotated far past): everything is new.
    assert appended(["a", "b"], ["c", "d"]) == ["c", "d"]


def test_records_and_chunks_respect_the_limit_and_csv_quotes() -> None:
    body = b'h1,h2\n1,"two\nlines"\n\n3,4'
    recs = list(records(io.BytesIO(body), "csv"))
    assert [(r.line, r.data) for r in recs] == [
        (1, b"h1,h2\n"),
        (2, b'1,"two\nlines"\n'),
        (5, b"3,4\n"),
    ]
    nd = b"".join(b'{"i": %d}\n' % i for i in range(100))
    chunks = Chunks(records(io.BytesIO(nd), "ndjson"), b"", 100)
    sizes, seen = [], []
    while batch := chunks.take():
        sizes.append(sum(len(r.data) for r in batch))
        seen += [r.line for r in batch]
    assert max(sizes) <= 100 and seen == list(range(1, 101))
    # Put back after a rejected request: the same records come again, in order.
    chunks = Chunks(records(io.BytesIO(nd), "ndjson"), b"", 1000)
    first = chunks.take()
    chunks.limit = 50
    chunks.put_back(first)
    again = chunks.take()
    assert [r.line for r in again] == [1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="line 1"):
        Chunks(records(io.BytesIO(b"x" * 200 + b"\n"), "ndjson"), b"", 100).take()


def test_durations() -> None:
    assert parse_duration("90", "-") == 90
    assert parse_duration("500ms", "-") == 0.5
    assert parse_duration("10m", "-") == 600
    assert parse_duration("1.5h", "-") == 5400
    assert parse_duration("7d", "-") == 604800
    assert parse_duration("none", "-") is None
    for bad in ("", "-1s", "0", "5 weeks", "1y"):
        with pytest.raises(typer.BadParameter):
            parse_duration(bad, "-")


def test_resolution_order_and_file_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("SPINDLE_URL", "SPINDLE_TOKEN", "SPINDLE_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    path = tmp_path / "sub" / "config.yaml"
    monkeypatch.setenv("SPINDLE_CONFIG", str(path))
    assert config.resolve(None) == config.Target(config.DEFAULT_URL, None, None, "default", "none")
    cfg = config.load()
    cfg.profiles = {
        "a": config.Profile("http://a:1", "spd_aaaaaaaaaaaaaaaa"),
        "b": config.Profile("http://b:2/", "spd_bbbbbbbbbbbbbbbb"),
    }
    cfg.current = "a"
    cfg.save()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert config.resolve(None).url == "http://a:1"
    assert config.resolve("b").url == "http://b:2"
    monkeypatch.setenv("SPINDLE_PROFILE", "b")
    assert config.resolve(None).token == "spd_bbbbbbbbbbbbbbbb"
    assert config.resolve("a").token == "spd_aaaaaaaaaaaaaaaa"  # --profile beats the env
    monkeypatch.setenv("SPINDLE_TOKEN", "spd_env")
    monkeypatch.setenv("SPINDLE_URL", "http://env:3")
    t = config.resolve("a")
    assert (t.url, t.token, t.url_from, t.token_from) == (
        "http://env:3",
        "spd_env",
        "SPINDLE_URL",
        "SPINDLE_TOKEN",
    )
    with pytest.raises(config.ConfigError, match="no profile 'c'"):
        config.resolve("c")
    assert config.mask("spd_aaaaaaaaaaaaaaaa") == "spd_aaaa…"
    assert "aaaaaaaaaa" not in config.mask("spd_aaaaaaaaaaaaaaaa")


def test_an_sql_error_is_placed_in_the_spec_file(tmp_path: Path) -> None:
    """The planner's line and column in the `sql` text, as the file's: a literal block's
    lines are the file's, shifted by the lines above it and its indentation."""
    spec = tmp_path / "p.yaml"
    spec.write_text("# a comment\nname: p\nsql: |\n\n    CREATE VIEW v AS\n      SELECT x FROM t\n")
    f = specfile.read(str(spec))
    assert f.position("sql", "line 3, column 14: unknown column: x") == f"{spec}:6:18"
    assert f.position("spec.sql", "line 1, column 1: oops") == f"{spec}:4:5"
    assert f.position("name", "line 1, column 1: oops") is None
    assert f.position("sql", "unknown table: t") is None
    body = tmp_path / "body.yaml"
    body.write_text("spec:\n  name: p\n  sql: |\n    SELECT 1\n")
    assert specfile.read(str(body)).position("spec.sql", "line 1, column 8: x") == f"{body}:4:12"
    flow = tmp_path / "p.json"
    flow.write_text('{"name": "p", "sql": "CREATE VIEW v AS\\nSELECT x FROM t"}')
    assert specfile.read(str(flow)).position("sql", "line 2, column 8: x") is None


def _rendered(flow: dict[str, object]) -> list[list[str]]:
    con = Console(width=200, record=True, file=io.StringIO())
    con.print(_dataflow_table(flow, "t"))
    rows = []
    for line in con.export_text().splitlines():
        cells = [c.strip() for c in re.split("[│┃]", line)[1:-1]]
        if cells:
            rows.append(cells)
    return rows


def test_the_dataflow_shows_each_operator_shard_and_their_skew() -> None:
    def figures(rows: int, ms: float, state: int) -> dict[str, object]:
        return {"rows_in": rows, "rows_out": rows // 2, "step_ms": ms, "state_rows": state,
                "state_bytes": 1024 * state}  # fmt: skip

    shards = [{"shard": 0, **figures(90, 9.0, 30)}, {"shard": 1, **figures(10, 3.0, 30)}]
    flow = {
        "step": 7,
        "nodes": [
            {"id": "table:t", "kind": "table", "label": "t", "operator": None, "metrics": None},
            {"id": "v.agg0", "kind": "aggregate", "label": "group by k", "operator": "v.agg0",
             "metrics": {**figures(100, 12.0, 60), "shards": shards}},
            {"id": "w.agg0", "kind": "aggregate", "label": "group by m", "operator": "w.agg0",
             "metrics": {**figures(5, 1.0, 2), "shards": None}},
        ],
        "edges": [{"source": "table:t", "target": "v.agg0"},
                  {"source": "table:t", "target": "w.agg0"}],
    }  # fmt: skip
    rows = _rendered(flow)
    assert rows[0][:5] == ["node", "kind", "label", "reads", "rows in"]
    assert [r[0] for r in rows[1:]] == ["table:t", "v.agg0", "shard 0", "shard 1", "skew",
                                        "w.agg0"]  # fmt: skip
    assert rows[3] == ["shard 0", "shard", "-", "-", "90", "45", "9.0", "30", "30.0 KiB"]
    assert rows[4] == ["shard 1", "shard", "-", "-", "10", "5", "3.0", "30", "30.0 KiB"]
    # The largest shard over the shards' mean: 90 of 100 rows in two shards, even state.
    assert rows[5] == ["skew", "max/mean", "-", "-", "1.80x", "1.80x", "1.50x", "1.00x",
                       "1.00x"]  # fmt: skip
    assert rows[6][4:] == ["5", "2", "1.0", "2", "2.0 KiB"]


def test_skew() -> None:
    assert skew([1, 1, 1]) == "1.00x"
    assert skew([3, 0, 0]) == "3.00x"
    assert skew([0, 0]) == "-"
    assert skew([]) == "-"
    assert skew([None, 2]) == "1.00x"
