"""End to end over HTTP against the real platform (`python -m backend serve`: API, Celery
worker with beat, Spark drivers), in both run modes: deployed (PostgreSQL + Redis) and
embedded (SQLite + kombu's SQLAlchemy transport). Crash tests kill real processes."""

from __future__ import annotations

import json
import math
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from local_servers.prometheus import PrometheusServer
from local_servers.seaweedfs import SeaweedS3

from .. import customers
from ..polling import wait_until
from .live_platform import REDIS, ROOT, Platform, platform

FILES, ROWS = 16, 200


def s3_env(server: SeaweedS3, bucket: str) -> dict[str, str]:
    return {
        "SPINDLE_OBJECT_STORE_URL": f"s3://{bucket}/spindle",
        "SPINDLE_S3_ENDPOINT": server.endpoint,
        "SPINDLE_S3_ACCESS_KEY": server.access_key,
        "SPINDLE_S3_SECRET_KEY": server.secret_key,
    }


@pytest.fixture(params=["deployed", "embedded"])
def any_mode(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Platform]:
    """Deployed: PostgreSQL, Redis, S3 (SeaweedFS). Embedded: SQLite, SQLite broker, a
    local object-store directory."""
    if request.param == "deployed":
        url = request.getfixturevalue("pg_url")
        server = request.getfixturevalue("s3_server")
        env = s3_env(server, request.getfixturevalue("s3_bucket"))
        yield from platform(tmp_path, url, REDIS, env)
    else:
        yield from platform(tmp_path, None, None)


@pytest.fixture
def deployed(
    tmp_path: Path, pg_url: str, s3_server: SeaweedS3, s3_bucket: str
) -> Iterator[Platform]:
    yield from platform(tmp_path, pg_url, REDIS, s3_env(s3_server, s3_bucket))


def descendants(pid: int) -> list[int]:
    """The live descendants of `pid` (short-lived ones may vanish while being listed)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            kids = [
                int(k)
                for task in Path(f"/proc/{parent}/task").iterdir()
                for k in (task / "children").read_text().split()
            ]
        except (FileNotFoundError, ProcessLookupError):
            continue
        found += kids
        todo += kids
    return found


def executable(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/exe").resolve(strict=True).name
    except OSError:  # gone, or not ours to read
        return None


def datagen_spec(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": {
            "kind": "datagen",
            "generator": "clicks",
            "seed": 3,
            "rows_per_second": 4000,
            "max_rows_per_step": 2000,
            "users": 200,
        },
        "transform": {"select": ["user", "amount"]},
        "state": [
            {
                "name": "per_user",
                "kind": "aggregate",
                "group_by": ["user"],
                "aggregates": [{"name": "n", "func": "count"}],
            }
        ],
        "sinks": [{"name": "v", "kind": "view", "from": "per_user"}],
        "checkpoint": {"every_steps": 100000},
        "retention": {"keep_last": 20},
        "trigger": {"interval": "300ms"},
    }


def test_lifecycle_over_http(any_mode: Platform) -> None:
    p = any_mode
    name = "life"
    p.ok("POST", "/api/v1/pipelines", json={"spec": datagen_spec(name)})
    p.ok("POST", f"/api/v1/pipelines/{name}/start")
    p.wait_state(name, "running")

    events = p.sse_steps(name, 3)
    steps = [e["step"] for e in events]
    assert len(steps) == 3 and steps == sorted(steps) and len(set(steps)) == 3
    assert all(e["rows_in"] > 0 and e["state_rows"] > 0 for e in events)

    commits = []
    for _ in range(3):
        r = p.client.post(f"/api/v1/pipelines/{name}/checkpoints?wait=true")
        assert r.status_code == 200, r.text
        op = r.json()
        assert op["status"] == "succeeded", op
        commits.append(op["result"])
        p.sse_steps(name, 6)  # steps (and merges) between commits: their files differ
    listed = p.ok("GET", f"/api/v1/pipelines/{name}/checkpoints")
    by_uuid = {c["uuid"]: c for c in listed}
    for c in commits:
        row = by_uuid[c["checkpoint"]]
        assert row["step"] == c["step"] and row["size_bytes"] > 0 and row["local_durable"]
    c1, c2, _ = (c["checkpoint"] for c in commits)

    r = p.client.post(f"/api/v1/pipelines/{name}/checkpoints/gc?wait=true")
    assert r.status_code == 200, r.text
    gc = r.json()
    assert gc["status"] == "succeeded" and gc["result"]["deleted"] == [c1]
    assert gc["result"]["bytes_freed"] > 0
    assert c1 not in {c["uuid"] for c in p.ok("GET", f"/api/v1/pipelines/{name}/checkpoints")}

    restore = p.ok("POST", f"/api/v1/pipelines/{name}/checkpoints/{c2}/restore")
    done = p.wait_operation(restore["id"], timeout=120)
    assert done["status"] == "succeeded", done
    assert done["result"]["step"] == commits[1]["step"]
    run = p.runs(name)[0]
    assert run["restored_checkpoint"] == c2 and run["first_step"] == commits[1]["step"]
    previous = p.runs(name)[1]
    assert previous["state"] == "stopped" and "restore" in previous["exit_reason"]
    p.wait_step(name, commits[1]["step"] + 2)  # it resumes from the restored step

    stop = p.ok("POST", f"/api/v1/pipelines/{name}/stop?checkpoint=true")
    stopped = p.wait_operation(stop["id"])
    assert stopped["status"] == "succeeded", stopped
    final = stopped["result"]["checkpoint"]
    p.wait_state(name, "stopped")

    p.ok("POST", f"/api/v1/pipelines/{name}/start")
    p.wait_state(name, "running")
    run = p.runs(name)[0]
    assert run["restored_checkpoint"] == final
    assert run["first_step"] == stopped["result"]["step"]
    # Checkpoints reach the object store (S3 or the directory) and the mirror says so.
    wait_until(
        lambda: any(
            c["uuid"] == final and c["remote_durable"]
            for c in p.ok("GET", f"/api/v1/pipelines/{name}/checkpoints")
        ),
        60,
        "the final checkpoint to be remote-durable",
    )
    # Views read the running driver's newest step; `as_of` the checkpoints.
    view = p.ok("GET", f"/api/v1/pipelines/{name}/views/v?limit=5")
    assert view["live"] and view["checkpoint"] is None and len(view["rows"]) == 5
    assert view["step"] >= stopped["result"]["step"]
    column, key = next(iter(view["rows"][0].items()))
    one = p.ok("GET", f"/api/v1/pipelines/{name}/views/v", params={"key": str(key)})
    assert one["live"] and one["step"] >= view["step"]
    assert [r[column] for r in one["rows"]] == [key]
    stored = p.ok("GET", f"/api/v1/pipelines/{name}/views/v?limit=5&as_of=latest")
    assert stored["checkpoint"] is not None and len(stored["rows"]) == 5
    assert "spindle_pipeline_up" in p.client.get("/metrics").text


@pytest.fixture
def without_reaper(tmp_path: Path) -> Iterator[Platform]:
    """Embedded; beat's reaper an hour apart, and so is every restart after the first; the
    worker's spare driver on (as by default)."""
    slow = {"SPINDLE_REAP_INTERVAL_S": "3600", "SPINDLE_RESTART_BACKOFF_S": "3600"}
    yield from platform(tmp_path, None, None, {**slow, "SPINDLE_SPARE_DRIVER": "true"})


@pytest.mark.full
def test_a_crashed_driver_is_restarted_at_once_by_its_supervisor_on_the_spare(
    without_reaper: Platform,
) -> None:
    """No reaper runs and the backoff is an hour: the replacement comes from the supervisor
    that ran the killed driver, a first crash's restart does not wait, and it takes over the
    worker's spare driver (on by default), which stops once the worker runs nothing."""
    p = without_reaper
    name = "again"
    p.ok("POST", "/api/v1/pipelines", json={"spec": datagen_spec(name)})
    p.ok("POST", f"/api/v1/pipelines/{name}/start")
    p.wait_step(name, 2)
    spare = wait_until(p.ready_spare, 180, "a ready spare driver")
    p.wait_step(name, 2)
    (pid,) = p.driver_pids(name)
    assert os.getpriority(os.PRIO_PROCESS, spare) == p.settings.driver_nice
    os.kill(pid, signal.SIGKILL)
    run = wait_until(lambda: restarted(p, name), 120, "the supervisor to restart it")
    dead = p.runs(name)[1]
    assert dead["state"] == "failed" and dead["exit_reason"] == "killed by SIGKILL"
    assert run["number"] == 2 and run["restart_count"] == 1
    # The spare is the new run's driver (it keeps the spare's command line): no other.
    assert p.driver_pids(name) == [spare]
    wait_until(lambda: len(started(p, name)) == 2 or None, 60, "the new run's first step")
    assert started(p, name)[-1]["pid"] == spare and started(p, name)[-1]["spare"]
    lines = p.ok("GET", f"/api/v1/pipelines/{name}/logs")["lines"]
    assert any("spare: taking over" in x for x in lines)
    # Told its run's token in the takeover line, it reports over serve's REST API.
    assert any("control plane over its REST API" in x for x in lines)
    # It keeps stepping. (No checkpoint is taken, so it started again from step 0.)
    p.wait_step(name, started(p, name)[-1]["first_step"] + 2)
    assert p.pipeline(name)["state"] == "running"
    # Once the new run is up, another spare for the next one; none once nothing runs.
    wait_until(lambda: (x := p.ready_spare()) is not None and x != spare, 180, "the next spare")
    stop = p.ok("POST", f"/api/v1/pipelines/{name}/stop")
    p.wait_operation(stop["id"])
    p.wait_state(name, "stopped")
    wait_until(lambda: not p.spare_pids() or None, 120, "the spare to be retired")


def started(p: Platform, name: str) -> list[dict[str, Any]]:
    """The `started` records of the pipeline's runs (metrics.jsonl), oldest first."""
    path = p.settings.storage_dir(name) / "metrics.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in records if r.get("event") == "started"]


def write_input(root: Path) -> customers.Aggregate:
    """The input files under the first file root, and the expected final aggregate."""
    return customers.write_input(root / "files" / "in", FILES, ROWS, customers=30, seed=7)


def files_spec(name: str) -> dict[str, Any]:
    return customers.spec(name, "in", "out", every_steps=3, trigger="300ms")


def restarted(p: Platform, name: str) -> dict[str, Any] | None:
    """The pipeline's newest run once it replaced another and is running."""
    rs = p.runs(name)
    return rs[0] if len(rs) >= 2 and rs[0]["state"] == "running" else None


def test_killed_worker_pipeline_runs_again_on_a_new_worker(deployed: Platform) -> None:
    p = deployed
    name = "survivor"
    p.ok("POST", "/api/v1/pipelines", json={"spec": datagen_spec(name)})
    p.ok("POST", f"/api/v1/pipelines/{name}/start")
    p.wait_step(name, 2)
    workers = p.worker_pids()  # the worker and its embedded beat process
    assert workers
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    # The driver dies with its worker: no orphan keeps writing to the storage location.
    wait_until(lambda: not p.driver_pids(name), 20, "the driver to die with its worker")
    p.start_worker()
    run = wait_until(lambda: restarted(p, name), 120, "a new run on the new worker")
    lost = p.runs(name)[1]
    assert lost["state"] == "lost" and "heartbeat" in lost["exit_reason"]
    assert run["number"] == lost["number"] + 1
    # It keeps stepping. (No checkpoint is taken, so it started again from step 0.)
    p.wait_step(name, started(p, name)[-1]["first_step"] + 2)
    assert p.pipeline(name)["state"] == "running"


@pytest.fixture
def with_spares(tmp_path: Path, pg_url: str) -> Iterator[Platform]:
    """Deployed (PostgreSQL, Redis; the object-store mirror in a local directory) with the
    worker's spare driver."""
    # No periodic reaper: the crash is restarted in place by the run's own supervisor, which
    # keeps the spare (a reaper's launch could come after the supervisor ended, when the
    # worker supervised nothing and had retired its spare).
    slow = {"SPINDLE_REAP_INTERVAL_S": "3600", "SPINDLE_SPARE_DRIVER": "true"}
    yield from platform(tmp_path, pg_url, REDIS, slow)


def test_a_sigkilled_driver_is_replaced_by_the_spare_exactly_once_and_a_restore_too(
    with_spares: Platform,
) -> None:
    """A crash's restart from the latest checkpoint and a restore's relaunch, each taken
    over by the worker's spare driver. (The cold restart by the reaper: the killed-worker
    test here, docs/operations.md's worked example and the console's e2e test.)"""
    p = with_spares
    want = write_input(p.data_dir)
    name = "crash"
    spec = files_spec(name)
    spec["trigger"] = {"interval": "1s"}  # room for the kill and the restore mid-input
    p.ok("POST", "/api/v1/pipelines", json={"spec": spec})
    p.ok("POST", f"/api/v1/pipelines/{name}/start")
    p.wait_step(name, 2)
    spare = wait_until(p.ready_spare, 180, "a ready spare driver")
    (pid,) = [x for x in p.driver_pids(name) if x != spare]
    # Drivers (spares too) run below the control plane's priority, and so does their JVM.
    jvm = [c for c in descendants(pid) if executable(c) == "java"]
    assert jvm and {os.getpriority(os.PRIO_PROCESS, x) for x in [pid, *jvm, spare]} == {
        p.settings.driver_nice
    }
    os.kill(pid, signal.SIGKILL)
    run = wait_until(lambda: restarted(p, name), 90, "the spare to take over")
    assert run["restart_count"] == 1 and run["restored_checkpoint"] is not None
    dead = p.runs(name)[1]
    assert dead["state"] == "failed" and "SIGKILL" in dead["exit_reason"]
    assert p.driver_pids(name) == [spare]  # the spare is the new run's driver
    lines = p.ok("GET", f"/api/v1/pipelines/{name}/logs")["lines"]
    assert any("spare: taking over" in x for x in lines)

    # A restore is taken over by the next spare (spawned once the new run was up).
    def next_spare() -> int | None:
        x = p.ready_spare()
        return x if x != spare else None

    nxt = wait_until(next_spare, 180, "the next spare")
    listed = p.ok("GET", f"/api/v1/pipelines/{name}/checkpoints")
    older = min(listed, key=lambda c: c["step"])
    newest = max(listed, key=lambda c: c["step"])
    restore = p.ok("POST", f"/api/v1/pipelines/{name}/checkpoints/{older['uuid']}/restore")
    assert p.wait_operation(restore["id"], timeout=120)["status"] == "succeeded"
    run = p.runs(name)[0]
    assert run["restored_checkpoint"] == older["uuid"] and p.driver_pids(name) == [nxt]

    # Stopped without a checkpoint, then started from "latest": the newest checkpoint of
    # the restored timeline, not the newer ones the sinks were rolled back past (before,
    # "latest" was the newest in the manifest: those steps were lost from the sinks).
    stop = p.ok("POST", f"/api/v1/pipelines/{name}/stop")
    p.wait_operation(stop["id"])
    p.wait_state(name, "stopped")
    before = p.runs(name)[0]["number"]
    p.ok("POST", f"/api/v1/pipelines/{name}/start")

    def started() -> dict[str, Any] | None:
        rs = p.runs(name)
        return rs[0] if rs[0]["number"] > before and rs[0]["state"] == "running" else None

    run = wait_until(started, 180, "the run after the restore")
    assert run["restored_checkpoint"] != newest["uuid"]

    p.wait_step(name, FILES, timeout=180)  # the rest of the input, redone after the restore
    stop = p.ok("POST", f"/api/v1/pipelines/{name}/stop")
    p.wait_operation(stop["id"])
    p.wait_state(name, "stopped")
    assert customers.integrated(p.settings.roots[0] / "out") == want  # nothing lost, nothing twice
    # A worker that runs nothing keeps no spare.
    wait_until(lambda: not p.spare_pids() or None, 120, "the spare to be retired")
    restarts = [
        line
        for line in p.client.get("/metrics").text.splitlines()
        if line.startswith(f'spindle_pipeline_restarts_total{{pipeline="{name}"}}')
    ]
    assert restarts == [f'spindle_pipeline_restarts_total{{pipeline="{name}"}} 1.0']


def _documented_prometheus() -> tuple[list[dict[str, Any]], list[str]]:
    """docs/operations.md's scrape configuration and its PromQL of the duration
    histograms."""
    text = (ROOT / "docs" / "operations.md").read_text()
    block = re.search(r"```yaml\n(scrape_configs:.*?)```", text, re.S)
    assert block is not None, "no scrape configuration in docs/operations.md"
    queries = re.findall(r"`(histogram_quantile\(.*?\))`", text)
    assert len(queries) >= 3, queries
    return yaml.safe_load(block.group(1))["scrape_configs"], queries


def test_a_real_prometheus_scrapes_the_documented_config(
    deployed: Platform, tmp_path: Path
) -> None:
    """Debian's Prometheus, configured as docs/operations.md says (the token in a file, the
    target this platform's API), scrapes a pipeline that steps and uploads its checkpoints
    to S3; the documented p99 queries of the step and upload histograms give finite
    seconds, over all pipelines and per pipeline."""
    p, name = deployed, "scraped"
    spec = datagen_spec(name) | {"checkpoint": {"every_steps": 2}}
    p.ok("POST", "/api/v1/pipelines", json={"spec": spec})
    p.ok("POST", f"/api/v1/pipelines/{name}/start")
    p.wait_step(name, 2, timeout=120)

    scrape, queries = _documented_prometheus()
    token = tmp_path / "spindle-token"
    token.write_text(p.token)
    for job in scrape:
        job["authorization"]["credentials_file"] = str(token)
        job["static_configs"] = [{"targets": [f"127.0.0.1:{p.port}"]}]
    prom = PrometheusServer(tmp_path / "prometheus", scrape)
    prom.start()
    try:

        def answered() -> dict[str, float] | None:
            got = {}
            for q in queries:
                result = prom.query(q)
                values = [float(r["value"][1]) for r in result]
                if not values or not all(math.isfinite(v) for v in values):
                    return None
                got[q] = max(values)
            return got

        got = wait_until(answered, 90, "finite answers to the documented queries")
        assert all(0 < v <= 60 for v in got.values()), got
        per_pipeline = prom.query(next(q for q in queries if "pipeline)" in q))
        assert {r["metric"]["pipeline"] for r in per_pipeline} == {name}
    finally:
        prom.stop()
