"""`GET .../views/{view}` of a running pipeline: answered by the run's driver
(`workers.runtime.view_server`, a real HTTP server over a real `ViewSink`) as of its newest
step, with key ranges and paging, the same rows a checkpoint of that step gives; the
newest checkpoint when the run is gone. Over a real metadata database (SQLite and
PostgreSQL); no Spark."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from backend.models import Pipeline, Run, RunState
from pipeline_spec.model import ViewSink as ViewSinkSpec
from storage_engine import StorageLocation
from storage_engine.schema import WEIGHT
from workers.runtime.connectors.view_sink import ViewSink
from workers.runtime.view_server import ViewServer

from ..api_fixtures import CLICKS, Api, clicks_spec, error

pytestmark = pytest.mark.timeout(120)
SCHEMA = pa.schema([("user", pa.int64()), ("clicks", pa.int64())])


def _delta(rows: list[tuple[int, int, int]]) -> pa.Table:
    cols = list(zip(*rows, strict=True)) if rows else [(), (), ()]
    return pa.table(
        {
            "user": pa.array(cols[0], pa.int64()),
            "clicks": pa.array(cols[1], pa.int64()),
            WEIGHT: pa.array(cols[2], pa.int64()),
        }
    )


class Driver:
    """A running run's view sink and its server, registered on the run as a driver's
    `opened` report does."""

    def __init__(self, api: Api, storage: Path) -> None:
        self.loc = StorageLocation.open(str(storage))
        self.sink = ViewSink(
            ViewSinkSpec(name="v", kind="view", **{"from": "per_user"}), SCHEMA, self.loc
        )
        self.sink.rollback(0)
        self.server = ViewServer({"v": self.sink})
        with api.db.session() as s:
            p = s.get(Pipeline, api.pipeline_id(CLICKS))
            assert p is not None
            run = Run(pipeline_id=p.id, number=1, state=RunState.running)
            run.views_url, run.views_secret = self.server.endpoint.url, self.server.endpoint.secret
            s.add(run)
            s.flush()
            self.run_id = run.id

    def close(self) -> None:
        self.server.close()
        self.loc.close()


@pytest.fixture
def driver(api: Api) -> Iterator[Driver]:
    api.create_pipeline(clicks_spec())
    d = Driver(api, api.storage(CLICKS))
    yield d
    d.close()


def test_a_running_pipeline_answers_from_its_newest_step(api: Api, driver: Driver) -> None:
    url = f"pipelines/{CLICKS}/views/v"
    got = api.get(url).json()
    assert got == {"view": "v", "step": 0, "checkpoint": None, "live": True, "rows": []}
    driver.sink.write(1, _delta([(1, 1, 1), (2, 1, 1), (3, 1, 1), (5, 1, 1)]))
    driver.sink.write(2, _delta([(1, 1, -1), (1, 2, 1), (4, 5, 1), (5, 1, -1)]))
    rows = [
        {"user": 1, "clicks": 2},
        {"user": 2, "clicks": 1},
        {"user": 3, "clicks": 1},
        {"user": 4, "clicks": 5},
    ]
    assert api.get(url).json() == {
        "view": "v",
        "step": 2,
        "checkpoint": None,
        "live": True,
        "rows": rows,
    }
    assert api.get(url, params={"key": "4"}).json()["rows"] == [rows[3]]
    assert api.get(url, params={"key": "5"}).json()["rows"] == []  # retracted
    assert api.get(url, params={"ge": "2", "lt": "4"}).json()["rows"] == rows[1:3]
    assert api.get(url, params={"ge": "3"}).json()["rows"] == rows[2:]
    assert api.get(url, params={"lt": "2"}).json()["rows"] == rows[:1]
    assert api.get(url, params={"key": "1", "ge": "2"}).json()["rows"] == rows[:1]
    assert api.get(url, params={"key": "1", "lt": "2"}).json()["rows"] == []
    assert api.get(url, params={"ge": "1", "limit": 2, "offset": 1}).json()["rows"] == rows[1:3]
    assert api.get(url, params={"offset": 3}).json()["rows"] == rows[3:]

    body = error(api.get(url, params={"key": "three"}), 422, "invalid_input")
    assert "column 'user'" in body["message"]
    body = error(api.get(url, params={"key": ["1", "2"], "ge": "0"}), 422, "invalid_input")
    assert "2 columns" in body["message"]

    # `as_of` reads checkpoints, live or not.
    uid = driver.loc.commit(step=2)
    by_checkpoint = api.get(url, params={"as_of": "latest"}).json()
    assert by_checkpoint == {"view": "v", "step": 2, "checkpoint": uid, "live": False, "rows": rows}


def test_live_and_checkpoint_reads_agree_on_random_ranges(api: Api, driver: Driver) -> None:
    """Steps of random inserts and retractions; after each, a commit, then random ranges
    read live and from the checkpoint of the same step: the same rows."""
    rng = random.Random(3)
    url = f"pipelines/{CLICKS}/views/v"
    held: dict[tuple[int, int], int] = {}
    for step in range(1, 7):
        changes: dict[tuple[int, int], int] = {}
        for _ in range(300):
            k = (rng.randrange(60), rng.randrange(5))
            w = -1 if held.get(k, 0) + changes.get(k, 0) > 0 and rng.random() < 0.4 else 1
            changes[k] = changes.get(k, 0) + w
        changes = {k: w for k, w in changes.items() if w}
        for k, w in changes.items():
            held[k] = held.get(k, 0) + w
        driver.sink.write(step, _delta([(*k, w) for k, w in sorted(changes.items())]))
        driver.loc.commit(step=step)
        for _ in range(15):
            params: dict[str, Any] = {"limit": 10_000}
            if rng.random() < 0.5:
                params["key"] = str(rng.randrange(60))
            lo, hi = sorted(rng.sample(range(70), 2))
            if rng.random() < 0.6:
                params["ge"] = str(lo if "key" not in params else lo % 6)
            if rng.random() < 0.6:
                params["lt"] = str(hi if "key" not in params else hi % 6 + 1)
            live = api.get(url, params=params).json()
            stored = api.get(url, params={**params, "as_of": "latest"}).json()
            assert (live["live"], live["step"], stored["step"]) == (True, step, step)
            assert live["rows"] == stored["rows"], params
    want = [{"user": u, "clicks": c} for (u, c), w in sorted(held.items()) if w > 0]
    assert api.get(url, params={"limit": 10_000}).json()["rows"] == want


def test_a_run_that_does_not_answer_falls_back_to_the_newest_checkpoint(
    api: Api, driver: Driver
) -> None:
    url = f"pipelines/{CLICKS}/views/v"
    driver.sink.write(1, _delta([(1, 1, 1)]))
    uid = driver.loc.commit(step=1)
    driver.sink.write(2, _delta([(2, 1, 1)]))
    assert api.get(url).json()["step"] == 2
    driver.server.close()  # the driver is ending
    got = api.get(url).json()
    assert (got["live"], got["step"], got["checkpoint"]) == (False, 1, uid)
    assert got["rows"] == [{"user": 1, "clicks": 1}]
    with api.db.session() as s:  # a run that ended is not asked
        run = s.get(Run, driver.run_id)
        assert run is not None
        run.state = RunState.stopped
    assert api.get(url).json()["live"] is False


def test_the_view_server_refuses_readers_without_the_runs_secret(driver: Driver) -> None:
    import httpx

    url = f"{driver.server.endpoint.url}/views/v"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = {"Authorization": f"Bearer {driver.server.endpoint.secret}"}
    assert httpx.get(url, headers=ok).status_code == 200
    assert httpx.get(f"{driver.server.endpoint.url}/views/nope", headers=ok).status_code == 404
    assert httpx.get(f"{url}?limit=x", headers=ok).status_code == 400
    assert httpx.get(f"{url}?ge=1&ge=2", headers=ok).status_code == 400


def test_a_running_pipelines_endpoint_is_kept_for_the_read_cache_interval() -> None:
    """Kept for `ttl_s` and while no write came through this process (the read cache's
    generation); a pipeline that does not run is never kept; `forget` drops it at once."""
    from backend.services.views import LiveEndpoint, LiveViews

    now = [0.0]
    live = LiveViews(1.0, clock=lambda: now[0])
    loads: list[str] = []
    at = LiveEndpoint(frozenset({"v"}), "http://127.0.0.1:9", "s" * 20)

    def load(got: LiveEndpoint | None) -> Any:
        return lambda: loads.append("db") or got

    assert live.endpoint("p", 0, load(at)) == at
    assert live.endpoint("p", 0, load(None)) == at and loads == ["db"]  # kept
    assert live.endpoint("p", 1, load(at)) == at and len(loads) == 2  # a write came
    now[0] = 1.5
    assert live.endpoint("p", 1, load(None)) is None and len(loads) == 3  # expired
    assert live.endpoint("p", 1, load(at)) == at and len(loads) == 4  # None was not kept
    live.forget("p")
    assert live.endpoint("p", 1, load(at)) == at and len(loads) == 5
    live.close()
