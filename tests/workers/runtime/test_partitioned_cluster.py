"""A partitioned SQL pipeline on a Spark standalone cluster (issue 50): a master and two
workers of one core each, started from the installed PySpark (`local_servers.spark_cluster`),
and the pipeline's driver a `python -m workers.runtime.driver run` process pointed at it by
SPINDLE_SPARK_MASTER, its executors sized by SPINDLE_SPARK_CONF. At parallelism 2 its shards
are stepped in the executors' Python workers (other JVMs, other working directories than the
driver's), with a directory object store; stopped after 3 steps and resumed with the shards'
local copies removed, it writes its sinks step by step what the same pipeline at parallelism
1 writes. The master's and the workers' JSON show each run's executors on both workers,
each having run tasks, of the memory SPINDLE_SPARK_CONF asked for; `SparkCluster` finds each
worker's executor JVM and its Python workers (what the fault tests kill), and leaves no
process behind. A driver refuses a SPINDLE_SPARK_CONF it cannot apply, naming the key."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from local_servers.spark_cluster import SparkCluster, find_spark_home
from pipeline_spec.exits import EXIT_SPEC
from pipeline_spec.model import parse_spec
from pipeline_spec.spark_conf import ENV as SPARK_CONF_ENV
from storage_engine import StorageLocation
from workers.runtime.dataflow_run import MANIFEST_KEY
from workers.runtime.plan import sql_dataflow

from ... import customers
from .test_partitioned_spark import by_step
from .test_sql_pipeline import spec

ROOT = Path(__file__).resolve().parents[3]
APP = "spindle:orders-sql"
# The executors' size, and their JVMs tuned for a run of seconds: the client compiler alone
# and the serial collector take half the CPU time of the defaults to start, and two cores
# run the cluster's five JVMs and the drivers (the test's steps are three times faster).
CONF = {
    "spark.executor.memory": "512m",
    "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}


def driver(
    run: Path, master: str, *args: str, conf: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`python -m workers.runtime.driver run` of `run / "spec.json"` on `master`, its storage in
    `run / "state"`, standard error appended to `run / "driver.err"`."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SPINDLE_SPARK_MASTER": master,
        SPARK_CONF_ENV: json.dumps(conf or {}),
        # The executors reach the driver on the loopback interface, as the cluster's own.
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    command = [sys.executable, "-m", "workers.runtime.driver", "run", str(run / "spec.json")]
    command += ["--storage", str(run / "state"), "--stop-when-idle", "2", *args]
    with (run / "driver.err").open("ab") as err:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)


def finish(p: subprocess.Popen[bytes], run: Path) -> None:
    try:
        code = p.wait(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert code == 0, (run / "driver.err").read_text()[-4000:]


def running_executors(
    cluster: SparkCluster, p: subprocess.Popen[bytes]
) -> dict[int, tuple[int, str, list[int]]]:
    """While the driver `p` runs: for each worker, the first executor JVM seen with Python
    workers under it (once its tasks have started them), as (pid, application, Python
    pids)."""
    seen: dict[int, tuple[int, str, list[int]]] = {}
    while p.poll() is None and len(seen) < cluster.workers:
        for app in cluster.master_state()["activeapps"]:
            for worker in set(range(cluster.workers)) - set(seen):
                for pid in cluster.executor_pids(worker, app["id"]):
                    python = cluster.python_pids(pid)
                    if python:
                        seen[worker] = (pid, app["id"], python)
        time.sleep(0.25)
    return seen


def prepare(tmp: Path, parallelism: int) -> Path:
    run = tmp / f"p{parallelism}"
    run.mkdir()
    (run / "in").symlink_to(tmp / "in")
    (run / "spec.json").write_text(json.dumps({**spec(run), "parallelism": parallelism}))
    return run


# --full: the fault test in make test runs the same path on the cluster (its output equal
# to the oracle); this one adds the step-by-step comparison and the cluster's bookkeeping.
@pytest.mark.full
def test_a_partitioned_pipeline_on_a_standalone_cluster_equals_parallelism_one(
    tmp_path: Path,
) -> None:
    customers.write_input(tmp_path / "in", 5, 60, customers=12, seed=7)
    spark_home = find_spark_home()
    install_before = sorted(os.listdir(spark_home))
    # Parallelism 1, the reference, on local[1] while the cluster starts.
    one = prepare(tmp_path, 1)
    reference = driver(one, "local[1]", "--max-steps", "5")
    two = prepare(tmp_path, 2)
    store = f"file://{tmp_path / 'store'}"
    try:
        with SparkCluster(
            tmp_path / "spark", workers=2, cores=1, memory="1g", env={"PYTHONPATH": str(ROOT)}
        ) as cluster:
            first = driver(two, cluster.master_url, "--max-steps", "3", "--remote", store,
                           conf=CONF)  # fmt: skip
            executors = running_executors(cluster, first)
            finish(first, two)
            # The resumed run's shards are pulled from the object store, as on executors
            # that never held them.
            assert (two / "state" / "shards").is_dir()
            shutil.rmtree(two / "state" / "shards")
            finish(driver(two, cluster.master_url, "--max-steps", "2", "--remote", store,
                          conf=CONF), two)  # fmt: skip
            apps = cluster.master_state()["completedapps"]
            workers = [cluster.worker_state(i) for i in range(2)]
            work_dirs = [cluster.work_dir(i) for i in range(2)]
            daemons = [cluster.master_pid, *cluster.worker_pids]
        finish(reference, one)
    finally:
        if reference.poll() is None:
            reference.kill()
            reference.wait()

    got = {p: {sink: by_step(run / sink) for sink in ("a", "b")} for p, run in ((1, one), (2, two))}
    assert got[2] == got[1]
    assert sorted(got[1]["a"]) == [1, 2, 3, 4, 5]
    # The resumed run's checkpoint names both shards of each operator.
    manifest = _manifest(two)
    assert manifest["shards"] == 2
    assert set(manifest["operators"]) == {"per_customer.agg0", "big_orders.join0"}
    assert all(len(u) == 2 and all(u) for u in manifest["operators"].values())
    assert any((tmp_path / "store" / "shards" / "per_customer.agg0" / "1").rglob("*.manifest"))

    # Both runs were applications of the cluster, each with an executor of 512 MiB (from
    # SPINDLE_SPARK_CONF) on each worker, and every executor ran tasks.
    ours = [a for a in apps if a["name"] == APP]
    assert len(ours) == 2, apps
    assert all(a["cores"] == 2 and a["memoryperexecutor"] == 512 for a in ours), ours
    for app in ours:
        for w, work in zip(workers, work_dirs, strict=True):
            (executor,) = [e for e in w["finishedexecutors"] if e["appid"] == app["id"]]
            stderr = work / app["id"] / str(executor["id"]) / "stderr"
            assert "Running task" in stderr.read_text(errors="replace"), stderr
    # While the first run ran, each worker had its executor JVM, with Python workers under
    # it: PySpark's daemon and the workers it forked.
    assert len(executors) == 2, executors
    for pid, app_id, python in executors.values():
        assert app_id in {a["id"] for a in ours} and python, (pid, app_id, python)
    # The cluster's processes are gone, and the executors ended with their application.
    pids = [*daemons, *(p for e, _, py in executors.values() for p in (e, *py))]
    assert [p for p in pids if psutil.pid_exists(p)] == []
    # Nothing was written into PySpark's install (a worker's default work directory).
    assert sorted(os.listdir(spark_home)) == install_before


def test_a_driver_refuses_a_bad_spark_conf_naming_the_key(tmp_path: Path) -> None:
    run = prepare(tmp_path, 2)
    (tmp_path / "in").mkdir()
    p = driver(run, "local[1]", conf={"spark.master": "local[4]"})
    try:
        assert p.wait(timeout=120) == EXIT_SPEC
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = (run / "driver.err").read_text()
    assert f"{SPARK_CONF_ENV}: spark.master cannot be set here" in err
    assert "Traceback" not in err


def _manifest(run: Path) -> dict[str, Any]:
    s = parse_spec(json.loads((run / "spec.json").read_text()))
    fingerprint = sql_dataflow(s.model_dump_json(by_alias=True)).fingerprint
    loc = StorageLocation.open(str(run / "state"), fingerprint=fingerprint, read_only=True)
    try:
        manifest: dict[str, Any] = loc.metadata[MANIFEST_KEY]
        return manifest
    finally:
        loc.close()
