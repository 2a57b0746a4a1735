"""The REST API: ingest into input logs, and view reads. Over a real metadata database, each test
on SQLite and on PostgreSQL; no Spark and no Celery (the TaskQueue is a recording double),
storage locations built with the engine itself (conftest.py)."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from backend.models import (
    Role,
)
from pipeline_spec.model import ViewSink as ViewSinkSpec
from storage_engine import StorageLocation
from storage_engine.input_log import InputLog
from storage_engine.schema import WEIGHT
from workers.runtime.connectors.view_sink import ViewSink

from ..api_fixtures import (
    BIDS,
    CLICKS,
    MAX_BODY_BYTES,
    MAX_INGEST_BYTES,
    NDJSON,
    Api,
    bid,
    build_checkpoints,
    clicks_spec,
    delta,
    error,
    input_log,
    log_spec,
    ndjson,
    with_changes,
    write_view,
)

pytestmark = pytest.mark.timeout(120)


def test_ingest_ndjson_returns_offsets(api: Api) -> None:
    api.create_pipeline(log_spec())
    url = f"pipelines/{BIDS}/ingest/bids"
    first = [bid(i) for i in range(3)]
    r = api.post(url, content=ndjson(first), headers=NDJSON)
    assert r.status_code == 200, r.text
    assert r.json() == {"stream": "bids", "records": 3, "first_offset": 0, "end_offset": 3}
    second = [bid(i) for i in range(3, 8)]
    r = api.post(url, content=ndjson(second), headers=NDJSON)
    assert r.json() == {"stream": "bids", "records": 5, "first_offset": 3, "end_offset": 8}
    log = input_log(api.storage(BIDS))
    assert log.end() == 8
    rows = [r for b in log.read(0, 8) for r in b.to_pylist()]
    assert [r["bidder"] for r in rows] == [100 + i for i in range(8)]
    assert rows[5]["price"] == 7.5 and rows[5]["auction"] == 2
    assert rows[5]["ts"] == dt.datetime(2024, 1, 1, 0, 0, 5, tzinfo=dt.UTC)


def test_ingest_after_the_log_was_lost_continues_after_the_consumed_offset(api: Api) -> None:
    """The storage was restored (moved, or pulled from the object store) without its input
    log: the checkpoint has consumed records 0-5. New records got offsets from 0 again,
    which the pipeline skipped as already read."""
    api.create_pipeline(log_spec())
    build_checkpoints(api.storage(BIDS), 2, offsets=[4, 6])
    url = f"pipelines/{BIDS}/ingest/bids"
    r = api.post(url, content=ndjson([bid(1), bid(2)]), headers=NDJSON)
    assert (r.json()["first_offset"], r.json()["end_offset"]) == (6, 8)
    r = api.post(url, content=ndjson([bid(3)]), headers=NDJSON)
    assert r.json()["first_offset"] == 8
    log = input_log(api.storage(BIDS))
    assert [x["bidder"] for b in log.read(6, 9) for x in b.to_pylist()] == [101, 102, 103]


def test_ingest_csv(api: Api) -> None:
    api.create_pipeline(log_spec())
    url = f"pipelines/{BIDS}/ingest/bids"
    csv = b"ts,auction,bidder,price\n2024-01-01T00:00:09Z,7,42,9.25\n2024-01-01T00:01:00Z,8,43,1\n"
    r = api.post(url, content=csv, headers={"Content-Type": "text/csv"})
    assert r.status_code == 200, r.text
    assert (r.json()["first_offset"], r.json()["end_offset"]) == (0, 2)
    r = api.post(url, params={"format": "csv"}, content=csv, headers={"Content-Type": "text/plain"})
    assert (r.json()["first_offset"], r.json()["end_offset"]) == (2, 4)
    rows = [r for b in input_log(api.storage(BIDS)).read(0, 4) for r in b.to_pylist()]
    assert [(r["auction"], r["bidder"], r["price"]) for r in rows] == [
        (7, 42, 9.25),
        (8, 43, 1.0),
    ] * 2
    assert rows[1]["ts"] == dt.datetime(2024, 1, 1, 0, 1, 0, tzinfo=dt.UTC)


BAD_RECORDS = [
    (ndjson([bid(1), {**bid(2), "price": "cheap"}]), "application/x-ndjson"),
    (ndjson([bid(1), {**bid(2), "auction": "x"}]), "application/x-ndjson"),
    (ndjson([{**bid(1), "surprise": 1}]), "application/x-ndjson"),
    (b"not json at all\n", "application/x-ndjson"),
    (b"auction,bidder,price,ts\n1,2,3.0,2024-01-01T00:00:00Z\n1,x,3,2024\n", "text/csv"),
    (b"\n  \n", "application/x-ndjson"),
    # Arrow's JSON reader segfaulted on a bare null: the whole server process died.
    (b"null", "application/x-ndjson"),
    (ndjson([bid(1)]) + b"null\n[1, 2]\n", "application/x-ndjson"),
    (b'"text"\n', "application/x-ndjson"),
    # Invalid UTF-8 was stored, then every read of the view answered 500.
    (ndjson([bid(1)]) + b'{"auction": 2, "s": "bad\xff\xfe"}\n', "application/x-ndjson"),
    (b"ts,auction,bidder,price\n2024-01-01T00:00:09Z,7,42,9.25\xff\n", "text/csv"),
]


def test_ingest_errors_name_the_line_and_the_field(api: Api) -> None:
    api.create_pipeline(log_spec())
    url = f"pipelines/{BIDS}/ingest/bids"
    cases = [
        (ndjson([bid(1), bid(2)]) + b"null\n", "line 3", 3, None),
        (ndjson([bid(1)]) + b'{"auction": "\xff"}\n', "line 2: not valid UTF-8", 2, None),
        (ndjson([bid(1), {**bid(2), "surprise": 1}]), "unknown field 'surprise'", 2, "surprise"),
        (ndjson([bid(1)]) + b"{oops\n", "line 2: not JSON", 2, None),
    ]
    for content, text, line, field in cases:
        body = error(api.post(url, content=content, headers=NDJSON), 422, "invalid_input")
        assert text in body["message"], body
        assert body["details"]["line"] == line
        assert body["details"].get("field") == field
    assert input_log(api.storage(BIDS)).end() == 0


def test_ingest_rejects_bad_records_whole(api: Api) -> None:
    api.create_pipeline(log_spec())
    url = f"pipelines/{BIDS}/ingest/bids"
    assert api.post(url, content=ndjson([bid(0)]), headers=NDJSON).status_code == 200
    log = input_log(api.storage(BIDS))
    for content, content_type in BAD_RECORDS:
        r = api.post(url, content=content, headers={"Content-Type": content_type})
        error(r, 422, "invalid_input")
        assert log.end() == 1 and len(log.segments()) == 1, content
    # The stream still takes good records, at the next offset.
    assert api.post(url, content=ndjson([bid(5)]), headers=NDJSON).json()["first_offset"] == 1


def test_ingest_decimals_as_spark_reads_them(api: Api) -> None:
    """A decimal column takes JSON numbers from their own digits (never a double) and
    numeric strings, rounded HALF_UP to its scale, as Spark's readers do; a value with too
    many digits rejects the body, naming the line (or record) and the field. The stored
    values, and a view of them read through the API (strings of all their digits), are
    exact."""
    spec = with_changes(
        log_spec("money"),
        source={
            "kind": "log",
            "stream": "pay",
            "schema": {"who": "string", "amount": "decimal(38,2)", "rate": "decimal(5,5)"},
        },
        state=[],
        sql="CREATE VIEW v AS SELECT who, amount, rate FROM input",
        sinks=[{"name": "v", "kind": "view", "from": "v"}],
    )
    api.create_pipeline(spec)
    url = "pipelines/money/ingest/pay"
    body = (
        b'{"who": "a", "amount": 12345678901234567890123456789012.345, "rate": 0.000015}\n'
        b'{"who": "b", "amount": "1,000.005", "rate": 1e-5}\n'
        b'{"who": "c", "amount": null}\n'
    )
    r = api.post(url, content=body, headers=NDJSON)
    assert r.status_code == 200, r.text
    csv = b"who,amount,rate\nd,0.1,.5\ne,-0.125,\n"
    r = api.post(url, content=csv, headers={"Content-Type": "text/csv"})
    assert r.status_code == 200, r.text
    log = InputLog(
        str(api.storage("money") / "input-log" / "pay"),
        pa.schema(
            [("who", pa.string()), ("amount", pa.decimal128(38, 2)), ("rate", pa.decimal128(5, 5))]
        ),
    )
    rows = [r for b in log.read(0, 5) for r in b.to_pylist()]
    assert [(r["who"], r["amount"], r["rate"]) for r in rows] == [
        ("a", Decimal("12345678901234567890123456789012.35"), Decimal("0.00002")),
        ("b", Decimal("1000.01"), Decimal("0.00001")),
        ("c", None, None),
        ("d", Decimal("0.10"), Decimal("0.50000")),
        ("e", Decimal("-0.13"), None),
    ]
    bad = [
        (b'{"who": "a"}\n\n{"who": "b", "rate": 1.5}\n', NDJSON, "line 3, field 'rate'"),
        (b'{"who": "a", "amount": true}\n', NDJSON, "line 1, field 'amount'"),
        (b"who,amount,rate\na,1,0.1\nb,abc,0\n", {"Content-Type": "text/csv"}, "record 2 "),
    ]
    for content, headers, where in bad:
        got = error(api.post(url, content=content, headers=headers), 422, "invalid_input")
        assert where in got["message"], got
    assert log.end() == 5

    schema = pa.schema([("who", pa.string()), ("amount", pa.decimal128(38, 2))])
    with StorageLocation.open(str(api.storage("money"))) as loc:
        sink = ViewSink(ViewSinkSpec(name="v", kind="view", **{"from": "v"}), schema, loc)
        d = pa.table(
            {
                "who": ["a", "b"],
                "amount": pa.array([rows[0]["amount"], Decimal("0.00")], pa.decimal128(38, 2)),
                WEIGHT: pa.array([1, 1], pa.int64()),
            }
        )
        sink.write(1, d)
        loc.commit(step=1)
    got = api.get("pipelines/money/views/v").json()["rows"]
    assert got == [
        {"who": "a", "amount": "12345678901234567890123456789012.35"},
        {"who": "b", "amount": "0.00"},
    ]


def test_ingest_unknown_stream(api: Api) -> None:
    api.create_pipeline(log_spec())
    api.create_pipeline(clicks_spec())
    body = error(
        api.post(f"pipelines/{BIDS}/ingest/asks", content=ndjson([bid(0)]), headers=NDJSON),
        404,
        "not_found",
    )
    assert "'bids'" in body["message"]
    error(
        api.post(f"pipelines/{CLICKS}/ingest/bids", content=ndjson([bid(0)]), headers=NDJSON),
        404,
        "not_found",
    )
    assert not (api.storage(BIDS) / "input-log" / "asks").exists()
    viewer = api.token(Role.viewer)
    r = api.post(f"pipelines/{BIDS}/ingest/bids", token=viewer, content=ndjson([bid(0)]))
    error(r, 403, "forbidden")


def padded(limit: int) -> bytes:
    """A valid NDJSON body of exactly `limit` bytes."""
    body = ndjson([bid(i) for i in range(5)])
    assert len(body) < limit
    return body[:-1] + b" " * (limit - len(body)) + b"\n"


def test_ingest_body_limit(api: Api) -> None:
    api.create_pipeline(log_spec())
    url = f"pipelines/{BIDS}/ingest/bids"
    exact = padded(MAX_INGEST_BYTES)
    r = api.post(url, content=exact, headers=NDJSON)
    assert r.status_code == 200, r.text
    assert r.json()["end_offset"] == 5
    too_big = padded(MAX_INGEST_BYTES + 1)
    body = error(api.post(url, content=too_big, headers=NDJSON), 413, "payload_too_large")
    assert body["details"] == {"limit_bytes": MAX_INGEST_BYTES}

    def chunks(data: bytes) -> Iterator[bytes]:
        for i in range(0, len(data), 100):
            yield data[i : i + 100]

    r = api.post(url, content=chunks(too_big), headers=NDJSON)
    assert "content-length" not in r.request.headers  # really streamed
    error(r, 413, "payload_too_large")
    r = api.post(url, content=chunks(exact), headers=NDJSON)
    assert r.status_code == 200, r.text
    assert (r.json()["first_offset"], r.json()["end_offset"]) == (5, 10)
    assert input_log(api.storage(BIDS)).end() == 10


def test_json_body_limit(api: Api) -> None:
    doc = {"spec": clicks_spec(), "description": "x" * MAX_BODY_BYTES}
    error(api.post("pipelines", json=doc), 413, "payload_too_large")

    def stream() -> Iterator[bytes]:
        yield json.dumps(doc).encode()

    r = api.post("pipelines", content=stream(), headers={"Content-Type": "application/json"})
    error(r, 413, "payload_too_large")
    assert api.get("pipelines").json() == []
    # The larger ingest limit applies to ingest only.
    assert MAX_INGEST_BYTES < MAX_BODY_BYTES
    api.create_pipeline(with_changes(clicks_spec(), name="a" * 20))


def test_a_view_holding_invalid_utf8_still_reads(api: Api) -> None:
    """State stored before ingest checked UTF-8 is served with replacement characters."""
    api.create_pipeline(clicks_spec())
    schema = pa.schema([("user", pa.string()), ("clicks", pa.int64())])
    data = b"okbad\xff\xfe"
    users = pa.Array.from_buffers(
        pa.string(), 2, [None, pa.py_buffer(np.array([0, 2, 7], np.int32)), pa.py_buffer(data)]
    )
    d = pa.table({"user": users, "clicks": [1, 2], WEIGHT: pa.array([1, 1], pa.int64())})
    with StorageLocation.open(str(api.storage(CLICKS))) as loc:
        sink = ViewSink(ViewSinkSpec(name="v", kind="view", **{"from": "per_user"}), schema, loc)
        sink.write(1, d)
        loc.commit(step=1)
    r = api.get(f"pipelines/{CLICKS}/views/v")
    assert r.status_code == 200, r.text
    assert r.json()["rows"] == [
        {"user": "bad\ufffd\ufffd", "clicks": 2},
        {"user": "ok", "clicks": 1},
    ]


def test_view_reads(api: Api) -> None:
    api.create_pipeline(clicks_spec())
    url = f"pipelines/{CLICKS}/views/v"
    empty = api.get(url)
    assert empty.status_code == 200
    assert empty.json() == {
        "view": "v",
        "step": None,
        "checkpoint": None,
        "live": False,
        "rows": [],
    }
    uid = write_view(
        api.storage(CLICKS),
        "v",
        [
            delta([(1, 1, 1), (2, 1, 1), (3, 1, 1), (5, 1, 1)]),
            delta([(1, 1, -1), (1, 2, 1), (3, 1, -1), (3, 2, 1), (4, 5, 1), (5, 1, -1)]),
        ],
        step=7,
    )
    everything = [
        {"user": 1, "clicks": 2},
        {"user": 2, "clicks": 1},
        {"user": 3, "clicks": 2},
        {"user": 4, "clicks": 5},
    ]
    got = api.get(url).json()
    assert got == {"view": "v", "step": 7, "checkpoint": uid, "live": False, "rows": everything}
    assert api.get(url, params={"offset": 1, "limit": 2}).json()["rows"] == everything[1:3]
    assert api.get(url, params={"offset": 3, "limit": 10}).json()["rows"] == everything[3:]
    assert api.get(url, params={"offset": 9}).json()["rows"] == []
    by_key = api.get(url, params={"key": "3"}).json()
    assert by_key == {
        "view": "v",
        "step": 7,
        "checkpoint": uid,
        "live": False,
        "rows": [everything[2]],
    }
    assert api.get(url, params={"key": ["3", "2"]}).json()["rows"] == [everything[2]]
    assert api.get(url, params={"key": ["3", "1"]}).json()["rows"] == []
    assert api.get(url, params={"key": "5"}).json()["rows"] == []  # retracted to zero
    assert api.get(url, params={"key": "99"}).json()["rows"] == []

    error(api.get(url, params={"key": "three"}), 422, "invalid_input")
    error(api.get(url, params={"key": ["1", "2", "3"]}), 422, "invalid_input")
    error(api.get(url, params={"limit": 0}), 422, "invalid_request")
    error(api.get(f"pipelines/{CLICKS}/views/nope"), 404, "not_found")
    error(api.get(f"pipelines/{CLICKS}/views/out"), 404, "not_found")  # a files sink

    # The newest checkpoint is what is served.
    uid2 = write_view(api.storage(CLICKS), "v", [delta([(2, 1, -1), (6, 3, 1)])], step=9)
    got = api.get(url).json()
    assert (got["step"], got["checkpoint"]) == (9, uid2)
    assert got["rows"] == [everything[0], everything[2], everything[3], {"user": 6, "clicks": 3}]

    # A corrupt file is an error naming it, never an empty or partial answer.
    storage = api.storage(CLICKS)
    batch = max(storage.glob("*.batch"), key=lambda f: f.stat().st_mtime)
    raw = bytearray(batch.read_bytes())
    raw[len(raw) // 3] ^= 0xFF
    batch.write_bytes(bytes(raw))
    body = error(api.get(url), 503, "state_unavailable")
    assert batch.name in body["message"]
    batch.unlink()
    body = error(api.get(url), 503, "state_unavailable")
    assert batch.name in body["message"]


def test_ingest_into_each_log_table_of_a_sql_pipeline(api: Api) -> None:
    spec = with_changes(
        log_spec("two-logs"),
        state=[],
        tables=[
            {"kind": "log", "table": "sellers", "stream": "sellers", "schema": {"id": "bigint"}}
        ],
        sql="CREATE VIEW v AS SELECT b.* FROM input b JOIN sellers s ON b.bidder = s.id",
        sinks=[{"name": "v", "kind": "view", "from": "v"}],
    )
    api.create_pipeline(spec)
    # The storage lost its logs after a checkpoint that consumed 5 sellers and 2 bids.
    with StorageLocation.open(str(api.storage("two-logs")), checkpoint="none") as loc:
        loc.commit(step=1, metadata={"source_offsets": {"input": 2, "sellers": 5}})
    r = api.post("pipelines/two-logs/ingest/sellers", content=b'{"id": 1}\n', headers=NDJSON)
    assert r.status_code == 200, r.text
    assert (r.json()["first_offset"], r.json()["end_offset"]) == (5, 6)
    r = api.post("pipelines/two-logs/ingest/bids", content=ndjson([bid(1)]), headers=NDJSON)
    assert (r.json()["first_offset"], r.json()["end_offset"]) == (2, 3)
    r = api.post("pipelines/two-logs/ingest/nope", content=b'{"id": 1}\n', headers=NDJSON)
    assert "its streams: 'bids', 'sellers'" in error(r, 404, "not_found")["message"]
    (listed,) = api.get("pipelines/two-logs/checkpoints").json()
    assert (listed["source_offset"], listed["source_offsets"]) == (2, {"input": 2, "sellers": 5})


def _customers_spec() -> dict[str, Any]:
    return {
        "name": "customers",
        "tables": [
            {
                "kind": "log",
                "stream": "customers",
                "table": "customers",
                "schema": {"id": "bigint", "city": "string"},
                "upsert": {"key": ["id"]},
            }
        ],
        "sql": "CREATE VIEW per_city AS SELECT city, count(*) AS n FROM customers GROUP BY city",
        "sinks": [{"name": "per_city", "kind": "view", "from": "per_city"}],
    }


def test_ingest_of_changes_takes_known_ops_and_keys_only(api: Api) -> None:
    """An upserted table's records: upserts (no op, or a CDC tool's words) and deletes (any
    case); a record without its key, or with another op, rejects the body naming it."""
    api.create_pipeline(_customers_spec())
    url = "pipelines/customers/ingest/customers"
    good = [
        {"id": 1, "city": "lyon"},
        {"id": 2, "city": "oslo", "op": "upsert"},
        {"id": 1, "city": "rome", "op": "U"},
        {"id": 2, "op": "DELETE"},
    ]
    r = api.post(url, content=ndjson(good), headers=NDJSON)
    assert r.status_code == 200 and r.json()["end_offset"] == 4, r.text
    log = InputLog(
        str(api.storage("customers") / "input-log" / "customers"),
        pa.schema([("id", pa.int64()), ("city", pa.string()), ("op", pa.string())]),
    )
    assert [r["op"] for b in log.read(0, 4) for r in b.to_pylist()] == [
        None,
        "upsert",
        "U",
        "DELETE",
    ]
    for records, text, field in [
        ([{"id": 3, "city": "x"}, {"city": "y"}], "record 2: key column 'id' is missing", "id"),
        ([{"id": 3, "op": "truncate"}], "record 1: op 'truncate' is not one of", "op"),
    ]:
        body = error(api.post(url, content=ndjson(records), headers=NDJSON), 422, "invalid_input")
        assert text in body["message"] and body["details"]["field"] == field, body
    assert log.end() == 4


def test_views_as_of_older_checkpoints_and_their_diff(api: Api) -> None:
    """Time travel: a view read as of three checkpoints (by uuid, identifier-free step
    number, and `latest`) equals its content recorded at that step; a diff equals the
    difference of two reads."""
    api.create_pipeline(clicks_spec())
    url = f"pipelines/{CLICKS}/views/v"
    storage = api.storage(CLICKS)
    steps = {
        3: [delta([(1, 1, 1), (2, 1, 1), (3, 4, 1)])],
        5: [delta([(1, 1, -1), (1, 2, 1), (4, 1, 1)]), delta([(2, 1, -1)])],
        8: [delta([(3, 4, -1), (3, 5, 1), (2, 7, 1), (5, 1, 1)])],
    }
    uids, recorded, live = {}, {}, Counter[tuple[int, int]]()
    for step, deltas in steps.items():
        uids[step] = write_view(storage, "v", deltas, step=step)
        for d in deltas:
            for r in d.to_pylist():
                live[(r["user"], r["clicks"])] += r[WEIGHT]
        recorded[step] = [{"user": u, "clicks": c} for (u, c) in sorted(+live)]
    for step, uid in uids.items():
        for ref in (uid, str(step)):
            got = api.get(url, params={"as_of": ref}).json()
            assert got == {
                "view": "v",
                "step": step,
                "checkpoint": uid,
                "live": False,
                "rows": recorded[step],
            }
    assert api.get(url, params={"as_of": "latest"}).json()["rows"] == recorded[8]
    # Keys and pages apply to the past too.
    assert api.get(url, params={"as_of": "3", "key": "3"}).json()["rows"] == [
        {"user": 3, "clicks": 4}
    ]

    d = api.get(f"{url}/diff", params={"from": "3", "to": uids[8]}).json()
    assert (d["from"], d["to"]) == (
        {"checkpoint": uids[3], "step": 3},
        {"checkpoint": uids[8], "step": 8},
    )
    want = Counter({(r["user"], r["clicks"]): 1 for r in recorded[8]})
    want.subtract({(r["user"], r["clicks"]): 1 for r in recorded[3]})
    assert {(r["user"], r["clicks"]): r["weight"] for r in d["rows"]} == {
        k: n for k, n in want.items() if n
    }
    assert api.get(f"{url}/diff", params={"from": "8"}).json()["rows"] == []  # to: latest

    body = error(api.get(url, params={"as_of": "4"}), 404, "not_found")
    assert "step 4" in body["message"] and "3, 5, 8" in body["message"]
    error(api.get(url, params={"as_of": "no-such-checkpoint"}), 404, "not_found")
    error(api.get(f"{url}/diff", params={"from": "no-such"}), 404, "not_found")
    error(api.get(f"{url}/diff"), 422, "invalid_input")  # `from` is required


def test_a_read_racing_a_gc_is_right_or_refused(api: Api) -> None:
    """Reads of an old checkpoint while another thread deletes checkpoints: each answer is
    the checkpoint's recorded rows, or 404/410, never a wrong answer."""
    api.create_pipeline(clicks_spec())
    url = f"pipelines/{CLICKS}/views/v"
    storage = api.storage(CLICKS)
    outcomes: Counter[int] = Counter()
    for trial in range(12):
        rows = [(trial * 100 + i, i, 1) for i in range(200)]
        uid = write_view(storage, "v", [delta(rows)], step=2 * trial + 1)
        write_view(storage, "v", [delta([(trial * 100, 0, -1)])], step=2 * trial + 2)
        want = sorted(
            ({"user": u, "clicks": c} for u, c, _ in rows),
            key=lambda r: (r["user"], r["clicks"]),
        )
        want_all = api.get(url, params={"as_of": uid, "limit": 10_000}).json()["rows"]
        assert len(want_all) >= 200

        def collect(uid: str) -> None:
            with StorageLocation.open(str(storage)) as loc:
                loc.delete_checkpoint(uid)

        t = threading.Timer(0.001 * (trial % 4), collect, args=(uid,))
        t.start()
        r = api.get(url, params={"as_of": uid, "limit": 10_000})
        t.join()
        outcomes[r.status_code] += 1
        if r.status_code == 200:
            assert r.json()["rows"] == want_all and r.json()["checkpoint"] == uid
            assert all(w in r.json()["rows"] for w in want)
        else:
            assert r.status_code in (404, 410), r.text
            assert r.json()["code"] in ("not_found", "checkpoint_collected")
    assert sum(outcomes.values()) == 12
