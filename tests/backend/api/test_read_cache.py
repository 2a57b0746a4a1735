"""The REST API: the read cache of the polled routes (`backend/api/read_cache.py`). Over a real
metadata database, each test on SQLite and on PostgreSQL; no Spark and no Celery (the TaskQueue
is a recording double), storage locations built with the engine itself (conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.api.read_cache import ReadCache
from backend.models import (
    Pipeline,
    PipelineState,
    Role,
)

from ..api_fixtures import (
    CLICKS,
    Api,
    clicks_spec,
    error,
    make_api,
    with_changes,
)

pytestmark = pytest.mark.timeout(120)


def test_polled_reads_show_outside_changes_after_the_cache_interval(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    listed = api.get("pipelines").json()
    assert [p["state"] for p in listed] == ["stopped"]
    one = api.get(f"pipelines/{CLICKS}").json()
    api.set_state(CLICKS, PipelineState.failed)  # as a worker would
    assert api.get("pipelines").json() == listed
    assert api.get(f"pipelines/{CLICKS}").json() == one
    api.now[0] += api.settings.read_cache_s - 0.01
    assert api.get("pipelines").json() == listed
    api.now[0] += 0.01
    assert [p["state"] for p in api.get("pipelines").json()] == ["failed"]
    assert api.get(f"pipelines/{CLICKS}").json()["state"] == "failed"


def test_a_write_through_the_api_shows_in_the_next_read(api: Api) -> None:
    assert api.get("pipelines").json() == []
    error(api.get(f"pipelines/{CLICKS}"), 404, "not_found")
    assert api.get(f"pipelines/{CLICKS}/checkpoints").status_code == 404
    api.create_pipeline(clicks_spec())
    assert [p["name"] for p in api.get("pipelines").json()] == [CLICKS]
    assert api.get(f"pipelines/{CLICKS}").json()["description"] == ""
    assert api.get(f"pipelines/{CLICKS}/checkpoints").json() == []
    r = api.put(f"pipelines/{CLICKS}", json={"spec": clicks_spec(), "description": "new"})
    assert r.status_code == 200, r.text
    assert api.get(f"pipelines/{CLICKS}").json()["description"] == "new"
    assert api.get("pipelines").json()[0]["description"] == "new"
    # Errors are never kept: a pipeline that appears outside the API is found at once.
    error(api.get("pipelines/other"), 404, "not_found")
    with api.db.session() as s:
        s.add(Pipeline(name="other", spec=with_changes(clicks_spec(), name="other")))
    assert api.get("pipelines/other").status_code == 200


def test_the_cache_checks_the_token_first_and_is_keyed_by_query(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    assert api.get("pipelines").status_code == 200
    error(api.get("pipelines", token=None), 401, "unauthorized")
    error(api.get("pipelines", token="spd_wrong"), 401, "unauthorized")
    viewer = api.token(Role.viewer)
    assert api.get("pipelines", token=viewer).json() == api.get("pipelines").json()
    assert api.get("pipelines?x=1").json() == api.get("pipelines").json()


def test_a_read_that_started_before_a_write_is_not_kept() -> None:
    cache = ReadCache(1.0, clock=lambda: 0.0)
    started = cache.generation
    cache.invalidate()  # a write committed while the read was running
    cache.put("k", b"old", started)
    assert cache.get("k") is None
    cache.put("k", b"new", cache.generation)
    assert cache.get("k") == b"new"


def test_a_zero_interval_turns_the_cache_off(db_url: str, tmp_path: Path) -> None:
    with make_api(db_url, tmp_path / "data", read_cache_s=0) as api:
        api.create_pipeline(clicks_spec())
        assert api.get(f"pipelines/{CLICKS}").json()["state"] == "stopped"
        api.set_state(CLICKS, PipelineState.failed)
        assert api.get(f"pipelines/{CLICKS}").json()["state"] == "failed"
