"""The spec a driver is started with: its file paths resolved against the file roots."""

from __future__ import annotations

from pathlib import Path

from workers.jobs.launch import _absolute_paths


def test_every_file_path_is_resolved_as_the_spec_gives_it(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "in").mkdir(parents=True)
    (root / "link").symlink_to(root / "in")
    files = {"kind": "files", "format": "json", "schema": {"a": "int"}}
    spec = {
        "name": "p",
        "source": {**files, "table": "a", "path": "in"},
        "tables": [
            {**files, "table": "b", "path": "link"},
            {**files, "table": "c", "path": "s3://lake/in"},
            {"kind": "datagen", "table": "d"},
        ],
        "sql": "CREATE VIEW v AS SELECT * FROM a",
        "sinks": [
            {"name": "f", "kind": "files", "from": "v", "path": "out"},
            {"name": "l", "kind": "delta", "from": "v", "path": "s3://lake/v"},
            {"name": "w", "kind": "view", "from": "v"},
            {"name": "x", "kind": "files", "from": "v", "path": "../outside"},
        ],
    }
    got = _absolute_paths(spec, [root])
    assert got["source"]["path"] == str(root / "in")
    assert [t.get("path") for t in got["tables"]] == [str(root / "in"), "s3://lake/in", None]
    assert [s.get("path") for s in got["sinks"]] == [
        str(root / "out"),
        "s3://lake/v",
        None,
        "../outside",  # outside the roots: the driver refuses it, naming the field
    ]
    assert spec["source"]["path"] == "in"  # the stored spec is left as it is
    # A spec that does not validate goes to the driver as it is, for it to name the errors.
    bad = {**spec, "name": "Not A Name"}
    assert _absolute_paths(bad, [root]) == bad
