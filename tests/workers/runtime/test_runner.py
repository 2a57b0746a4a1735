"""The runner on real Spark: the examples run; planning errors name the spec field; a
restore of an older checkpoint continues exactly as a run that never went past it; a query
that fails outside a step is started again."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from pipeline_spec import model as S
from pipeline_spec.model import SpecError, load_spec, parse_spec
from storage_engine.input_log import InputLog
from storage_engine.key_range import KeyRange
from storage_engine.schema import WEIGHT
from tests.polling import wait_until
from workers.runtime.connectors.files_sink import FilesSink
from workers.runtime.run_builder import open_runner
from workers.runtime.runner import QUERY_RESTARTS, Runner
from workers.runtime.step_input import StepInput

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "docs" / "examples"


@pytest.fixture
def read(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The row ranges a runner reads in the driver (`StepInput.arrow`), as it reads
    them."""
    ranges: list[tuple[int, int]] = []
    driver_read = StepInput.arrow

    def spy(self: StepInput, start: int, end: int) -> pa.Table:
        ranges.append((start, end))
        return driver_read(self, start, end)

    monkeypatch.setattr(StepInput, "arrow", spy)
    return ranges


def _fast(doc: dict[str, Any]) -> dict[str, Any]:
    """An example made quick to run: a fixed number of rows, short triggers."""
    if doc["source"]["kind"] == "datagen":
        doc["source"].update(rows_per_second=1e9, max_rows_per_step=3000)
    doc["trigger"] = {"interval": "50ms"}
    doc["checkpoint"] = {"every_steps": 1}
    return doc


@pytest.mark.parametrize(
    "name",
    [
        "clicks-per-user",
        "clicks-per-minute",
        "nexmark-q3",
        "nexmark-q3-sql",
        "nexmark/q5",
        "clicks-to-delta",
    ],
)
def test_datagen_examples_run(
    tmp_path: Path, spark: SparkSession, name: str, read: list[tuple[int, int]]
) -> None:
    doc = _fast(yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text()))
    spec = parse_spec(doc)
    r = open_runner(spec, str(tmp_path / "state"), base_dir=str(tmp_path), spark=spark)
    try:
        res = r.run(max_steps=3)
    finally:
        r.close()
    (offset,) = res.source_offsets.values()  # the one input table's
    assert res.last_step >= 3 and offset >= 3 * 3000 - 3000
    # Every step's rows were generated in the driver, one range after the other (for the
    # join of nexmark-q3 too, whose inputs are jobs over the one batch).
    assert read and read[0][0] == 0 and read[-1][1] == offset
    assert all(a[1] == b[0] for a, b in itertools.pairwise(read))
    recs = [json.loads(x) for x in (tmp_path / "state" / "metrics.jsonl").read_text().splitlines()]
    assert len([r for r in recs if "step" in r]) >= 3
    # One `started` record per run, right after its first step: where the start-up went.
    started = [i for i, r in enumerate(recs) if r.get("event") == "started"]
    assert started == [1] and recs[0]["step"] == recs[1]["first_step"] == 1
    phases = recs[1]["phases_ms"]
    assert list(phases) == [
        "spark_session", "plan", "storage_restore", "sinks_rollback", "query_start",
        "first_batch", "spark_part", "engine_step", "metrics",
    ]  # fmt: skip
    assert all(v >= 0 for v in phases.values())
    assert recs[1]["total_ms"] >= sum(phases.values()) - 1
    # Spark's own durations of the query's batches (the last may come after the run ended).
    batches = [r["duration_ms"] for r in recs if r.get("event") == "batch"]
    assert batches and all(b["triggerExecution"] >= b["addBatch"] > 0 for b in batches)
    for sink in spec.sinks:
        if sink.kind == "files":
            assert any((tmp_path / sink.path).iterdir())  # type: ignore[union-attr]
        if sink.kind == "delta":
            table = DeltaTable(str(tmp_path / sink.path))  # type: ignore[union-attr]
            assert table.transaction_version(f"spindle:{spec.name}/{sink.name}") == res.last_step
            assert table.to_pyarrow_table().num_rows > 0


def test_files_and_postgres_example_plans(spark: SparkSession) -> None:
    from workers.runtime.plan import plan

    p = plan(spark, load_spec(EXAMPLES / "orders-from-files.yaml"))
    assert p.stream_schema.names == ["customer"]


def test_planning_errors_name_the_field(spark: SparkSession) -> None:
    from workers.runtime.plan import plan

    base = yaml.safe_load((EXAMPLES / "clicks-per-user.yaml").read_text())
    bad = {**base, "transform": {"select": ["ts", "nope + 1 AS x"]}}
    with pytest.raises(SpecError, match=r"transform.select: .*nope"):
        plan(spark, parse_spec(bad))
    bad = {**base, "state": [{**base["state"][0], "group_by": ["page"]}]}
    with pytest.raises(SpecError, match=r"state.0: .*'page'"):
        plan(spark, parse_spec(bad))
    bad = {**base, "transform": {"where": "amount >>> 1", "select": ["*"]}}
    with pytest.raises(SpecError, match=r"transform.where"):
        plan(spark, parse_spec(bad))


def test_the_driver_refuses_what_validation_let_through(spark: SparkSession) -> None:
    """The driver checks Spark's own parse of every expression again: a spec that reached
    it unvalidated (or past a lexing difference) still cannot call the JVM or subquery."""
    from workers.runtime.plan import plan

    spec = load_spec(EXAMPLES / "clicks-per-user.yaml")
    assert spec.transform is not None
    for text, why in [
        ("reflect('java.lang.System', 'getenv', 'SPINDLE_S3_SECRET_KEY') AS leak", "reflect"),
        ("`java_method`('java.lang.System', 'getenv', 'X') AS leak", "java_method"),
        ("(SELECT 1) AS x", "subqueries"),
        ("user IN (SELECT 1) AS x", "subqueries"),
    ]:
        bad = spec.model_copy(
            update={"transform": spec.transform.model_copy(update={"select": ["user", text]})}
        )
        with pytest.raises(SpecError, match=f"transform.select.1: .*{why}"):
            plan(spark, bad)


def _integrated(path: Path) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for f in sorted(path.iterdir()):
        for r in pq.read_table(f).to_pylist():
            out[(r["user"], r["clicks"], r["total"], r["biggest"])] += r[WEIGHT]
    return +out


def test_restore_an_older_checkpoint_then_continue(tmp_path: Path, spark: SparkSession) -> None:
    """Run 6 steps (checkpoint each), restore step 3's checkpoint, run 3 more: the sink
    equals a run that went straight to step 6."""
    doc = _fast(yaml.safe_load((EXAMPLES / "clicks-per-user.yaml").read_text()))
    doc["sinks"][0]["path"] = "out"
    spec = parse_spec(doc)

    def run(state: str, base: Path, steps: int, ck: str = "latest") -> Runner:
        r = open_runner(spec, state, base_dir=str(base), spark=spark, from_checkpoint=ck)
        try:
            r.run(max_steps=steps)
            assert r.step == r.first_step + steps
            r.checkpoints.commit(wait=True)
        finally:
            r.close()
        return r

    os.makedirs(tmp_path / "a")
    run(str(tmp_path / "a" / "state"), tmp_path / "a", 6)
    from storage_engine import StorageLocation

    with StorageLocation.open(
        str(tmp_path / "a" / "state"), read_only=True, checkpoint="none"
    ) as loc:
        # a checkpoint per step, the last one twice (`commit`); retention keeps 5
        assert [c.step for c in loc.list_checkpoints()] == [3, 4, 5, 6, 6]
        at3 = next(c for c in loc.list_checkpoints() if c.step == 3)
    run(str(tmp_path / "a" / "state"), tmp_path / "a", 3, ck=at3.uuid)
    os.makedirs(tmp_path / "b")
    run(str(tmp_path / "b" / "state"), tmp_path / "b", 6)
    a, b = _integrated(tmp_path / "a" / "out"), _integrated(tmp_path / "b" / "out")
    assert a == b and a


def test_a_batch_delivered_after_max_steps_is_not_a_step(
    tmp_path: Path, spark: SparkSession
) -> None:
    """`run(max_steps=N)` notices the N-th step within its poll, while the query (a 50 ms
    trigger here) may hand over one more batch before it is stopped: that batch takes no
    step, so a run is exactly N steps (and N checkpoints under an every-step policy)."""
    spec = parse_spec(_fast(yaml.safe_load((EXAMPLES / "clicks-per-user.yaml").read_text())))
    r = open_runner(spec, str(tmp_path / "state"), base_dir=str(tmp_path), spark=spark)
    try:
        r.run(max_steps=2)
        assert r.step == r.first_step + 2
        r._draining = False  # as if the loop had not noticed yet
        r.process(cast(Any, None), 10**6)  # returns before reading the batch
        assert r.step == r.first_step + 2 and not r._busy
    finally:
        r.close()


def test_log_example_runs_on_appended_records(tmp_path: Path, spark: SparkSession) -> None:
    """Records appended to the input log (as the ingest API will) flow through the pipeline;
    a view sink serves the result; the log is truncated below the oldest checkpoint."""
    import datetime as dt

    import pyarrow as pa

    from workers.runtime.connectors.view_sink import ViewSink

    doc = _fast(yaml.safe_load((EXAMPLES / "ingest-log.yaml").read_text()))
    doc["retention"] = {"keep_last": 2}
    doc["source"]["max_records_per_step"] = 3  # four steps: two checkpoints are gc'ed
    spec = parse_spec(doc)
    r = open_runner(spec, str(tmp_path / "state"), base_dir=str(tmp_path), spark=spark)
    try:
        log = r.input.input_log()
        t0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
        for i in range(4):
            log.append(
                pa.table(
                    {
                        "auction": [1, 2, 1],
                        "bidder": [7, 8, 9],
                        "price": [10.0 + i, 5.0, 1.0],
                        "ts": [t0, t0, t0],
                    }
                )
            )
        res = r.run(stop_when_idle=2)
        assert res.source_offsets == {"input": 12}
        view = r.sinks["latest"]
        assert isinstance(view, ViewSink)
        assert view.lookup(KeyRange((1,))).rows.to_pylist() == [
            {"auction": 1, "max_price": 13.0, "bids": 8}
        ]
        assert view.lookup(KeyRange((2,))).rows.to_pylist() == [
            {"auction": 2, "max_price": 5.0, "bids": 4}
        ]
    finally:
        r.close()
    # Segments below the oldest retained checkpoint's offset are gone (retention runs
    # as commits land, so it may trail the newest request by one checkpoint).
    assert r.input.input_log().start() in (6, 9)


class _SlowStart:
    """A query whose start-up takes `delay` seconds (as on a loaded machine): not yet
    started, it is active and has no progress; then it is the real query."""

    def __init__(self, start: Any, delay: float) -> None:
        self._start, self._ready_at, self._q = start, time.monotonic() + delay, None

    def _real(self) -> Any:
        if self._q is None and time.monotonic() >= self._ready_at:
            self._q = self._start()
        return self._q

    @property
    def isActive(self) -> bool:
        q = self._real()
        return True if q is None else bool(q.isActive)

    @property
    def lastProgress(self) -> Any:
        q = self._real()
        return None if q is None else q.lastProgress

    def stop(self) -> None:
        if self._q is None:
            self._q = self._start()  # what the runner cleans up after must exist
        self._q.stop()

    def exception(self) -> Any:
        return None if self._q is None else self._q.exception()


def test_stop_when_idle_does_not_count_a_slow_start_up(
    tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Input waiting, a query start-up longer than the idle time (and than the 15 s grace
    the runner used to give it, here shortened to 1 s): the run waits for it and takes its
    steps; before, it ended after the grace with no step, exit 0."""
    import datetime as dt

    import pyarrow as pa

    from workers.runtime import runner as runner_mod

    monkeypatch.setattr(runner_mod, "STARTUP_GRACE_S", 1.0, raising=False)
    real = Runner._query
    monkeypatch.setattr(Runner, "_query", lambda self: _SlowStart(lambda: real(self), 3.0))
    spec = parse_spec(_fast(yaml.safe_load((EXAMPLES / "ingest-log.yaml").read_text())))
    r = open_runner(spec, str(tmp_path / "state"), base_dir=str(tmp_path), spark=spark)
    try:
        t0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
        records = {"auction": [1, 2], "bidder": [7, 8], "price": [1.0, 2.0], "ts": [t0, t0]}
        r.input.input_log().append(pa.table(records))
        res = r.run(stop_when_idle=0.5)
        assert (res.last_step, res.source_offsets) == (1, {"input": 2})
    finally:
        r.close()


Bid = tuple[int, int, float, Any]


def _bids_in_four_record_steps() -> tuple[S.PipelineSpec, list[Bid], list[dict[str, Any]]]:
    """The ingest-log example filtered, four records a step; 18 bids and the view's rows."""
    import datetime as dt

    doc = _fast(yaml.safe_load((EXAMPLES / "ingest-log.yaml").read_text()))
    doc["source"]["max_records_per_step"] = 4
    doc["transform"] = {"where": "price > 2", "select": ["auction", "bidder", "price", "ts"]}
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    records = [(i % 3, i, float(i % 7), t0 + dt.timedelta(seconds=i)) for i in range(18)]
    expected: dict[int, dict[str, Any]] = {}
    for auction, _, price, _ in records:
        if price > 2:
            e = expected.setdefault(auction, {"auction": auction, "max_price": price, "bids": 0})
            e["max_price"] = max(e["max_price"], price)
            e["bids"] += 1
    return parse_spec(doc), records, [expected[a] for a in sorted(expected)]


def _append(log: InputLog, records: list[Bid]) -> None:
    import pyarrow as pa

    a, b, price, ts = (list(c) for c in zip(*records, strict=True))
    log.append(pa.table({"auction": a, "bidder": b, "price": price, "ts": ts}))


def _view_rows(r: Runner, auctions: Iterable[int]) -> list[dict[str, Any]]:
    from workers.runtime.connectors.view_sink import ViewSink

    view = r.sinks["latest"]
    assert isinstance(view, ViewSink)
    return [row for a in auctions for row in view.lookup(KeyRange((a,))).rows.to_pylist()]


def test_a_log_sources_first_step_is_read_ahead_in_the_driver_and_a_restart_loses_nothing(
    tmp_path: Path, spark: SparkSession, read: list[tuple[int, int]]
) -> None:
    """Records already in the input log when a run starts: its first step is read ahead, in
    the driver (no Python worker), before the query starts at its end; then the query takes
    the rest, each batch's records read in the driver too. A second run, restored from the
    first one's checkpoint, does the same from there. Nothing lost, nothing counted twice:
    the view equals the aggregate computed here."""

    spec, records, expected = _bids_in_four_record_steps()
    state = str(tmp_path / "state")

    def runner() -> Runner:
        return open_runner(spec, state, base_dir=str(tmp_path), spark=spark)

    r = runner()
    try:
        log = r.input.input_log()
        for part in (records[:10], records[10:]):
            _append(log, part)
        r.close()
        r = runner()  # its records are in the log before it starts: read ahead
        assert r._ahead is not None and r._ahead.end == 4
        res = r.run(max_steps=2)
        assert (res.last_step, res.source_offsets) == (2, {"input": 8})
    finally:
        r.close()
    steps = [json.loads(x) for x in (tmp_path / "state" / "metrics.jsonl").read_text().splitlines()]
    first = sum(1 for _, _, price, _ in records[:4] if price > 2)
    assert [s["rows_in"] for s in steps if "step" in s][:1] == [first]  # records 0-3
    assert read == [(0, 4), (4, 8)]
    r = runner()
    try:
        assert r.step == 2 and r._ahead is not None and r._ahead.end == 12
        res = r.run(stop_when_idle=2)
        assert res.source_offsets == {"input": 18}
        assert read[2:] == [(8, 12), (12, 16), (16, 18)]
        assert _view_rows(r, range(3)) == expected
    finally:
        r.close()


def test_a_log_pipeline_moved_to_another_machine_reads_what_it_had_not_consumed(
    tmp_path: Path, spark: SparkSession
) -> None:
    """The input log travels with the checkpoints in the object store: on a machine with
    nothing local, the run restores step 2 and reads the 10 records acknowledged on the
    first machine but not yet consumed (before, the log was left behind and they were lost)."""
    from storage_engine.objstore import DirectoryObjectStore

    spec, records, expected = _bids_in_four_record_steps()
    store = DirectoryObjectStore(tmp_path / "store")
    r = open_runner(spec, str(tmp_path / "a"), base_dir=str(tmp_path), spark=spark, remote=store)
    try:
        _append(r.input.input_log(), records)
        res = r.run(max_steps=2)
        assert (res.last_step, res.source_offsets) == (2, {"input": 8})
    finally:
        r.close()
    r = open_runner(spec, str(tmp_path / "b"), base_dir=str(tmp_path), spark=spark, remote=store)
    try:
        assert (r.step, r.offset) == (2, 8)
        assert r.run(stop_when_idle=2).source_offsets == {"input": 18}
        assert _view_rows(r, range(3)) == expected
    finally:
        r.close()


def test_a_resume_while_the_paused_query_stops_continues_the_run(
    tmp_path: Path, spark: SparkSession
) -> None:
    """Pause stops the Spark query (seconds); a resume arriving meanwhile must restart it,
    not end the run as if the stream had ended."""
    spec = parse_spec(_fast(yaml.safe_load((EXAMPLES / "clicks-per-user.yaml").read_text())))
    r = open_runner(spec, str(tmp_path / "state"), base_dir=str(tmp_path), spark=spark)
    result: list[Any] = []
    t = threading.Thread(target=lambda: result.append(r.run(max_steps=6)))
    try:
        t.start()
        wait_until(lambda: r.step >= 2, 120, "two steps", every=0.01)
        r.paused = True
        wait_until(lambda: r._draining, 120, "the query to start stopping", every=0.01)
        r.paused = False
        t.join(180)
        assert not t.is_alive(), "the run did not finish"
    finally:
        r.request_exit(0)
        t.join(60)
        r.close()
    assert result and result[0].last_step - result[0].first_step >= 6


def _files_doc(tmp: Path) -> dict[str, Any]:
    return {
        "name": "restarts",
        "source": {
            "kind": "files",
            "path": str(tmp / "in"),
            "format": "json",
            "schema": {"user": "string", "amount": "bigint"},
            "max_files_per_step": 1,
        },
        "state": [
            {
                "name": "per_user",
                "kind": "aggregate",
                "group_by": ["user"],
                "aggregates": [{"name": "total", "func": "sum", "column": "amount"}],
            }
        ],
        "sinks": [{"name": "out", "kind": "files", "from": "per_user", "path": "out"}],
        "trigger": {"interval": "50ms"},
        "checkpoint": {"every_steps": 1},
    }


@pytest.mark.parametrize("failures", [1, 3])
def test_a_query_failing_outside_a_step_is_started_again(
    tmp_path: Path, spark: SparkSession, failures: int
) -> None:
    """A query that fails before a step (here its trigger, in the source's Python worker,
    cannot reach the driver, as when that worker does not connect back in time) is started
    again from the run's offset, up to QUERY_RESTARTS times in a row; then the run fails."""
    (tmp_path / "in").mkdir()
    for f in range(2):
        lines = [json.dumps({"user": f"u{i % 3}", "amount": f * 10 + i}) for i in range(9)]
        (tmp_path / "in" / f"part-{f}.json").write_text("\n".join(lines) + "\n")
    r = open_runner(
        parse_spec(_files_doc(tmp_path)),
        str(tmp_path / "state"),
        base_dir=str(tmp_path),
        spark=spark,
    )
    step_input = r.input
    starts = 0
    real, ends = r._query, step_input.step_end_socket

    def query() -> Any:
        nonlocal starts
        starts += 1
        if starts > failures:
            return real()
        # The trigger's `latestOffset` finds no driver at this socket, and raises.
        step_input.step_end_socket = lambda: str(tmp_path / "nobody.sock")  # type: ignore[method-assign]
        try:
            return real()
        finally:
            step_input.step_end_socket = ends  # type: ignore[method-assign]

    r._query = query  # type: ignore[method-assign]
    try:
        if failures > QUERY_RESTARTS:
            with pytest.raises(RuntimeError, match="the Spark query failed"):
                r.run(max_steps=2)
            # The first step is the batch read ahead, taken before the first query starts.
            assert starts == QUERY_RESTARTS + 1 and r.step == 1
            return
        res = r.run(max_steps=2)
    finally:
        r.close()
    assert starts == failures + 1 and res.last_step == 2
    sink = r.sinks["out"]
    assert isinstance(sink, FilesSink)
    out = sink.read_all()
    assert out is not None
    integrated: Counter[tuple[Any, ...]] = Counter()
    for row in out.to_pylist():
        integrated[(row["user"], row["total"])] += row[WEIGHT]
    want = Counter(
        (f"u{u}", sum(f * 10 + i for f in range(2) for i in range(9) if i % 3 == u))
        for u in range(3)
    )
    assert +integrated == want


def test_a_stuck_query_ends_the_run_instead_of_hanging(tmp_path: Path) -> None:
    """The driver's JVM stalled (SIGSTOP) while input waits: the Python driver is alive and
    would heartbeat for ever. Its watchdog ends it (exit 7, `hung:` naming the wait), so
    the restart policy can restart it from the last checkpoint."""
    import signal
    import subprocess
    import sys

    doc = _fast(yaml.safe_load((EXAMPLES / "clicks-per-user.yaml").read_text()))
    doc["sinks"] = []
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(doc))
    err = tmp_path / "err"
    cmd = [sys.executable, "-m", "workers.runtime.driver", "run", str(spec_path), "--storage",
           str(tmp_path / "state"), "--hang-timeout", "5"]  # fmt: skip
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(root)}
    p = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err.open("w")
    )
    jvms: list[int] = []
    try:
        metrics = tmp_path / "state" / "metrics.jsonl"

        def stepped_twice() -> bool:
            assert p.poll() is None, err.read_text()[-2000:]
            return metrics.exists() and '"step": 2' in metrics.read_text()

        wait_until(stepped_twice, 120, "the driver's second step")
        out = subprocess.run(["pgrep", "-P", str(p.pid), "java"], capture_output=True, text=True)
        jvms = [int(x) for x in out.stdout.split()]
        assert jvms, "the driver's JVM"
        for pid in jvms:
            os.kill(pid, signal.SIGSTOP)
        assert p.wait(timeout=60) == 7, err.read_text()[-2000:]
        (line,) = [x for x in err.read_text().splitlines() if x.startswith("hung:")]
        assert "while input is waiting" in line
    finally:
        for pid in jvms:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if p.poll() is None:
            p.kill()
