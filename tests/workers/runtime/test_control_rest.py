"""The driver's control plane over the REST API (workers/runtime/control_rest.py) against the
real API app served over HTTP, driving a real pipeline on Spark: the run opens, its steps show in
the API, a commit asked through the API is claimed, performed and mirrored, a pause and a stop
reach the driver, and once the run has ended its token no longer works."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from pyspark.sql import SparkSession
from sqlalchemy import select

from backend.models import Run
from backend.services import lifecycle
from pipeline_spec.exits import EXIT_STOPPED
from pipeline_spec.model import parse_spec
from workers.jobs import launch
from workers.runtime import control_rest
from workers.runtime.control import JobControl
from workers.runtime.control_plane import Report
from workers.runtime.run_builder import open_runner

from ...backend.api_fixtures import Api, clicks_spec, make_api, sqlite_url
from ...polling import wait_until


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Api, str]]:
    """The API app over a fresh database, served over HTTP on a free port: (the app's test
    handle, its URL)."""
    with make_api(sqlite_url(tmp_path / "spindle.db"), tmp_path / "data") as api:
        server = uvicorn.Server(
            uvicorn.Config(api.app, host="127.0.0.1", port=0, log_level="warning")
        )
        thread = threading.Thread(target=server.run, name="api", daemon=True)
        thread.start()
        wait_until(lambda: server.started, 30, "the API serving", 0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield api, f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            thread.join(30)


def fast_clicks(name: str) -> dict[str, Any]:
    spec = clicks_spec(name)
    spec["source"].update(rows_per_second=1e9, max_rows_per_step=2000)
    spec["trigger"] = {"interval": "100ms"}
    spec["checkpoint"] = {"every_steps": 100_000}  # commits only when asked
    return spec


def test_a_driver_runs_under_the_control_plane_over_rest(
    served: tuple[Api, str], spark: SparkSession, tmp_path: Path
) -> None:
    api, url = served
    name = "over-http"
    api.create_pipeline(fast_clicks(name))
    assert api.post(f"pipelines/{name}/start").status_code == 202
    with api.db.session() as s:
        run_id = s.scalar(select(Run.id))
    assert run_id is not None
    # Prepared as the worker prepares a driver, with the API's URL known: the run's token
    # and the URL are the driver's environment.
    how = launch.prepare(api.db, api.settings.model_copy(update={"api_url": url}), run_id)
    assert how is not None
    assert how.env[control_rest.API_URL_ENV] == url
    token = how.env[control_rest.RUN_TOKEN_ENV]
    assert token not in " ".join(how.cmd)  # never on a command line

    plane = control_rest.RestControlPlane(control_rest.client(url, token), run_id)
    control = JobControl(plane, poll_s=0.05, heartbeat_s=0.2)
    runner = open_runner(
        parse_spec(fast_clicks(name)),
        str(tmp_path / "storage"),
        base_dir=str(tmp_path),
        spark=spark,
        own_retention=False,
        metrics_sinks=[control.metrics_sink],
    )
    try:
        control.opened(runner)
        driving = threading.Thread(target=runner.run, name="driver", daemon=True)
        driving.start()

        def pipeline() -> dict[str, Any]:
            api.reads_expire()
            body = api.get(f"pipelines/{name}").json()
            assert isinstance(body, dict)
            return body

        assert pipeline()["state"] == "running"
        wait_until(lambda: len(api.get(f"pipelines/{name}/metrics").json()) >= 2, 120, "steps")

        op = api.post(f"pipelines/{name}/checkpoints").json()["id"]
        finished = wait_until(
            lambda: (
                (o := api.get(f"operations/{op}").json())["status"] != "running"
                and o["status"] != "pending"
                and o
            ),
            120,
            "the commit",
        )
        assert finished["status"] == "succeeded", finished
        uid = finished["result"]["checkpoint"]
        api.reads_expire()
        assert uid in [c["uuid"] for c in api.get(f"pipelines/{name}/checkpoints").json()]

        assert api.post(f"pipelines/{name}/pause").status_code == 202
        wait_until(lambda: runner.paused, 60, "the driver pausing")
        wait_until(lambda: pipeline()["state"] == "paused", 30, "the pipeline paused")
        assert api.post(f"pipelines/{name}/resume").status_code == 202
        wait_until(lambda: not runner.paused, 60, "the driver resuming")

        stop = api.post(f"pipelines/{name}/stop").json()["id"]
        driving.join(120)
        assert not driving.is_alive() and runner.exit_code == EXIT_STOPPED
        assert api.get(f"operations/{stop}").json()["status"] == "succeeded"
    finally:
        runner.request_exit(EXIT_STOPPED)
        control.close()
        runner.close()
    # The supervisor records the exit: the token is revoked, and a report from the driver
    # is told to exit.
    with api.db.session() as s:
        run = s.get(Run, run_id)
        assert run is not None and run.last_step is not None and run.last_step >= 2
        assert run.pid is not None and run.first_step is not None
        last = run.last_step
        lifecycle.run_exited(s, run, EXIT_STOPPED)
    assert plane.report(Report(step=last)).exit
    api.reads_expire()
    assert api.get(f"pipelines/{name}").json()["state"] == "stopped"
