"""What a driver is started with: its spec's file paths resolved against the file roots, and
the control plane's Spark configuration (validated by its settings) in its environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from pydantic_settings import SettingsError

from backend.settings import Settings
from pipeline_spec.spark_conf import ENV, parse_spark_conf
from workers.jobs.launch import _absolute_paths, _env


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


def test_the_spark_conf_setting_is_validated_and_reaches_the_drivers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, '{"spark.executor.memory": "512m", "spark.executor.cores": 1}')
    settings = Settings(data_dir=tmp_path)
    assert settings.spark_conf == {"spark.executor.memory": "512m", "spark.executor.cores": "1"}
    env = _env(settings, {})
    assert parse_spark_conf(env[ENV]) == settings.spark_conf

    monkeypatch.setenv(ENV, '{"spark.executor.memory": "1g", "spark.app.name": "x"}')
    with pytest.raises(ValidationError, match=r"spark\.app\.name cannot be set here"):
        Settings(data_dir=tmp_path)
    monkeypatch.setenv(ENV, "{spark.executor.memory: 1g}")
    with pytest.raises(SettingsError, match="spark_conf"):
        Settings(data_dir=tmp_path)
    monkeypatch.delenv(ENV)
    assert json.loads(_env(Settings(data_dir=tmp_path), {})[ENV]) == {}
    given = Settings(data_dir=tmp_path, spark_conf={"spark.cores.max": 2})
    assert json.loads(_env(given, {})[ENV]) == {"spark.cores.max": "2"}
