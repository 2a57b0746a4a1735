"""Level 0's tasks read a partitioned step's input themselves (issue 50,
`partitioned/reads.py`): the driver ships splits, never rows. Splits are shared among the
tasks exactly once each; a step read by the tasks gives the views the same rows as the same
input handed over by the driver; a split that only Spark reads fails the step with
`SparkMustRead`, leaving no state behind."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from spindle_sql.dataflow import Dataflow
from spindle_sql.parse import parse
from spindle_sql.planner import plan
from workers.runtime.connectors.files_source import FilesReader
from workers.runtime.connectors.source import FileSplit, PartitionSplit, RangeSplit, Split, spread
from workers.runtime.micro_batch import ArrowShape
from workers.runtime.partitioned import PartitionedDataflow
from workers.runtime.partitioned.reads import (
    SparkMustRead,
    TableInput,
    TableReads,
    is_spark_must_read,
)

from .partitioned_check import outputs

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64())])
VIEWS = (
    "CREATE VIEW s AS SELECT k, count(*) AS n, sum(v) AS total FROM t GROUP BY k;"
    "CREATE VIEW big AS SELECT k, v FROM t WHERE v > 20"
)


def _records(splits: list[Split]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for s in splits:
        if isinstance(s, FileSplit):
            out.append((s.name, 0))
        elif isinstance(s, RangeSplit):
            out += [("range", i) for i in range(s.start, s.stop)]
        else:
            out += [(s.partition, i) for i in range(s.start, s.end)]
    return out


@pytest.mark.parametrize("tasks", [1, 2, 3, 7])
def test_spread_reads_every_record_once_and_the_same_way_twice(tasks: int) -> None:
    splits: list[Split] = [
        RangeSplit(10, 15, 15),
        PartitionSplit("t:0", 3, 9),
        PartitionSplit("t:1", 0, 1),
        *(FileSplit(f"f{i}", i, 4) for i in range(4)),
    ]
    got = spread(splits, tasks)
    assert len(got) == tasks and got == spread(splits, tasks)
    assert sorted(r for part in got for r in _records(part)) == sorted(_records(splits))
    # A range's records go to tasks in order, none empty; files round-robin.
    for part in got:
        assert all(
            (s.stop if isinstance(s, RangeSplit) else s.end) > s.start
            for s in part
            if not isinstance(s, FileSplit)
        )
    files = [[s.name for s in part if isinstance(s, FileSplit)] for part in got]
    assert files == [[f"f{i}" for i in range(4) if i % tasks == t] for t in range(tasks)]


def _write(d: Path, name: str, rows: list[dict[str, int]]) -> FileSplit:
    (d / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return FileSplit(name, 0, 0)


def test_a_step_read_by_level_zero_equals_the_rows_handed_over(tmp_path: Path) -> None:
    views = plan(parse(VIEWS), {"t": SCHEMA})

    def make() -> Dataflow:
        return Dataflow(views)

    (tmp_path / "in").mkdir()
    table = TableInput(
        "t",
        FilesReader("json", SCHEMA, str(tmp_path / "in"), None),
        ArrowShape(SCHEMA, None, None),
    )
    handed = PartitionedDataflow(make, 3, str(tmp_path / "handed"))
    reading = PartitionedDataflow(make, 3, str(tmp_path / "reading"))
    for step, sizes in enumerate([(5, 9), (1,), (0, 13, 2, 4)]):
        splits, rows = [], []
        for i, n in enumerate(sizes):
            part = [{"k": (step * 7 + j) % 4, "v": j * 3} for j in range(n)]
            splits.append(_write(tmp_path / "in", f"{step}-{i}.json", part))
            rows += part
        want = handed.step({"t": pa.Table.from_pylist(rows, SCHEMA)})
        got = reading.step({}, {"t": TableReads(table, spread(splits, 3))})
        assert outputs(got) == outputs(want)
        assert reading.last_reads["t"].rows_in == len(rows)
    assert reading.checkpoint()["operators"].keys() == handed.checkpoint()["operators"].keys()


def test_a_split_only_spark_reads_fails_the_step_and_keeps_nothing(tmp_path: Path) -> None:
    views = plan(parse(VIEWS), {"t": SCHEMA})

    def make() -> Dataflow:
        return Dataflow(views)

    d = tmp_path / "in"
    d.mkdir()
    table = TableInput(
        "t", FilesReader("json", SCHEMA, str(d), None), ArrowShape(SCHEMA, None, None)
    )
    flow = PartitionedDataflow(make, 2, str(tmp_path / "state"))
    good = _write(d, "a.json", [{"k": 1, "v": 30}])
    flow.step({}, {"t": TableReads(table, spread([good], 2))})
    before = flow.checkpoint()
    (d / "b.json").write_text('{"k": 2, "v": 31}\n{"k": oops\n')
    with pytest.raises(SparkMustRead) as e:
        flow.step({}, {"t": TableReads(table, spread([FileSplit("b.json", 0, 0)], 2))})
    assert is_spark_must_read(e.value) and "table 't'" in str(e.value)
    assert flow.checkpoint() == before
    # The step, read in the driver instead (as the runner does), goes on from there.
    got = flow.step({"t": pa.Table.from_pylist([{"k": 2, "v": 31}], SCHEMA)})
    assert got["big"].select(["k", "v"]).to_pylist() == [{"k": 2, "v": 31}]
    assert sorted(got["s"].select(["k", "n"]).to_pylist(), key=str) == [{"k": 2, "n": 1}]
