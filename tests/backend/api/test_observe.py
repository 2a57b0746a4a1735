"""The REST API: metrics: history, Prometheus, the Server-Sent Events stream. Over a real metadata
database, each test on SQLite and on PostgreSQL; no Spark and no Celery (the TaskQueue is a
recording double), storage locations built with the engine itself (conftest.py)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from backend.models import (
    PipelineState,
    Role,
)

from ..api_fixtures import (
    BIDS,
    CLICKS,
    Api,
    LineReader,
    add_samples,
    build_checkpoints,
    clicks_spec,
    error,
    example,
    log_spec,
)

pytestmark = pytest.mark.timeout(120)


def samples(n: int, t0: float, step0: int = 1) -> list[dict[str, Any]]:
    return [
        {"ts": t0 + i, "step": step0 + i, "rows_in": 10 * (i + 1), "step_ms": 100.0 + i}
        for i in range(n)
    ]


def test_metrics_history(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    api.create_pipeline(log_spec())
    pid = api.pipeline_id(CLICKS)
    t0 = time.time() - 100
    ids = add_samples(api.db, pid, samples(5, t0))
    add_samples(api.db, api.pipeline_id(BIDS), samples(2, t0))
    url = f"pipelines/{CLICKS}/metrics"
    got = api.get(url).json()
    assert [m["id"] for m in got] == ids
    assert [m["step"] for m in got] == [1, 2, 3, 4, 5]
    assert got[0]["rows_in"] == 10 and got[0]["resolution_s"] == 0 and got[0]["run_id"] is None
    since = api.get(url, params={"since": t0 + 2}).json()
    assert [m["step"] for m in since] == [3, 4, 5]
    newest = api.get(url, params={"limit": 2}).json()
    assert [m["step"] for m in newest] == [4, 5]
    assert api.get(f"pipelines/{BIDS}/metrics", params={"since": t0 + 1}).json()[0]["step"] == 2


def metric(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    raise AssertionError(f"no sample {name}{labels}")


def test_prometheus_exposition(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    api.create_pipeline(log_spec())
    add_samples(api.db, api.pipeline_id(CLICKS), samples(4, time.time() - 30))
    bids = {"ts": time.time(), "step": 3, "rows_in": 7}
    add_samples(
        api.db,
        api.pipeline_id(BIDS),
        [{**bids, "memory_bytes": 3 << 20, "memory_budget_bytes": 64 << 20}],
    )
    build_checkpoints(api.storage(CLICKS), 3)
    api.get(f"pipelines/{CLICKS}/checkpoints")
    api.set_state(BIDS, PipelineState.running)
    r = api.get("/metrics", token=api.token(Role.viewer))
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'spindle_pipeline_rows_in_total{pipeline="clicks-per-user"} 100.0' in text
    assert metric(text, "spindle_pipeline_rows_in_total", pipeline=BIDS) == 7
    assert metric(text, "spindle_checkpoints", pipeline=CLICKS) == 3
    assert metric(text, "spindle_checkpoints", pipeline=BIDS) == 0
    assert metric(text, "spindle_pipeline_last_step", pipeline=CLICKS) == 4
    assert metric(text, "spindle_pipeline_up", pipeline=BIDS) == 1
    assert metric(text, "spindle_pipeline_up", pipeline=CLICKS) == 0
    assert metric(text, "spindle_pipeline_state", pipeline=CLICKS, state="stopped") == 1
    assert metric(text, "spindle_pipeline_state", pipeline=CLICKS, state="running") == 0
    assert metric(text, "spindle_pipeline_memory_bytes", pipeline=BIDS) == 3 << 20
    assert metric(text, "spindle_pipeline_memory_budget_bytes", pipeline=BIDS) == 64 << 20
    with pytest.raises(AssertionError, match="no sample"):  # samples from before: no budget
        metric(text, "spindle_pipeline_memory_bytes", pipeline=CLICKS)
    # rows in over the last minute / 60 s
    assert metric(text, "spindle_pipeline_throughput_rows_per_second", pipeline=CLICKS) == (
        pytest.approx(100 / 60)
    )


def stream_url(name: str, **params: Any) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"/api/v1/pipelines/{name}/metrics/stream" + (f"?{query}" if query else "")


def test_metrics_stream_backlog_live_and_resume(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    pid = api.pipeline_id(CLICKS)
    ids = add_samples(api.db, pid, samples(3, time.time() - 10))
    with api.client.stream("GET", stream_url(CLICKS, backlog=2), headers=api.auth()) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        reader = LineReader(resp)
        first = reader.next_event(timeout=10)
        assert (first["event"], first["id"]) == ("step", str(ids[1]))
        data = json.loads(first["data"])
        assert (data["id"], data["step"], data["rows_in"]) == (ids[1], 2, 20)
        assert reader.next_event(timeout=10)["id"] == str(ids[2])
        # A row landing while connected arrives next.
        (live,) = add_samples(api.db, pid, [{"ts": time.time(), "step": 42, "rows_in": 5}])
        event = reader.next_event(timeout=10)
        assert (event["event"], event["id"]) == ("step", str(live))
        assert json.loads(event["data"])["step"] == 42
    reader.join(timeout=10)

    # Reconnecting with Last-Event-ID resumes right after it.
    headers = {**api.auth(), "Last-Event-ID": str(ids[0])}
    with api.client.stream("GET", stream_url(CLICKS, backlog=1), headers=headers) as resp:
        reader = LineReader(resp)
        got = [reader.next_event(timeout=10)["id"] for _ in range(3)]
        assert got == [str(ids[1]), str(ids[2]), str(live)]
    reader.join(timeout=10)


def test_metrics_stream_without_backlog_sends_only_new_steps(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    api.create_pipeline(log_spec())
    pid = api.pipeline_id(CLICKS)
    add_samples(api.db, pid, samples(3, time.time() - 10))
    with api.client.stream("GET", stream_url(CLICKS), headers=api.auth()) as resp:
        reader = LineReader(resp)
        add_samples(api.db, api.pipeline_id(BIDS), [{"ts": time.time(), "step": 7}])
        (new,) = add_samples(api.db, pid, [{"ts": time.time(), "step": 8}])
        event = reader.next_event(timeout=10)
        assert event["id"] == str(new)
        assert json.loads(event["data"])["step"] == 8
    reader.join(timeout=10)
    r = api.get(stream_url(CLICKS), headers={"Last-Event-ID": "soon"})
    error(r, 422, "invalid_request")


def test_dataflow_graph_and_per_operator_figures(api: Api) -> None:
    """A SQL pipeline's graph: its table, operators (the stateful one under its persistent
    id), view and sink; each operator's figures of the newest step, also in the metrics
    history, the live stream and Prometheus."""
    spec = example("nexmark-q3-sql")
    api.create_pipeline(spec)
    name = spec["name"]
    url = f"pipelines/{name}/dataflow"
    graph = api.get(url).json()
    assert graph["step"] is None
    nodes = {n["id"]: n for n in graph["nodes"]}
    ops = [n for n in graph["nodes"] if n["operator"]]
    assert [n["kind"] for n in ops] == ["join", "aggregate"]
    join = ops[0]
    assert join["metrics"] is None and join["id"] == join["operator"]
    assert nodes["table:events"]["kind"] == "table"
    edges = {(e["source"], e["target"]) for e in graph["edges"]}
    sink = next(n["id"] for n in graph["nodes"] if n["kind"] == "sink")
    assert any(target == sink for _, target in edges)

    def figures(n: int) -> dict[str, Any]:
        return {"rows_in": n, "rows_out": 1, "step_ms": 2.5, "state_rows": 10 * n,
                "state_bytes": 100 * n}  # fmt: skip

    t0 = time.time() - 5
    lag = {"events": {"offset": 500, "lag": 42, "partitions": None}}
    sink_names = [s["name"] for s in spec["sinks"]]
    sinks = {s: {"rows": 0, "last_step": 1} for s in sink_names}
    add_samples(
        api.db,
        api.pipeline_id(name),
        [
            {
                "ts": t0 + i,
                "step": i,
                "operators": {join["operator"]: figures(i)},
                "inputs": lag,
                "sinks": sinks,
            }
            for i in (1, 2)
        ],
    )
    graph = api.get(url).json()
    assert graph["step"] == 2
    join, agg = [n for n in graph["nodes"] if n["operator"]]
    assert join["metrics"] == {**figures(2), "shards": None} and agg["metrics"] is None
    # The input table's offset and lag after the newest step.
    assert {n["id"]: n["input"] for n in graph["nodes"]}["table:events"] == lag["events"]
    # Each sink's last written step.
    assert {n["id"]: n["sink"] for n in graph["nodes"] if n["kind"] == "sink"} == {
        f"sink:{s}": sinks[s] for s in sink_names
    }
    history = api.get(f"pipelines/{name}/metrics").json()
    assert [h["operators"][join["operator"]]["rows_in"] for h in history] == [1, 2]
    text = api.get("/metrics").text
    labels = {"pipeline": name, "operator": join["operator"]}
    assert metric(text, "spindle_operator_state_rows", **labels) == 20
    assert metric(text, "spindle_operator_state_bytes", **labels) == 200
    assert metric(text, "spindle_operator_input_rows_per_second", **labels) == pytest.approx(3 / 60)
    assert metric(text, "spindle_operator_step_seconds", quantile="0.5", **labels) == 0.0025
    assert metric(text, "spindle_input_lag", pipeline=name, table="events") == 42
    for s in sink_names:
        assert metric(text, "spindle_sink_last_step", pipeline=name, sink=s) == 1


def test_dataflow_of_an_operator_spec(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    graph = api.get(f"pipelines/{CLICKS}/dataflow").json()
    kinds = {n["id"]: n["kind"] for n in graph["nodes"]}
    assert kinds == {"table:source": "table", "per_user": "aggregate", "sink:out": "sink",
                     "sink:v": "sink"}  # fmt: skip
    assert {(e["source"], e["target"]) for e in graph["edges"]} == {
        ("table:source", "per_user"), ("per_user", "sink:out"), ("per_user", "sink:v")
    }  # fmt: skip


def test_dataflow_shows_each_operator_shard_of_a_partitioned_pipeline(api: Api) -> None:
    """At parallelism > 1 each stateful operator's figures come with its shards': in the
    dataflow, the metrics history and Prometheus (labels pipeline, operator, shard)."""
    spec = {**example("nexmark-q3-sql"), "parallelism": 2}
    api.create_pipeline(spec)
    name = spec["name"]
    join, agg = [n["operator"] for n in api.get(f"pipelines/{name}/dataflow").json()["nodes"]
                 if n["operator"]]  # fmt: skip

    def shard(i: int, rows: int, ms: float, state: int) -> dict[str, Any]:
        return {"shard": i, "rows_in": rows, "rows_out": rows // 2, "step_ms": ms,
                "state_rows": state, "state_bytes": 100 * state}  # fmt: skip

    def operator(*shards: dict[str, Any]) -> dict[str, Any]:
        total = {k: sum(x[k] for x in shards) for k in shards[0] if k != "shard"}
        return {**total, "shards": list(shards)}

    steps = [
        {"ts": time.time() - 2, "step": 1,
         "operators": {join: operator(shard(0, 30, 6.0, 30), shard(1, 10, 2.0, 10))}},
        {"ts": time.time() - 1, "step": 2,
         "operators": {join: operator(shard(0, 24, 4.0, 54), shard(1, 0, 0.0, 10))}},
    ]  # fmt: skip
    add_samples(api.db, api.pipeline_id(name), steps)
    nodes = {n["id"]: n for n in api.get(f"pipelines/{name}/dataflow").json()["nodes"]}
    assert nodes[join]["metrics"] == steps[1]["operators"][join]
    assert [s["state_rows"] for s in nodes[join]["metrics"]["shards"]] == [54, 10]
    assert nodes[agg]["metrics"] is None
    history = api.get(f"pipelines/{name}/metrics").json()
    assert [h["operators"][join]["shards"][0]["rows_in"] for h in history] == [30, 24]
    text = api.get("/metrics").text
    for i, (rows_in, seconds, state) in enumerate([(54, 0.010, 54), (10, 0.002, 10)]):
        labels = {"pipeline": name, "operator": join, "shard": str(i)}
        assert metric(text, "spindle_operator_shard_rows_in_total", **labels) == rows_in
        assert metric(text, "spindle_operator_shard_step_seconds_total", **labels) == (
            pytest.approx(seconds)
        )
        assert metric(text, "spindle_operator_shard_state_rows", **labels) == state
        assert metric(text, "spindle_operator_shard_state_bytes", **labels) == 100 * state
    shard_operators = {
        smp.labels["operator"]
        for family in text_string_to_metric_families(text)
        if family.name.startswith("spindle_operator_shard_")
        for smp in family.samples
    }
    assert shard_operators == {join}
