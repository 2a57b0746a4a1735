"""End to end over HTTP against the real platform (both run modes; real Spark drivers): a
running Nexmark SQL pipeline forked at an older checkpoint with one view changed. The fork's
unchanged operator keeps its state, the changed one starts empty, and both pipelines end
equal to DuckDB's answers over the same events."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from oracles.nexmark import norm, oracle
from workers.runtime.nexmark import events
from workers.runtime.sources import EPOCH_US

from ..polling import wait_until
from .live_platform import REDIS, Platform, platform
from .test_platform import s3_env

pytestmark = pytest.mark.timeout(600)

SEED, RATE, PEOPLE, EVENTS, STEP = 3, 4000.0, 500, 24_000, 2_000
BID = (
    "CREATE VIEW bid AS SELECT bid_auction AS auction, bid_bidder AS bidder, "
    "bid_price AS price FROM events WHERE event_type = 2;\n"
)
COUNTS = (
    "CREATE VIEW bids_per_auction AS SELECT auction, count(*) AS n FROM bid GROUP BY auction;\n"
)
TOP = "CREATE VIEW top_price AS SELECT auction, {f}(price) AS price FROM bid GROUP BY auction;\n"


def spec(name: str, f: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": {
            "kind": "datagen",
            "generator": "nexmark",
            "table": "events",
            "seed": SEED,
            "rows_per_second": RATE,
            "users": PEOPLE,
            "max_rows_per_step": STEP,
            "limit": EVENTS,
        },
        "sql": BID + COUNTS + TOP.format(f=f),
        "sinks": [
            {"name": "bids_per_auction", "kind": "view", "from": "bids_per_auction"},
            {"name": "top_price", "kind": "view", "from": "top_price"},
        ],
        "checkpoint": {"every_steps": 1},
        "retention": {"keep_last": 50},
        "trigger": {"interval": "300ms"},
    }


@pytest.fixture(params=["embedded", "deployed"])
def any_mode(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Platform]:
    """Embedded: SQLite, its broker, the object store in a directory. Deployed: PostgreSQL,
    Redis and S3 (SeaweedFS), where the fork borrows the origin's objects over S3."""
    if request.param == "deployed":
        env = s3_env(request.getfixturevalue("s3_server"), request.getfixturevalue("s3_bucket"))
        yield from platform(tmp_path, request.getfixturevalue("pg_url"), REDIS, env)
    else:
        yield from platform(tmp_path, None, None)


def view(p: Platform, name: str, v: str) -> Counter[tuple[Any, ...]]:
    page = p.ok("GET", f"/api/v1/pipelines/{name}/views/{v}?limit=10000")
    assert len(page["rows"]) < 10000
    return Counter(tuple(norm(x) for x in r.values()) for r in page["rows"])


def want(sql: str, view_name: str, stream: pa.Table) -> Counter[tuple[Any, ...]]:
    rows = oracle(view_name, sql, {"events": stream})
    assert rows, f"{view_name}: the oracle has no rows; the test would prove nothing"
    return rows


def finished(p: Platform, name: str) -> None:
    """Until the pipeline's newest checkpoint holds every event."""

    def done() -> bool:
        cps = p.ok("GET", f"/api/v1/pipelines/{name}/checkpoints")
        return bool(cps) and max(c["source_offset"] or 0 for c in cps) == EVENTS

    wait_until(done, 240, f"{name} to checkpoint all {EVENTS} events")


def test_a_running_nexmark_pipeline_forked_with_one_view_changed(
    any_mode: Platform, tmp_path: Path
) -> None:
    p = any_mode
    p.ok("POST", "/api/v1/pipelines", json={"spec": spec("nx", "max")})
    p.ok("POST", "/api/v1/pipelines/nx/start")
    p.wait_state("nx", "running")

    def older() -> dict[str, Any] | None:
        cps = p.ok("GET", "/api/v1/pipelines/nx/checkpoints")
        return cps[2] if len(cps) >= 4 else None

    at = wait_until(older, 180, "the origin's fourth checkpoint")
    assert at is not None and 0 < at["source_offset"] < EVENTS
    # The fork, while the origin runs: top_price takes the min now, bids_per_auction is as it was.
    forked = p.ok(
        "POST",
        "/api/v1/pipelines/nx/fork",
        json={"name": "nx-fork", "checkpoint": at["uuid"], "spec": spec("nx-fork", "min"),
              "start": True},
    )  # fmt: skip
    assert forked["forked_from"]["checkpoint"] == at["uuid"]
    assert forked["forked_from"]["step"] == at["step"]
    assert p.pipeline("nx")["state"] == "running"
    p.wait_state("nx-fork", "running")
    finished(p, "nx")
    finished(p, "nx-fork")

    # The restore's report: the unchanged operator kept its state, the changed one did not.
    run = p.runs("nx-fork")[0]
    assert run["restored_checkpoint"] == at["uuid"] and run["first_step"] == at["step"]
    metrics = tmp_path / "pipelines" / "nx-fork" / "storage" / "metrics.jsonl"
    started = [
        r for r in map(json.loads, metrics.read_text().splitlines()) if r.get("event") == "started"
    ]
    state = started[0]["state"]
    assert state["checkpoint"] == at["uuid"] and state["new"] == []
    assert state["views"] == ["top_price"]  # its view sink started empty too
    assert any("top_price" in op for op in state["dropped"]), state
    assert state["kept"] and not any("top_price" in op for op in state["kept"]), state
    assert any("bids_per_auction" in op for op in state["kept"]), state

    stream = pa.table(events(SEED, RATE, 0, EVENTS, PEOPLE, EPOCH_US))
    since = stream.slice(at["source_offset"])
    counts = want(BID + COUNTS, "bids_per_auction", stream)
    assert view(p, "nx", "bids_per_auction") == counts
    assert view(p, "nx", "top_price") == want(BID + TOP.format(f="max"), "top_price", stream)
    assert view(p, "nx-fork", "bids_per_auction") == counts  # its state from the origin
    # The changed view started empty at the checkpoint: it saw the events after it only.
    assert view(p, "nx-fork", "top_price") == want(BID + TOP.format(f="min"), "top_price", since)

    # The origin stopped and deleted: the fork's checkpoints and views are whole.
    stop = p.ok("POST", "/api/v1/pipelines/nx/stop")
    assert p.wait_operation(stop["id"])["status"] == "succeeded"
    p.wait_state("nx", "stopped")
    assert p.client.delete("/api/v1/pipelines/nx").status_code == 204
    assert view(p, "nx-fork", "bids_per_auction") == counts
    stop = p.ok("POST", "/api/v1/pipelines/nx-fork/stop?checkpoint=true")
    assert p.wait_operation(stop["id"])["status"] == "succeeded"
    p.wait_state("nx-fork", "stopped")
    p.ok("POST", "/api/v1/pipelines/nx-fork/start")  # resumable without its origin
    p.wait_state("nx-fork", "running")
    assert p.runs("nx-fork")[0]["restored_checkpoint"] is not None
    assert view(p, "nx-fork", "bids_per_auction") == counts
