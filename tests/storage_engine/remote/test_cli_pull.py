"""`spindle storage pull`: restore a location from the object store with the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from spindle_cli.main import app
from storage_engine import EngineSettings, StorageLocation
from storage_engine.objstore import ObjectStore, ObjectStoreSettings
from tests.storage_engine.test_location import INT, rows, state

runner = CliRunner()


@pytest.fixture
def env(s3_server: Any, s3_bucket: str, monkeypatch: pytest.MonkeyPatch) -> ObjectStore:
    settings = ObjectStoreSettings(
        endpoint=s3_server.endpoint,
        bucket=s3_bucket,
        prefix="cli",
        access_key=s3_server.access_key,
        secret_key=s3_server.secret_key,
    )
    for name in ("endpoint", "bucket", "prefix", "access_key"):
        monkeypatch.setenv(f"SPINDLE_S3_{name.upper()}", str(getattr(settings, name)))
    monkeypatch.setenv("SPINDLE_S3_SECRET_KEY", s3_server.secret_key)
    return ObjectStore(settings)


def _upload(tmp_path: Path, store: ObjectStore) -> str:
    with StorageLocation.open(
        str(tmp_path / "src"), fingerprint="fp", settings=EngineSettings(), remote=store
    ) as loc:
        loc.spine("op", INT).insert(rows(0, 3000))
        return loc.commit_async(identifier="v1", step=7).wait_remote(timeout=60)


def test_pull_restores_a_location(tmp_path: Path, env: ObjectStore) -> None:
    uid = _upload(tmp_path, env)
    res = runner.invoke(app, ["storage", "pull", str(tmp_path / "dst"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["checkpoint"]["uuid"] == uid and out["downloaded_bytes"] > 0
    with StorageLocation.open(str(tmp_path / "dst"), fingerprint="fp") as loc:
        assert loc.step == 7
        assert state(loc) == {(k, k % 3): 1 for k in range(3000)}
    # The offline tools see a clean location.
    assert runner.invoke(app, ["storage", "validate", str(tmp_path / "dst")]).exit_code == 0


def test_pull_errors_are_clear(
    tmp_path: Path, env: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = runner.invoke(app, ["storage", "pull", str(tmp_path / "dst")])
    assert res.exit_code == 1 and "holds no checkpoint" in res.output
    assert "Traceback" not in res.output
    _upload(tmp_path, env)
    res = runner.invoke(app, ["storage", "pull", str(tmp_path / "dst"), "--checkpoint", "nope"])
    assert res.exit_code == 1 and "no checkpoint 'nope'" in res.output
    monkeypatch.delenv("SPINDLE_S3_ENDPOINT")
    res = runner.invoke(app, ["storage", "pull", str(tmp_path / "x")])
    assert res.exit_code == 2 and "SPINDLE_S3_ENDPOINT" in res.output
