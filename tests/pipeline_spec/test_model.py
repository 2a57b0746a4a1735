"""The pipeline spec: valid examples load; invalid specs fail with every error's field path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline_spec.model import (
    PipelineSpec,
    SpecError,
    json_schema,
    load_spec,
    outside_roots,
    parse_spec,
)
from pipeline_spec.offsets import first_total, written_offsets

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "docs" / "examples").glob("*.yaml"))


def test_the_published_json_schema_is_current() -> None:
    published = (ROOT / "docs" / "pipeline-spec.schema.json").read_text()
    assert json.loads(published) == json.loads(json_schema()), (
        "regenerate: python -m pipeline_spec > docs/pipeline-spec.schema.json"
    )


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_is_valid(path: Path) -> None:
    spec = load_spec(path)
    assert isinstance(spec, PipelineSpec) and spec.name


def test_examples_cover_every_source_operator_and_sink_kind() -> None:
    specs = [load_spec(p) for p in EXAMPLES]
    assert {s.source.kind for s in specs} >= {"datagen", "files", "log", "kafka"}
    assert {op.kind for s in specs for op in s.state} >= {
        "aggregate",
        "window_aggregate",
        "distinct",
        "join",
    }
    assert {k.kind for s in specs for k in s.sinks} >= {
        "files",
        "postgres",
        "delta",
        "kafka",
        "view",
    }


def test_durations_and_defaults() -> None:
    spec = load_spec(
        """
name: p1
source: {kind: datagen}
state:
  - {name: w, kind: window_aggregate, time_column: ts, size: 1m, slide: 10s, lateness: 500ms,
     aggregates: [{name: n, func: count}]}
checkpoint: {every: 30s, async: false}
"""
    )
    w = spec.state[0]
    assert (w.size, w.slide, w.lateness) == (60.0, 10.0, 0.5)  # type: ignore[union-attr]
    assert spec.checkpoint.every == 30.0 and spec.checkpoint.asynchronous is False
    assert spec.checkpoint.every_steps == 10 and spec.trigger.interval == 1.0


def test_parallelism_defaults_to_one_and_needs_sql() -> None:
    sql = """
name: p1
source: {kind: datagen}
sql: CREATE VIEW v AS SELECT user, count(*) AS n FROM input GROUP BY user
sinks: [{name: out, kind: discard, from: v}]
"""
    assert load_spec(sql).parallelism == 1
    assert load_spec(sql + "parallelism: 4\n").parallelism == 4
    for bad in ("0", "257"):
        with pytest.raises(SpecError) as e:
            load_spec(sql + f"parallelism: {bad}\n")
        assert "parallelism" in str(e.value)
    with pytest.raises(SpecError) as e:
        load_spec(
            """
name: p1
source: {kind: datagen}
state: [{name: a, kind: aggregate, group_by: [user], aggregates: [{name: n, func: count}]}]
parallelism: 2
"""
        )
    assert "parallelism" in str(e.value)


def test_the_engine_memory_budget_takes_sizes_within_bounds() -> None:
    sql = """
name: p1
source: {kind: datagen}
sql: CREATE VIEW v AS SELECT user, count(*) AS n FROM input GROUP BY user
"""
    assert load_spec(sql).engine.memory_budget == 256 << 20
    for given, want in (("64MiB", 64 << 20), ("1GB", 10**9), ("8388608", 8 << 20)):
        assert load_spec(sql + f"engine: {{memory_budget: {given}}}\n").engine.memory_budget == want
    for bad in ("1MB", "2TiB", "lots", "-5"):
        with pytest.raises(SpecError) as e:
            load_spec(sql + f"engine: {{memory_budget: {bad}}}\n")
        assert "engine.memory_budget" in str(e.value)


def test_every_error_names_its_field() -> None:
    with pytest.raises(SpecError) as e:
        load_spec(
            """
name: Bad Name
source: {kind: files, path: /in}
state:
  - {name: a, kind: aggregate, aggregates: [{name: s, func: sum}]}
  - {name: a, kind: window_aggregate, time_column: ts, size: 10s, slide: 3s,
     aggregates: [{name: n, func: count}]}
sinks:
  - {name: out, kind: files, from: nowhere, path: /out}
checkpoint: {every: soon}
"""
        )
    paths = {p for p, _ in e.value.errors}
    assert "name" in paths
    assert "source.format" in paths
    assert "state.0.aggregates.0" in paths
    assert "state.1" in paths  # size not a multiple of slide
    assert "checkpoint.every" in paths
    text = str(e.value)
    assert "sum needs a column" in text and "whole multiple of slide" in text
    assert "not a duration like" in text


def test_cross_references_are_checked() -> None:
    with pytest.raises(SpecError, match=r"sinks.0.from: 'nowhere' is not an operator"):
        load_spec(
            """
name: p
source: {kind: datagen}
state: [{name: a, kind: distinct}]
sinks: [{name: out, kind: view, from: nowhere}]
"""
        )
    with pytest.raises(SpecError, match="operator names must be unique"):
        load_spec(
            "name: p\nsource: {kind: datagen}\n"
            "state: [{name: a, kind: distinct}, {name: a, kind: distinct}]"
        )


def test_not_a_mapping_or_not_yaml() -> None:
    with pytest.raises(SpecError, match="mapping"):
        load_spec("- just\n- a list\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec("name: [unclosed\n")


def test_input_tables_offsets_and_roots(tmp_path: Path) -> None:
    doc = {
        "name": "two",
        "source": {"kind": "datagen", "table": "a"},
        "tables": [{"kind": "files", "table": "b", "path": "../b", "format": "parquet"}],
        "sql": "CREATE VIEW v AS SELECT * FROM a",
    }
    spec = parse_spec(doc)
    assert [s.table for s in spec.input_sources()] == ["a", "b"]
    # A checkpoint of a one-source release holds `source_offset` only: it is `source`'s.
    assert spec.offsets({"source_offset": 7}) == {"a": 7, "b": 0}
    assert spec.offsets({"source_offset": 7, "source_offsets": {"a": 7, "b": 3}}) == {
        "a": 7,
        "b": 3,
    }
    assert spec.offsets({"source_offsets": {"b": 3}}) == {"a": 0, "b": 3}
    assert spec.offsets({}) == {"a": 0, "b": 0}
    assert spec.table_spec("b").source == spec.tables[1]
    root = tmp_path / "root"
    root.mkdir()
    assert outside_roots(spec, [root]) == [
        ("tables.0.path", f"must lie inside the configured file roots ({root})")
    ]


def test_a_postgres_table_sink_needs_key_columns_of_its_view() -> None:
    from spindle_sql.spec import plan_spec

    base = """
name: p
source: {kind: datagen, generator: clicks, table: clicks}
sql: CREATE VIEW per_user AS SELECT user, count(*) AS n FROM clicks GROUP BY user
sinks: [{name: pg, kind: postgres, from: per_user, dsn: "host=x", table: t%s}]
"""
    with pytest.raises(SpecError, match=r"sinks.0.*key: a table-mode sink needs"):
        load_spec(base % ", mode: table")
    with pytest.raises(SpecError, match=r"sinks.0.*key: only a table-mode sink"):
        load_spec(base % ", key: [user]")
    with pytest.raises(SpecError, match=r"sinks.0.key: 'usr' is not a column of view per_user"):
        plan_spec(load_spec(base % ", mode: table, key: [usr]"))
    spec = load_spec(base % ", mode: table, key: [user]")
    assert plan_spec(spec).views["per_user"].names == ("user", "n")


def test_a_delta_sink_path_must_lie_inside_the_file_roots(tmp_path: Path) -> None:
    spec = load_spec(
        f"""
name: p
source: {{kind: datagen, generator: clicks}}
sql: CREATE VIEW v AS SELECT user FROM input
sinks:
  - {{name: a, kind: delta, from: v, path: {tmp_path / "lake" / "a"}}}
  - {{name: b, kind: delta, from: v, path: /etc/lake, mode: table, key: [user]}}
"""
    )
    errors = outside_roots(spec, [tmp_path])
    assert [field for field, _ in errors] == ["sinks.1.path"]


def test_object_store_paths_must_lie_inside_the_object_roots(tmp_path: Path) -> None:
    def errors(path: str, roots: list[str], kind: str = "delta") -> list[tuple[str, str]]:
        spec = load_spec(
            f"""
name: p
source: {{kind: datagen, generator: clicks}}
sql: CREATE VIEW v AS SELECT user FROM input
sinks: [{{name: a, kind: {kind}, from: v, path: "{path}"}}]
"""
        )
        return outside_roots(spec, [tmp_path], roots)

    assert errors("s3://lake/spindle/t", ["s3://lake/spindle"]) == []
    assert errors("s3://lake/spindle/t", ["s3://lake/"]) == []
    assert errors("s3://lake/spindle/t", []) == [
        ("sinks.0.path", "must lie inside the configured object roots (none are configured)")
    ]
    for outside in (
        "s3://lake/spindlex/t",  # a prefix of a segment is not the segment
        "s3://lake/spindle/../checkpoints/t",
        "s3://lake/spindle//t",
        "s3://other/spindle/t",
        "s3://lake",
    ):
        assert [f for f, _ in errors(outside, ["s3://lake/spindle"])] == ["sinks.0.path"], outside
    assert errors("s3://lake/spindle/t", ["s3://lake/spindle"], kind="files") == [
        ("sinks.0.path", "an s3:// path is taken by files sources and delta sinks")
    ]
    # A files source reads an object-store prefix inside the object roots, and only there.
    source = "{kind: files, format: json, schema: {user: string}, path: '%s'}"
    for path, roots, expected in (
        ("s3://lake/spindle/in", ["s3://lake/spindle"], []),
        ("s3://lake/other/in", ["s3://lake/spindle"], ["source.path"]),
        ("s3://lake/spindle/../x", ["s3://lake/spindle"], ["source.path"]),
    ):
        spec = load_spec(f"name: p\nsource: {source % path}\nsql: CREATE VIEW v AS SELECT 1")
        assert [f for f, _ in outside_roots(spec, [tmp_path], roots)] == expected, path


def test_input_tables_are_one_list_and_specs_giving_source_still_load() -> None:
    """Specs of earlier releases give the first input table as `source`, the others in
    `tables`: they load as the one list the spec is now, with their errors still named by
    the fields they were written with."""
    a = {"kind": "datagen", "table": "a"}
    b = {"kind": "files", "table": "b", "path": "b", "format": "parquet"}
    common = {"name": "two", "sql": "CREATE VIEW v AS SELECT * FROM a"}
    listed = parse_spec({**common, "tables": [a, b]})
    written_before = parse_spec({**common, "source": a, "tables": [b]})
    assert [s.table for s in listed.tables] == ["a", "b"]
    assert listed.model_dump() == written_before.model_dump()
    assert listed.source == written_before.source == listed.tables[0]
    assert [f for f, _ in listed.input_fields()] == ["tables.0", "tables.1"]
    assert [f for f, _ in written_before.input_fields()] == ["source", "tables.0"]
    assert parse_spec({"name": "one", "source": a, "state": [{"name": "d", "kind": "distinct"}]})

    bad = {**b, "max_files_per_step": 0}
    with pytest.raises(SpecError) as listed_error:
        parse_spec({**common, "tables": [a, bad]})
    assert [f for f, _ in listed_error.value.errors] == ["tables.1.max_files_per_step"]
    with pytest.raises(SpecError) as before_error:
        parse_spec({**common, "source": bad, "tables": [a]})
    assert [f for f, _ in before_error.value.errors] == ["source.max_files_per_step"]
    with pytest.raises(SpecError, match="at least 1"):
        parse_spec({**common, "tables": []})


def test_the_json_schema_takes_both_ways_of_giving_input_tables() -> None:
    schema = json.loads(json_schema())
    assert "tables" in schema["properties"] and schema["properties"]["source"]["deprecated"]
    assert {"properties": {"tables": True}, "required": ["tables"]} in schema["anyOf"]
    assert {"properties": {"source": True}, "required": ["source"]} in schema["anyOf"]
    assert "source" not in schema["required"] and "tables" not in schema["required"]


def test_a_checkpoints_offsets_are_read_in_either_form() -> None:
    """Checkpoints hold every table's offset (`source_offsets`); those of one-source releases
    the first table's only (`source_offset`), which the first table's name places."""
    asked: list[str] = []

    def first() -> str:
        asked.append("first")
        return "orders"

    assert written_offsets({"source_offsets": {"orders": 3, "x": 1}}, first) == {
        "orders": 3,
        "x": 1,
    }
    assert written_offsets({"source_offset": 3, "source_offsets": {"orders": 3}}, first) == {
        "orders": 3
    }
    assert asked == []  # the name is needed only for a checkpoint of a one-source release
    assert written_offsets({"source_offset": 7}, first) == {"orders": 7}
    assert written_offsets({"source_offset": 7}, lambda: None) is None  # cannot be placed
    assert written_offsets({"pipeline": "p"}, first) is None
    kafka = {"orders": {"t:0": 3, "t:1": 4}, "x": 1}
    spec = parse_spec(
        {
            "name": "k",
            "tables": [
                {"kind": "kafka", "table": "orders", "bootstrap_servers": "b:9092",
                 "topics": ["t"], "schema": {"a": "int"}},
                {"kind": "datagen", "table": "x"},
            ],
            "sql": "CREATE VIEW v AS SELECT * FROM x",
        }
    )  # fmt: skip
    assert spec.offsets({"source_offsets": kafka}) == kafka
    assert spec.offsets({"source_offset": 7}) == {"orders": {}, "x": 0}  # no partition's
    # One number for the first table, as the API shows it: a Kafka table's partitions summed.
    assert [first_total(o) for o in (kafka, {"x": 5}, {}, None, {"x": "5"})] == [
        7,
        5,
        None,
        None,
        None,
    ]


def test_every_kinds_union_tag_is_left_out_of_error_paths() -> None:
    doc = {
        "name": "p",
        "tables": [{"kind": "datagen"}],
        "sql": "CREATE VIEW v AS SELECT * FROM input",
        "sinks": [
            {"name": "d", "kind": "delta", "from": "v", "path": ""},
            {"name": "e", "kind": "discard", "from": "v", "bogus": 1},
        ],
    }
    with pytest.raises(SpecError) as e:
        parse_spec(doc)
    assert [f for f, _ in e.value.errors] == ["sinks.0.path", "sinks.1.bogus"]


def test_what_each_kind_answers_without_being_asked_its_kind() -> None:
    spec = parse_spec(
        {
            "name": "p",
            "source": {"kind": "log", "stream": "bids", "schema": {"a": "bigint"}},
            "tables": [
                {"kind": "files", "table": "f", "path": "in", "format": "csv",
                 "schema": {"b": "string"}},
                {"kind": "datagen", "table": "g"},
                {"kind": "log", "table": "l", "stream": "more", "schema": {"c": "int"}},
                {"kind": "files", "table": "p", "path": "s3://lake/in", "format": "parquet"},
            ],
            "sql": "CREATE VIEW v AS SELECT * FROM f",
            "sinks": [
                {"name": "out", "kind": "files", "from": "v", "path": "out"},
                {"name": "seen", "kind": "view", "from": "v"},
                {"name": "lake", "kind": "delta", "from": "v", "path": "s3://lake/v",
                 "mode": "table", "key": ["b"]},
            ],
        }
    )  # fmt: skip
    assert [(t.table, t.stream) for t in spec.input_logs()] == [("input", "bids"), ("l", "more")]
    assert spec.input_logs()[0].log_dir("/s") == "/s/input-log/bids"
    assert spec.readable_views() == ["seen"]
    assert [(loc, path, part.object_paths) for loc, part, path in spec.file_paths()] == [
        (("tables", 0), "in", True),
        (("tables", 3), "s3://lake/in", True),
        (("sinks", 0), "out", False),
        (("sinks", 2), "s3://lake/v", True),
    ]
    assert [t.columns() for t in spec.tables] == [
        {"a": "bigint"},
        {"b": "string"},
        {"ts": "timestamp", "user": "string", "page": "string", "amount": "double"},
        {"c": "int"},
        None,
    ]
    assert [s.key_columns() for s in spec.sinks] == [[], [], ["b"]]


@pytest.mark.parametrize(
    ("op", "repeated"),
    [
        ("{name: a, kind: aggregate, group_by: [user], aggregates: "
         "[{name: n, func: count}, {name: n, func: sum, column: amount}]}", "n"),
        ("{name: a, kind: aggregate, group_by: [user], aggregates: [{name: user, func: count}]}",
         "user"),
        ("{name: w, kind: window_aggregate, time_column: ts, size: 10s, "
         "aggregates: [{name: window_end, func: count}]}", "window_end"),
        ("{name: d, kind: distinct, columns: [user, user]}", "user"),
    ],
)  # fmt: skip
def test_an_operator_naming_an_output_column_twice_is_refused_before_start(
    op: str, repeated: str
) -> None:
    """The dataflow would refuse it when the run starts; create and validate refuse it."""
    with pytest.raises(SpecError) as e:
        load_spec(f"name: p1\nsource: {{kind: datagen}}\nstate: [{op}]\n")
    assert e.value.errors == [
        ("state.0", f"output columns must be unique, repeated: ['{repeated}']")
    ]
