"""The REST API: spec validation: every bad field named, expressions and paths refused. Over a real
metadata database, each test on SQLite and on PostgreSQL; no Spark and no Celery (the TaskQueue
is a recording double), storage locations built with the engine itself (conftest.py)."""

from __future__ import annotations

import json
import os

import pytest

from ..api_fixtures import (
    CLICKS,
    Api,
    clicks_spec,
    error,
    example,
    fields,
    log_spec,
)

pytestmark = pytest.mark.timeout(120)


def test_validate_names_every_bad_field(api: Api) -> None:
    spec = clicks_spec()
    del spec["source"]
    spec["state"][0]["group_by"] = "user"
    spec["bogus"] = 1
    body = error(api.post("pipelines/validate", json={"spec": spec}), 422, "invalid_spec")
    assert sorted(fields(body)) == ["bogus", "state.0.group_by", "tables"]
    # Creating with the same spec fails the same way and creates nothing.
    r = api.post("pipelines", json={"spec": spec})
    assert fields(error(r, 422, "invalid_spec")) == fields(body)
    assert api.get("pipelines").json() == []
    ok = api.post("pipelines/validate", json={"spec": clicks_spec()})
    assert ok.status_code == 200 and ok.json() == {"valid": True, "name": CLICKS}
    # The envelope itself is checked too.
    body = error(api.post("pipelines/validate", json={"spek": {}}), 422, "invalid_request")
    assert "spec" in fields(body) and "spek" in fields(body)


def test_out_of_range_numbers_and_nul_paths_are_422s_naming_the_field(api: Api) -> None:
    """Each of these was a 500 (NUL byte in a path; an integer past SQLite's) or was stored
    as a spec the API could not hand back (1e999 read back as null)."""
    api.create_pipeline(clicks_spec())
    cases: list[tuple[str, str, str]] = [
        ('"keep_last": 5', f'"keep_last": {2**64}', "retention.keep_last"),
        ('"rows_per_second": 20000', '"rows_per_second": 1e999', "source.rows_per_second"),
        ('"rows_per_second": 20000', '"rows_per_second": Infinity', "source.rows_per_second"),
        ('"interval": "500ms"', '"interval": NaN', "trigger.interval"),
        ('"seed": 7', f'"seed": {2**70}', "source.seed"),
        ('"path": "out/clicks-per-user"', '"path": "out/a\\u0000b"', "sinks.0.path"),
    ]
    for old, new, field in cases:
        text = json.dumps({"spec": clicks_spec()})
        assert old in text, old
        body = text.replace(old, new).encode()
        for method, url in [
            ("POST", "pipelines/validate"),
            ("POST", "pipelines"),
            ("PUT", f"pipelines/{CLICKS}"),
        ]:
            r = api.request(
                method, url, "admin", content=body, headers={"Content-Type": "application/json"}
            )
            assert fields(error(r, 422, "invalid_spec")) == [field], (new, url)
    # What GET returns can be PUT back.
    spec = api.get(f"pipelines/{CLICKS}").json()["spec"]
    assert api.put(f"pipelines/{CLICKS}", json={"spec": spec}).status_code == 200


def test_a_body_that_is_not_utf8_json_is_a_422(api: Api) -> None:
    for body in (b'{"spec": "\xff"}', b"\xfe\xff", b"{not json"):
        r = api.request(
            "POST", "pipelines", "admin", content=body, headers={"Content-Type": "application/json"}
        )
        assert error(r, 422, "invalid_request")["errors"][0]["field"] == "(body)", body


def test_expressions_that_reach_the_jvm_are_refused(api: Api) -> None:
    spec = clicks_spec()
    leak = "reflect('java.lang.System','getenv','SPINDLE_S3_SECRET_KEY') AS leak"
    spec["transform"]["select"] = ["user", leak]
    for url in ("pipelines/validate", "pipelines"):
        body = error(api.post(url, json={"spec": spec}), 422, "invalid_spec")
        assert fields(body) == ["transform.select.1"]
        assert "'reflect' is not allowed" in body["errors"][0]["message"]
    assert api.get("pipelines").json() == []


PATHS = [
    ("/etc", False),
    ("../outside", False),
    ("data/../../outside", False),
    ("link-to-etc/passwd-dir", False),  # a symlink inside the root, pointing out
    ("data/orders", True),
    ("{root}/data/orders", True),
    ("data/./orders/../orders", True),
]


def test_files_paths_stay_inside_the_roots(api: Api) -> None:
    root = api.settings.roots[0]
    root.mkdir(parents=True, exist_ok=True)
    os.symlink("/etc", root / "link-to-etc")
    for path, accepted in PATHS:
        spec = example("orders-from-files")
        spec["source"]["path"] = path.format(root=root)
        r = api.post("pipelines/validate", json={"spec": spec})
        if accepted:
            assert r.status_code == 200, (path, r.text)
        else:
            assert fields(error(r, 422, "invalid_spec")) == ["source.path"], path


def test_files_sink_path_outside_the_roots(api: Api) -> None:
    spec = clicks_spec()
    spec["sinks"][0]["path"] = "/tmp/elsewhere"
    body = error(api.post("pipelines/validate", json={"spec": spec}), 422, "invalid_spec")
    assert fields(body) == ["sinks.0.path"]


def test_a_delta_sink_on_s3_needs_an_object_root(api: Api) -> None:
    """`s3://` paths are the object roots' (`SPINDLE_OBJECT_ROOTS`): none by default, so a
    spec cannot write to a bucket the object store's credentials reach (its checkpoints)."""
    spec = clicks_spec()
    spec["sinks"] = [{"name": "lake", "kind": "delta", "from": "per_user", "path": "s3://b/x/t"}]
    body = error(api.post("pipelines/validate", json={"spec": spec}), 422, "invalid_spec")
    assert fields(body) == ["sinks.0.path"]
    assert "object roots (none are configured)" in body["errors"][0]["message"]
    api.settings.object_roots = ["s3://b/x"]
    assert api.post("pipelines/validate", json={"spec": spec}).status_code == 200
    spec["sinks"][0]["path"] = "s3://b/x/../pipelines/t"
    assert fields(
        error(api.post("pipelines/validate", json={"spec": spec}), 422, "invalid_spec")
    ) == ["sinks.0.path"]


def test_log_source_unsupported_type_names_the_schema_field(api: Api) -> None:
    spec = log_spec()
    spec["source"]["schema"]["extra"] = "map<string,int>"
    body = error(api.post("pipelines/validate", json={"spec": spec}), 422, "invalid_spec")
    assert len(body["errors"]) == 1
    assert "map<string,int>" in body["errors"][0]["message"]
    assert body["errors"][0]["field"] in ("source.schema", "source.schema.extra")


def test_sql_is_planned_at_validation_with_the_line_and_column_of_each_mistake(
    api: Api,
) -> None:
    spec = clicks_spec()
    del spec["state"], spec["transform"]
    spec["source"]["table"] = "clicks"
    spec["sql"] = (
        "CREATE VIEW per_page AS\n"
        "  SELECT page, count(*) AS n FROM clicks GROUP BY pag;\n"
        "CREATE VIEW top AS SELECT page FROM per_page WHERE n > 10"
    )
    spec["sinks"] = [{"name": "out", "kind": "view", "from": "top"}]
    body = error(api.post("pipelines/validate", json={"spec": spec}), 422, "invalid_spec")
    assert [(e["field"], e["message"]) for e in body["errors"]] == [
        ("sql", "line 2, column 51: unknown column: pag")
    ]
    spec["sql"] = spec["sql"].replace("BY pag", "BY page")
    ok = api.post("pipelines/validate", json={"spec": spec})
    assert ok.status_code == 200, ok.text
    spec["sinks"][0]["from"] = "nope"
    body = error(api.post("pipelines", json={"spec": spec}), 422, "invalid_spec")
    assert fields(body) == ["sinks.0.from"]
