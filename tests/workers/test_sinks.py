"""Sinks without Spark: idempotent by step, rolled back past a restored step, views readable
by key and by page."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from storage_engine import StorageLocation
from storage_engine.schema import WEIGHT
from workers.sinks import FilesSink, ViewSink
from workers.spec import FilesSink as FilesSpec
from workers.spec import ViewSink as ViewSpec

SCHEMA = pa.schema([("user", pa.string()), ("n", pa.int64())])


def delta(rows: list[tuple[str, int, int]]) -> pa.Table:
    return pa.table(
        {
            "user": [r[0] for r in rows],
            "n": [r[1] for r in rows],
            WEIGHT: pa.array([r[2] for r in rows], pa.int64()),
        }
    )


def test_files_sink_is_idempotent_and_rolls_back(tmp_path: Path) -> None:
    s = FilesSink(
        FilesSpec(name="out", kind="files", **{"from": "op"}, path="o", format="jsonl"),
        str(tmp_path),
    )
    s.write(1, delta([("a", 1, 1)]))
    s.write(2, delta([("a", 1, -1), ("a", 2, 1)]))
    s.write(2, delta([("a", 1, -1), ("a", 2, 1)]))  # a redone step replaces itself
    s.write(3, delta([]))  # nothing to write
    assert s.steps() == [1, 2]
    s.rollback(1)
    assert s.steps() == [1]
    t = s.read_all()
    assert t is not None and t.num_rows == 1


def test_view_sink_by_key_and_page(tmp_path: Path) -> None:
    with StorageLocation.open(str(tmp_path)) as loc:
        v = ViewSink(ViewSpec(name="v", kind="view", **{"from": "op"}), SCHEMA, loc)
        v.write(1, delta([("a", 1, 1), ("b", 1, 1), ("c", 5, 1)]))
        v.write(2, delta([("a", 1, -1), ("a", 2, 1)]))
        assert v.get(["a"]) == [{"user": "a", "n": 2}]
        assert v.get(["zz"]) == []
        assert [r["user"] for r in v.page(0, 2)] == ["a", "b"]
        assert [r["user"] for r in v.page(2, 2)] == ["c"]
        uid = loc.commit(step=2)
    # The view is part of the checkpoint: restored with the state.
    with StorageLocation.open(str(tmp_path), checkpoint=uid) as loc:
        v = ViewSink(ViewSpec(name="v", kind="view", **{"from": "op"}), SCHEMA, loc)
        assert v.page(0, 10) == [
            {"user": "a", "n": 2},
            {"user": "b", "n": 1},
            {"user": "c", "n": 5},
        ]
