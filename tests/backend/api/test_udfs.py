"""The REST API and Python UDFs (issue 52): only admins register pipelines with `udfs`
(operators get a 403 naming the field, and nothing is stored), anyone may validate one, and
neither ever runs the module: a UDF whose module reads the server's environment and writes
a file at import leaves no file and no trace of the secret in the answer. A file module is
read inside the file roots only. Over a real metadata database, each test on SQLite and on
PostgreSQL (conftest.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backend.models import Role

from ..api_fixtures import Api, error, fields, log_spec

pytestmark = pytest.mark.timeout(120)

SQL = "CREATE VIEW shouted AS SELECT shout(CAST(bidder AS STRING)) AS who FROM input"


def _udf_spec(code: str | None = None, path: str | None = None) -> dict[str, Any]:
    spec = log_spec("shouting")
    spec.pop("state", None)
    spec.pop("transform", None)
    spec["sql"] = SQL
    spec["sinks"] = [{"name": "out", "kind": "view", "from": "shouted"}]
    module = {"code": code} if code is not None else {"path": path}
    spec["udfs"] = {
        **module,
        "functions": [{"name": "shout", "args": ["string"], "returns": "string"}],
    }
    return spec


def _spying(marker: Path) -> str:
    return (
        "import os\n"
        f"open({str(marker)!r}, 'w').write(os.environ.get('SPINDLE_ADMIN_TOKEN', 'none'))\n"
        "raise SystemExit('the API must never import this')\n\n"
        "def shout(s):\n"
        "    import pyarrow.compute as pc\n"
        "    return pc.utf8_upper(s)\n"
    )


def test_only_admins_register_pipelines_with_udfs(api: Api, tmp_path: Path) -> None:
    spec = _udf_spec("import pyarrow.compute as pc\n\ndef shout(s):\n    return pc.utf8_upper(s)\n")
    operator = api.token(Role.operator)
    body = error(api.post("pipelines", token=operator, json={"spec": spec}), 403, "forbidden")
    assert fields(body) == ["spec.udfs"] and "admin" in body["message"]
    assert api.get("pipelines").json() == []
    assert (
        api.post(
            "pipelines/validate", token=api.token(Role.viewer), json={"spec": spec}
        ).status_code
        == 200
    )
    api.create_pipeline(spec)
    # Nor may an operator put UDFs into an existing pipeline.
    plain = _udf_spec()
    plain.pop("udfs")
    plain["sql"] = "CREATE VIEW shouted AS SELECT upper(CAST(bidder AS STRING)) AS who FROM input"
    assert api.put("pipelines/shouting", token=operator, json={"spec": plain}).status_code == 200
    r = api.put("pipelines/shouting", token=operator, json={"spec": spec})
    assert fields(error(r, 403, "forbidden")) == ["spec.udfs"]


def test_validating_never_runs_the_module(api: Api, tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    spec = _udf_spec(_spying(marker))
    r = api.post("pipelines/validate", json={"spec": spec})
    assert r.status_code == 200, r.text
    api.create_pipeline(spec)
    assert api.admin not in r.text
    assert not marker.exists()


def test_a_module_file_is_read_inside_the_file_roots_and_never_run(api: Api) -> None:
    root = api.settings.roots[0]
    root.mkdir(parents=True, exist_ok=True)
    marker = root / "imported"
    (root / "shout.py").write_text(_spying(marker))
    assert (
        api.post("pipelines/validate", json={"spec": _udf_spec(path="shout.py")}).status_code == 200
    )
    assert not marker.exists()
    for path in ("../shout.py", "/etc/passwd.py"):
        body = error(
            api.post("pipelines/validate", json={"spec": _udf_spec(path=path)}), 422, "invalid_spec"
        )
        assert fields(body) == ["udfs.path"]
    (root / "broken.py").write_text("def shout(:\n")
    body = error(
        api.post("pipelines/validate", json={"spec": _udf_spec(path="broken.py")}),
        422,
        "invalid_spec",
    )
    assert fields(body) == ["udfs.path"] and "line 1" in body["errors"][0]["message"]
    body = error(
        api.post("pipelines/validate", json={"spec": _udf_spec(path="missing.py")}),
        422,
        "invalid_spec",
    )
    assert fields(body) == ["udfs.path"]


def test_bad_udf_declarations_name_their_fields(api: Api) -> None:
    spec = _udf_spec("def shout(s, t):\n    return s\n")
    spec["udfs"]["functions"].append({"name": "Bad Name", "args": ["text"], "returns": "string"})
    body = error(api.post("pipelines/validate", json={"spec": spec}), 422, "invalid_spec")
    assert sorted(fields(body)) == ["udfs.functions.1.args.0", "udfs.functions.1.name"]
    spec = _udf_spec("def shout(s, t):\n    return s\n")
    body = error(api.post("pipelines/validate", json={"spec": spec}), 422, "invalid_spec")
    assert fields(body) == ["udfs"] and "positional arguments" in body["errors"][0]["message"]
