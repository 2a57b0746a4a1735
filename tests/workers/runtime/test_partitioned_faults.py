"""Faults of a partitioned SQL pipeline (issue 50) on a Spark standalone cluster: a master and
two workers of one core each (`local_servers.spark_cluster`), the driver a
`python -m workers.runtime.driver run` process at parallelism 2, a directory object store
the shards' durable tier. Each fault is a real signal to a real process, and each test ends
with the files sinks' output, integrated, equal to DuckDB's batch query over the whole
input (`test_sql_pipeline.oracle`): nothing lost, nothing twice.

- kill -9 of one worker's executor JVM and its Python workers, between steps and while a
  shard's task runs on it: Spark starts another executor and re-runs the lost tasks, which
  redo their step from the bases the request names (pulled from the store); the run goes
  on to the end without a restart (the driver never exits).
- kill -9 of the driver just after a checkpoint, then a restart: it resumes from that
  checkpoint and redoes the logged steps after it.
- SIGSTOP of an executor while one of its Python workers holds a shard mid-step, SIGCONT
  once Spark gave it up: the task re-runs elsewhere and the run goes on, no restart.
- a restore to an older checkpoint, a kill -9 of the driver after a step, a restart.
- a checkpoint taken at P=2, the driver killed, a restart at P=3 (a rescale).
- with a real S3 server (SeaweedFS) as the durable tier, stopped with SIGSTOP: kill -9 of an
  executor while its task uploads a shard's checkpoint, and of the other just after a step
  (its shards uploaded, the driver's checkpoint naming them not yet).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest

from local_servers.kafka import KafkaBroker
from local_servers.seaweedfs import SeaweedS3
from local_servers.spark_cluster import SparkCluster
from storage_engine import StorageLocation
from storage_engine.location_view import list_checkpoints
from workers.runtime.dataflow_run import MANIFEST_KEY

from ... import customers
from .test_kafka_sink import consume_all
from .test_partitioned_cluster import APP, CONF, ROOT, driver
from .test_sql_pipeline import integrated, oracle, spec

FILES = 8
ROWS = 400  # per file: each shard task steps for a while, so a kill can land in one
TIMEOUT = 240.0


def prepare(
    tmp: Path, parallelism: int = 2, interval: str = "1s", sinks: Sequence[dict[str, Any]] = ()
) -> Path:
    """Input in `tmp / "in"`, the run (spec, state, sinks) in `tmp / "run"`; `sinks`: more
    sinks than the two files sinks."""
    customers.write_input(tmp / "in", FILES, ROWS, customers=12, seed=11)
    run = tmp / "run"
    run.mkdir()
    (run / "in").symlink_to(tmp / "in")
    base = spec(run)
    doc = {
        **base,
        "sinks": [*base["sinks"], *sinks],
        "parallelism": parallelism,
        "trigger": {"interval": interval},
    }
    (run / "spec.json").write_text(json.dumps(doc))
    return run


def set_parallelism(run: Path, parallelism: int) -> None:
    doc = json.loads((run / "spec.json").read_text())
    (run / "spec.json").write_text(json.dumps({**doc, "parallelism": parallelism}))


def records(run: Path) -> list[dict[str, Any]]:
    path = run / "state" / "metrics.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # a line being written
            out.append(json.loads(line))
    return out


def steps(run: Path) -> list[int]:
    """The steps the runs recorded, in order (a redone step again)."""
    return [r["step"] for r in records(run) if "event" not in r and "step" in r]


def last_step(run: Path) -> int:
    return max(steps(run), default=0)


def wait_for(what: str, ready: Callable[[], bool], p: subprocess.Popen[bytes], run: Path) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not ready():
        assert p.poll() is None, (
            f"the driver exited ({p.returncode}) waiting for {what}: "
            + (run / "driver.err").read_text()[-4000:]
        )
        assert time.monotonic() < deadline, f"no {what} after {TIMEOUT:.0f} s"
        time.sleep(0.05)


def finish(p: subprocess.Popen[bytes], run: Path) -> int:
    try:
        return p.wait(timeout=TIMEOUT)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def kill9(p: subprocess.Popen[bytes]) -> None:
    p.send_signal(signal.SIGKILL)
    p.wait()


def app_id(cluster: SparkCluster) -> str | None:
    apps = [a["id"] for a in cluster.master_state()["activeapps"] if a["name"] == APP]
    return apps[-1] if apps else None


def executor(cluster: SparkCluster, worker: int) -> tuple[int, list[int]] | None:
    """Worker `worker`'s executor JVM of the running application and its Python workers."""
    app = app_id(cluster)
    pids = cluster.executor_pids(worker, app) if app else []
    return (pids[-1], cluster.python_pids(pids[-1])) if pids else None


def signal_all(pids: list[int], sig: signal.Signals) -> None:
    for p in pids:
        assert p > 0
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, sig)


def assert_oracle(tmp: Path, run: Path) -> None:
    assert integrated(run / "a") == oracle(tmp, "per_customer")
    assert integrated(run / "b") == oracle(tmp, "big_orders")


def cluster_of(tmp: Path) -> SparkCluster:
    return SparkCluster(
        tmp / "spark", workers=2, cores=1, memory="1g", env={"PYTHONPATH": str(ROOT)}
    )


def shard_held_on(cluster: SparkCluster, worker: int, found: dict[str, Any]) -> Callable[[], bool]:
    """A poll: whether one of worker `worker`'s executor's Python workers holds an
    operator-shard open now, mid-step (its location's LOCK; into `found`: the executor's
    pid, its Python workers, the shard's directory)."""

    def ready() -> bool:
        got = executor(cluster, worker)
        if got is None:
            return False
        for pid in got[1]:
            try:
                files = psutil.Process(pid).open_files()
            except psutil.Error:
                continue
            for f in files:
                if "/shards/" in f.path and f.path.endswith("/LOCK"):
                    found.update(pid=got[0], python=got[1], shard=str(Path(f.path).parent))
                    return True
        return False

    return ready


@pytest.mark.full
def test_executors_killed_between_and_during_steps_lose_nothing(tmp_path: Path) -> None:
    """kill -9 of worker 1's executor (JVM and Python workers) just after step 2, and of
    worker 0's while one of its Python workers holds an operator-shard mid-step (step 5 or
    later): the run ends by itself, no restart, each step once in the sinks, and the output
    equals the oracle."""
    run = prepare(tmp_path)
    store = f"file://{tmp_path / 'store'}"
    killed: list[tuple[int, int, int, str]] = []  # (worker, after step, pid, shard held)
    with cluster_of(tmp_path) as cluster:
        p = driver(run, cluster.master_url, "--remote", store, conf=CONF)
        try:
            # Between steps: step 2 recorded (its checkpoint being taken), step 3 not begun.
            wait_for("step 2", lambda: last_step(run) >= 2, p, run)
            got = executor(cluster, 1)
            assert got is not None
            signal_all([got[0], *got[1]], signal.SIGKILL)
            killed.append((1, last_step(run), got[0], ""))
            # During a shard's task: worker 0's executor while it holds a shard mid-step.
            wait_for("step 4", lambda: last_step(run) >= 4, p, run)
            mid: dict[str, Any] = {}
            wait_for("a shard held on worker 0", shard_held_on(cluster, 0, mid), p, run)
            signal_all([mid["pid"], *mid["python"]], signal.SIGKILL)
            killed.append((0, last_step(run), mid["pid"], mid["shard"]))
            code = finish(p, run)
        finally:
            if p.poll() is None:
                kill9(p)
        assert code == 0, (run / "driver.err").read_text()[-4000:]
        # The killed executors are gone, and Spark started another on each worker.
        assert all(not psutil.pid_exists(pid) for _, _, pid, _ in killed)
        assert all(len(list(cluster.work_dir(w).glob("app-*/*"))) >= 2 for w in (0, 1))
    assert [w for w, *_ in killed] == [1, 0]
    assert killed[1][1] < FILES, f"the second kill came after the last step: {killed}"
    # One run, its steps each once: the lost tasks were re-run within their step.
    assert steps(run) == list(range(1, FILES + 1))
    assert len([r for r in records(run) if r.get("event") == "started"]) == 1
    assert_oracle(tmp_path, run)


def checkpoints(run: Path) -> list[Any]:
    """The driver's checkpoints, oldest first (its manifest: the commit points)."""
    if not (run / "state").exists():
        return []
    return list(list_checkpoints(run / "state").checkpoints)


def checkpointed(run: Path, step: int) -> Callable[[], bool]:
    return lambda: any(c.step >= step for c in checkpoints(run))


def started(run: Path) -> list[dict[str, Any]]:
    return [r for r in records(run) if r.get("event") == "started"]


def manifest_shards(run: Path, uuid: str) -> int:
    with StorageLocation.open(str(run / "state"), checkpoint="none", read_only=True) as loc:
        shards: int = loc.checkpoint_metadata(uuid)[MANIFEST_KEY]["shards"]
        return shards


def kill_after_checkpoint(
    run: Path, master: str, store: str, step: int
) -> Any:  # the newest checkpoint when the driver died
    """A driver run killed with SIGKILL as soon as its manifest lists a checkpoint of
    `step` or later; returns the newest checkpoint then."""
    p = driver(run, master, "--remote", store, conf=CONF)
    try:
        wait_for(f"a checkpoint of step {step}", checkpointed(run, step), p, run)
    finally:
        kill9(p)
    newest = checkpoints(run)[-1]
    assert step <= newest.step < FILES, newest
    return newest


def resume(run: Path, master: str, store: str, *args: str) -> None:
    code = finish(driver(run, master, "--remote", store, *args, conf=CONF), run)
    assert code == 0, (run / "driver.err").read_text()[-4000:]


@pytest.mark.full
def test_a_driver_killed_just_after_a_checkpoint_resumes_from_it(
    tmp_path: Path, pg_dsn: str, kafka_broker: KafkaBroker
) -> None:
    """Besides the files sinks, a Postgres table and a Kafka topic of changes hold the
    aggregate: each ends equal to the oracle too (each step once)."""
    topic = f"per-customer-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, 2)
    run = prepare(
        tmp_path,
        sinks=[
            {
                "name": "pg",
                "kind": "postgres",
                "from": "per_customer",
                "dsn": pg_dsn,
                "table": "per_customer",
                "mode": "table",
                "key": ["customer"],
            },
            {
                "name": "changes",
                "kind": "kafka",
                "from": "per_customer",
                "bootstrap_servers": kafka_broker.bootstrap,
                "topic": topic,
                "key": ["customer"],
            },
        ],
    )
    store = f"file://{tmp_path / 'store'}"
    with cluster_of(tmp_path) as cluster:
        newest = kill_after_checkpoint(run, cluster.master_url, store, 4)
        resume(run, cluster.master_url, store)
    (_, again) = started(run)
    assert (again["restored"], again["first_step"]) == (newest.uuid, newest.step + 1)
    assert last_step(run) == FILES
    assert_oracle(tmp_path, run)
    want = oracle(tmp_path, "per_customer")
    with psycopg.connect(pg_dsn) as c:
        table = Counter(tuple(r) for r in c.execute("SELECT customer, n, total FROM per_customer"))
    assert table == want
    changes: Counter[tuple[Any, ...]] = Counter()
    for m in consume_all(kafka_broker, topic):
        v = json.loads(m.value())
        changes[(v["customer"], v["n"], v["total"])] += v["__weight"]
    assert +changes == changes and changes == want


# Spark gives up on an executor that sends no heartbeat for `spark.network.timeout` (checked
# every `spark.network.timeoutInterval`, 60 s by default): 20 s, still well above what a
# loaded two-core machine delays an RPC by (askTimeout follows it).
STOP_CONF = {
    **CONF,
    "spark.network.timeout": "20s",
    "spark.network.timeoutInterval": "2s",
    "spark.executor.heartbeatInterval": "2s",
}


@pytest.mark.full
def test_a_stopped_executor_woken_after_its_shard_moved_changes_nothing(tmp_path: Path) -> None:
    """SIGSTOP of worker 0's executor (its JVM and Python workers) while one of its Python
    workers holds an operator-shard mid-step; SIGCONT once Spark has given the executor up
    (its worker is asked to kill it) and scheduled the task again: the run goes on without
    a restart, each step once, and the output equals the oracle.

    On one machine the two workers' shards share a local directory, so the re-run waits
    for the shard's lock (`shard_state.LOCK_WAIT_S`) until the stopped attempt is gone,
    rather than fail Spark's four attempts of the task in seconds (which it did before
    that wait). The object store's fencing (a newer claim refuses a zombie's manifest) is
    for machines of their own local disks; here the lock keeps the attempts apart."""
    run = prepare(tmp_path)
    store = f"file://{tmp_path / 'store'}"
    with cluster_of(tmp_path) as cluster:
        p = driver(run, cluster.master_url, "--remote", store, conf=STOP_CONF)
        zombie: dict[str, Any] = {}
        try:
            wait_for("step 2", lambda: last_step(run) >= 2, p, run)
            wait_for("a shard held on worker 0", shard_held_on(cluster, 0, zombie), p, run)
            pids = [zombie["pid"], *zombie["python"]]
            signal_all(pids, signal.SIGSTOP)
            at = last_step(run)
            cmd = psutil.Process(zombie["pid"]).cmdline()
            name = f"{cmd[cmd.index('--app-id') + 1]}/{cmd[cmd.index('--executor-id') + 1]}"
            given_up = f"Asked to kill executor {name}"
            wait_for(
                "Spark giving the stopped executor up",
                lambda: given_up in cluster.worker_log(0).read_text(errors="replace"),
                p,
                run,
            )
            assert last_step(run) == at, "a step went by while the executor was stopped"
            signal_all([*zombie["python"], zombie["pid"]], signal.SIGCONT)
            code = finish(p, run)
        finally:
            if p.poll() is None:
                kill9(p)
            if zombie:
                signal_all([zombie["pid"], *zombie["python"]], signal.SIGCONT)
        assert code == 0, (run / "driver.err").read_text()[-4000:]
        logs = [f.read_text(errors="replace") for f in cluster.root.glob("worker-*/app-*/*/stderr")]
    # The stopped attempt's task ran again, and no attempt failed on the shard's lock.
    assert any(re.search(r"Running task \d+\.[1-9]", log) for log in logs)
    assert not any("LockedError" in log for log in logs)
    assert len(started(run)) == 1
    assert steps(run) == list(range(1, FILES + 1))
    assert_oracle(tmp_path, run)


@pytest.mark.full
def test_a_restore_to_an_older_checkpoint_then_a_crash_loses_nothing(tmp_path: Path) -> None:
    """A run of 5 steps; a run restored at step 2's checkpoint, killed after it redid step 3
    (before its next checkpoint); a restart resumes step 2's timeline, not the abandoned
    checkpoints of steps 4 and 5, whose steps the sinks no longer hold."""
    run = prepare(tmp_path)
    store = f"file://{tmp_path / 'store'}"
    with cluster_of(tmp_path) as cluster:
        resume(run, cluster.master_url, store, "--max-steps", "5")
        two = next(c for c in checkpoints(run) if c.step == 2)
        p = driver(run, cluster.master_url, "--remote", store, "--from-checkpoint", two.uuid,
                   conf=CONF)  # fmt: skip
        try:
            wait_for("step 3 redone", lambda: steps(run).count(3) == 2, p, run)
        finally:
            kill9(p)
        assert list_checkpoints(run / "state").head == two.uuid
        resume(run, cluster.master_url, store)
    _, restored, again = started(run)
    assert restored["restored"] == again["restored"] == two.uuid
    assert last_step(run) == FILES
    assert_oracle(tmp_path, run)


@pytest.mark.full
def test_a_rescale_from_two_shards_to_three_across_a_driver_kill(tmp_path: Path) -> None:
    run = prepare(tmp_path)
    store = f"file://{tmp_path / 'store'}"
    with cluster_of(tmp_path) as cluster:
        newest = kill_after_checkpoint(run, cluster.master_url, store, 2)
        assert manifest_shards(run, newest.uuid) == 2
        set_parallelism(run, 3)
        resume(run, cluster.master_url, store)
    (_, again) = started(run)
    assert (again["restored"], again["first_step"]) == (newest.uuid, newest.step + 1)
    assert manifest_shards(run, checkpoints(run)[-1].uuid) == 3
    assert last_step(run) == FILES
    assert_oracle(tmp_path, run)


def held_anywhere(cluster: SparkCluster, found: dict[str, Any]) -> Callable[[], bool]:
    """A poll: whether a Python worker of either worker's executor holds an operator-shard."""
    polls = [shard_held_on(cluster, w, found) for w in range(cluster.workers)]
    return lambda: any(poll() for poll in polls)


def uploading(cluster: SparkCluster, step: int, found: dict[str, Any]) -> Callable[[], bool]:
    """A poll: whether a Python worker of either worker's executor holds an operator-shard
    whose local copy has its checkpoint of `step` already (committed locally, so the task
    is uploading it now; into `found`: the worker, the executor's pid and its Python
    workers)."""

    def ready() -> bool:
        for worker in range(cluster.workers):
            got = executor(cluster, worker)
            if got is None:
                continue
            for pid in got[1]:
                try:
                    files = psutil.Process(pid).open_files()
                except psutil.Error:
                    continue
                for f in files:
                    if "/shards/" not in f.path or not f.path.endswith("/LOCK"):
                        continue
                    with contextlib.suppress(Exception):  # a manifest being written
                        cps = list_checkpoints(Path(f.path).parent).checkpoints
                        if any(c.step == step for c in cps):
                            found.update(worker=worker, pid=got[0], python=got[1])
                            return True
        return False

    return ready


@pytest.mark.full
def test_executors_killed_mid_upload_and_before_the_manifest_lose_nothing(
    tmp_path: Path, s3_server: SeaweedS3, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shards' durable tier is a real S3 server (SeaweedFS). After step 2 the server is
    stopped (SIGSTOP): the next step's shard tasks block in their uploads; kill -9 of the
    executor one of whose Python workers holds an operator-shard committed locally at that
    step (so uploading it), then SIGCONT. Later, as soon as a step is recorded (its shards'
    checkpoints uploaded, the driver's checkpoint naming them not yet), the server is
    stopped again, the other worker's executor killed, the server resumed. The run ends by
    itself, no restart, each step once, and the output equals the oracle."""
    for name, value in {
        "SPINDLE_S3_ENDPOINT": s3_server.endpoint,
        "SPINDLE_S3_ACCESS_KEY": s3_server.access_key,
        "SPINDLE_S3_SECRET_KEY": s3_server.secret_key,
    }.items():
        monkeypatch.setenv(name, value)
    run = prepare(tmp_path)
    weed = s3_server.pid
    assert weed is not None
    killed: list[tuple[str, int, int]] = []  # (when, worker, after step)
    with cluster_of(tmp_path) as cluster:
        p = driver(run, cluster.master_url, "--remote", f"s3://{s3_bucket}/run", conf=CONF)
        try:
            wait_for("step 2", lambda: last_step(run) >= 2, p, run)
            mid: dict[str, Any] = {}
            for _ in range(10):
                # A task past its open (which reads the store) holds its shard: stop the
                # store then, and its upload blocks (unless it was done already: again).
                held: dict[str, Any] = {}
                wait_for("a shard held", held_anywhere(cluster, held), p, run)
                os.kill(weed, signal.SIGSTOP)
                up = uploading(cluster, last_step(run) + 1, mid)
                deadline = time.monotonic() + 5
                while not up() and time.monotonic() < deadline:
                    time.sleep(0.05)
                if mid:
                    break
                os.kill(weed, signal.SIGCONT)
            assert mid, "no shard task was caught uploading"
            try:
                signal_all([mid["pid"], *mid["python"]], signal.SIGKILL)
                killed.append(("mid-upload", mid["worker"], last_step(run)))
            finally:
                os.kill(weed, signal.SIGCONT)
            at = last_step(run) + 1
            wait_for(f"step {at}", lambda: last_step(run) >= at, p, run)
            os.kill(weed, signal.SIGSTOP)
            try:
                other = 1 - int(mid["worker"])
                got = executor(cluster, other)
                assert got is not None
                signal_all([got[0], *got[1]], signal.SIGKILL)
                killed.append(("before the manifest", other, last_step(run)))
            finally:
                os.kill(weed, signal.SIGCONT)
            code = finish(p, run)
        finally:
            if p.poll() is None:
                kill9(p)
            os.kill(weed, signal.SIGCONT)
        assert code == 0, (run / "driver.err").read_text()[-4000:]
    assert killed[1][2] < FILES, f"the second kill came after the last step: {killed}"
    assert len(started(run)) == 1
    assert steps(run) == list(range(1, FILES + 1))
    assert_oracle(tmp_path, run)
