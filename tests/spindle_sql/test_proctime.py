"""PROCTIME(), NOW() and CURRENT_TIMESTAMP: the step's processing time, one value for every
row of a step (what the run's offset log recorded: tests/workers/runtime/test_offset_log.py
checks a redone step gets it again), and an error naming the function where a step has
none."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from spindle_sql.dataflow import Dataflow
from spindle_sql.errors import SqlError
from spindle_sql.functions import EvaluationError
from spindle_sql.parse import parse
from spindle_sql.planner import plan
from storage_engine.schema import WEIGHT

TABLES = {"t": pa.schema([("k", pa.int64())])}
T1 = 1_767_225_600_000_000  # 2026-01-01 00:00:00 UTC


def _flow(select: str) -> Dataflow:
    return Dataflow(plan(parse(f"CREATE VIEW out AS {select}"), TABLES))


def _rows(k: list[int]) -> dict[str, pa.Table]:
    return {"t": pa.table({"k": pa.array(k, pa.int64())})}


def test_every_spelling_is_the_steps_time_on_every_row() -> None:
    flow = _flow(
        "SELECT k, PROCTIME() AS a, NOW() AS b, CURRENT_TIMESTAMP AS c, "
        "CURRENT_TIMESTAMP() AS d FROM t WHERE PROCTIME() >= TIMESTAMP '2026-01-01 00:00:00'"
    )
    out = flow.step(_rows([1, 2, 3]), T1)["out"].drop_columns([WEIGHT])
    at = datetime(2026, 1, 1, tzinfo=UTC)
    assert out.to_pylist() == [{"k": k, "a": at, "b": at, "c": at, "d": at} for k in (1, 2, 3)]
    assert out.schema.field("a").type == pa.timestamp("us", tz="UTC")
    assert flow.step(_rows([4]), T1 - 1)["out"].num_rows == 0  # before 2026: filtered out


def test_a_step_without_a_processing_time_is_an_error() -> None:
    flow = _flow("SELECT k, PROCTIME() AS a FROM t")
    with pytest.raises(EvaluationError, match="PROCTIME\\(\\): this step has no processing"):
        flow.step(_rows([1]))


def test_a_precision_is_refused() -> None:
    with pytest.raises(SqlError, match="not supported"):
        _flow("SELECT k, CURRENT_TIMESTAMP(3) AS a FROM t")
