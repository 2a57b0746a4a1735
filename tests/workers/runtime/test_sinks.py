"""Sinks without Spark: idempotent by step, rolled back past a restored step, views readable
by key and by page."""

from __future__ import annotations

import json
import os
from decimal import Decimal
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline_spec.model import FilesSink as FilesSpec
from pipeline_spec.model import PostgresSink as PgSpec
from pipeline_spec.model import ViewSink as ViewSpec
from pipeline_spec.model import outside_roots
from storage_engine import StorageLocation
from storage_engine.key_range import KeyRange
from storage_engine.location_view import to_jsonable
from storage_engine.schema import WEIGHT
from workers.runtime.connectors import files_sink
from workers.runtime.connectors.files_sink import FilesSink
from workers.runtime.connectors.postgres_sink import PostgresSink
from workers.runtime.connectors.sink import SinkConflictError
from workers.runtime.connectors.view_sink import ViewSink
from workers.runtime.input_files import list_input_files

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "examples"

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
        got = v.lookup(KeyRange(("a",)))
        assert (got.step, got.rows.to_pylist()) == (2, [{"user": "a", "n": 2}])
        assert v.lookup(KeyRange(("zz",))).rows.to_pylist() == []
        assert [r["user"] for r in v.lookup(None, 0, 2).rows.to_pylist()] == ["a", "b"]
        assert [r["user"] for r in v.lookup(None, 2, 2).rows.to_pylist()] == ["c"]
        assert [r["user"] for r in v.lookup(KeyRange((), "b")).rows.to_pylist()] == ["b", "c"]
        uid = loc.commit(step=2)
    # The view is part of the checkpoint: restored with the state.
    with StorageLocation.open(str(tmp_path), checkpoint=uid) as loc:
        v = ViewSink(ViewSpec(name="v", kind="view", **{"from": "op"}), SCHEMA, loc)
        v.rollback(2)
        assert v.lookup(None, 0, 10).rows.to_pylist() == [
            {"user": "a", "n": 2},
            {"user": "b", "n": 1},
            {"user": "c", "n": 5},
        ]


DECIMALS = pa.schema([("price", pa.decimal128(38, 10)), ("tiny", pa.decimal128(12, 8))])
DECIMAL_ROWS = {
    "price": [Decimal("-" + "9" * 28 + ".9999999999"), Decimal("1.5"), None],
    "tiny": [Decimal(0), Decimal("0.00000001"), Decimal("-1234.5")],
}


def test_files_sinks_keep_every_digit_of_a_decimal(tmp_path: Path) -> None:
    """Parquet keeps decimal(p, s) as it is; JSON lines writes a decimal as a string of all
    its digits, plainly, at its scale (never a double, never 1E-8)."""
    rows = pa.table({**DECIMAL_ROWS, WEIGHT: pa.array([1, 1, -1], pa.int64())})
    for fmt in ("parquet", "jsonl"):
        spec = FilesSpec(name=fmt, kind="files", **{"from": "op"}, path=fmt, format=fmt)
        sink = FilesSink(spec, str(tmp_path))
        sink.write(1, rows.cast(DECIMALS.append(pa.field(WEIGHT, pa.int64()))))
        if fmt == "parquet":
            got = pq.read_table(tmp_path / fmt / "step-000000000001.parquet")
            assert got.schema.field("price").type == pa.decimal128(38, 10)
            assert got.select(DECIMALS.names).to_pydict() == DECIMAL_ROWS
            continue
        lines = (tmp_path / fmt / "step-000000000001.jsonl").read_text().splitlines()
        assert [json.loads(line)["tiny"] for line in lines] == [
            "0.00000000",
            "0.00000001",
            "-1234.50000000",
        ]
        assert json.loads(lines[0])["price"] == "-" + "9" * 28 + ".9999999999"
        assert json.loads(lines[2])["price"] is None


def test_a_view_of_decimals_by_key_and_as_json(tmp_path: Path) -> None:
    """A view keyed by a decimal is looked up by it (given as a Decimal or as text); the
    REST API's rows (`to_jsonable`) carry decimals as strings of their digits."""
    with StorageLocation.open(str(tmp_path)) as loc:
        v = ViewSink(ViewSpec(name="v", kind="view", **{"from": "op"}), DECIMALS, loc)
        keys = [Decimal("1.0000000000"), Decimal("1.0000000001"), Decimal("1.0000000002")]
        v.write(
            1,
            pa.table({"price": keys, "tiny": [Decimal(0)] * 3, WEIGHT: [1, 1, 1]}).cast(
                DECIMALS.append(pa.field(WEIGHT, pa.int64()))
            ),
        )
        got = v.lookup(KeyRange((Decimal("1.0000000001"),))).rows.to_pylist()
        assert got == [{"price": Decimal("1.0000000001"), "tiny": Decimal(0)}]
        assert v.lookup(KeyRange(("1.0000000001",))).rows.to_pylist() == got
        assert to_jsonable(got) == [{"price": "1.0000000001", "tiny": "0.00000000"}]


def test_files_sink_output_is_fsynced_before_a_checkpoint_covers_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, step files were only renamed into place: a power loss could drop steps a
    checkpoint said were written."""
    synced: list[str] = []
    real = files_sink._fsync
    monkeypatch.setattr(files_sink, "_fsync", lambda p: (synced.append(p), real(p)))
    s = FilesSink(FilesSpec(name="out", kind="files", **{"from": "op"}, path="o"), str(tmp_path))
    s.write(1, delta([("a", 1, 1)]))
    s.write(2, delta([("b", 1, 1)]))
    assert synced == []  # not on the step's path
    s.sync()
    out = str(tmp_path / "o")
    assert synced == [f"{out}/step-{1:012d}.parquet", f"{out}/step-{2:012d}.parquet", out]
    synced.clear()
    s.sync()
    assert synced == []  # nothing new


def test_postgres_progress_is_the_pipelines_sinks_and_a_table_has_one_writer(
    pg_dsn: str,
) -> None:
    """Progress was keyed by table alone: two pipelines writing one table clobbered each
    other's progress, and each one's rollback deleted the other's rows."""
    spec = PgSpec(name="pg", kind="postgres", **{"from": "op"}, dsn=pg_dsn, table="t")
    a = PostgresSink(spec, SCHEMA, "pipe-a")
    a.write(1, delta([("a", 1, 1)]))
    with pytest.raises(SinkConflictError, match="pipe-a/pg"):
        PostgresSink(spec, SCHEMA, "pipe-b")
    a.close()
    again = PostgresSink(spec, SCHEMA, "pipe-a")  # the same sink reopens
    again.rollback(1)
    again.close()
    with psycopg.connect(pg_dsn) as c:
        rows = c.execute('SELECT sink, step, "table" FROM spindle_sink_progress').fetchall()
    assert rows == [("pipe-a/pg", 1, "t")]


def test_paths_are_checked_against_the_roots_when_a_run_opens_them(tmp_path: Path) -> None:
    """A sink path that did not exist when the spec was validated, made a symlink to a
    directory outside the file roots before the run: the run refuses it (it wrote there,
    and its rollback deleted files there). Checked before Spark starts."""
    from pipeline_spec.model import SpecError, parse_spec
    from workers.runtime.run_builder import open_runner

    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "step-000000000009.parquet").write_text("not yours")
    doc = yaml.safe_load((EXAMPLES / "clicks-per-user.yaml").read_text())
    doc["sinks"][0]["path"] = "out/clicks"
    spec = parse_spec(doc)
    assert outside_roots(spec, [root]) == []  # as validated
    (root / "out").mkdir()
    os.symlink(outside, root / "out" / "clicks")
    with pytest.raises(SpecError) as e:
        open_runner(spec, str(tmp_path / "state"), base_dir=str(root), files_roots=[str(root)])
    assert [f for f, _ in e.value.errors] == ["sinks.0.path"]
    assert (outside / "step-000000000009.parquet").read_text() == "not yours"


def test_a_run_checks_object_store_paths_against_its_object_roots(tmp_path: Path) -> None:
    """The driver's `--object-root`s, checked again as a run opens its sinks (before Spark):
    a delta sink's s3:// path outside them is refused."""
    from pipeline_spec.model import SpecError, parse_spec
    from workers.runtime.run_builder import open_runner

    doc = yaml.safe_load((EXAMPLES / "clicks-to-delta.yaml").read_text())
    doc["sinks"][1]["path"] = "s3://lake/checkpoints/t"
    with pytest.raises(SpecError) as e:
        open_runner(
            parse_spec(doc),
            str(tmp_path / "state"),
            base_dir=str(tmp_path),
            files_roots=[str(tmp_path)],
            object_roots=["s3://lake/tables"],
        )
    assert [f for f, _ in e.value.errors] == ["sinks.1.path"]


def test_a_files_source_reads_only_inside_the_roots(tmp_path: Path) -> None:
    """A symlinked file inside a source directory pointing out of the file roots was read."""
    root, secret = tmp_path / "root", tmp_path / "secret.json"
    (root / "in").mkdir(parents=True)
    (root / "elsewhere.json").write_text("{}\n")
    secret.write_text('{"password": "x"}\n')
    src = root / "in"
    (src / "a.json").write_text("{}\n")
    os.symlink(secret, src / "b.json")  # leads out of the root
    os.symlink(root / "elsewhere.json", src / "c.json")  # stays inside it
    assert list_input_files(str(src), str(root)) == ["a.json", "c.json"]
    assert list_input_files(str(src)) == ["a.json", "b.json", "c.json"]  # no roots: standalone
