"""Same step, same input: a step redone after a SIGKILL reads exactly the offsets it read the
first time (the run's offset log, `workers/offset_log.py`), however much more input there is
by then; and the log itself: which entries a restored run redoes, which it forgets."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from storage_engine.location_view import list_checkpoints
from storage_engine.schema import WEIGHT
from workers.offset_log import OffsetLog
from workers.sinks import STEP

from .test_exactly_once import run

T = "input"


def test_pending_steps_follow_the_restored_offset_and_stop_at_a_gap(tmp_path: Path) -> None:
    log = OffsetLog(str(tmp_path))
    for step, (a, b) in enumerate([(0, 5), (5, 9), (9, 14), (14, 20)], start=1):
        log.record(step, {T: (a, b)})
    reopened = OffsetLog(str(tmp_path))
    assert [e[T] for e in reopened.pending(2, {T: 9})] == [(9, 14), (14, 20)]
    assert reopened.pending(2, {T: 8}) == []  # not the input step 3 followed
    assert reopened.pending(4, {T: 20}) == []
    assert reopened.pending(2, {"other": 9}) == []
    (tmp_path / "offsets" / "step-000000000004.json").write_text("{not json")
    assert [e[T] for e in OffsetLog(str(tmp_path)).pending(2, {T: 9})] == [(9, 14)]


def test_a_step_with_other_input_forgets_the_steps_logged_after_it(tmp_path: Path) -> None:
    log = OffsetLog(str(tmp_path))
    for step, (a, b) in enumerate([(0, 5), (5, 9), (9, 14)], start=1):
        log.record(step, {T: (a, b)})
    log.record(2, {T: (5, 7)})
    reopened = OffsetLog(str(tmp_path))
    assert [e[T] for e in reopened.pending(0, {T: 0})] == [(0, 5), (5, 7)]
    assert reopened.read(3) is None
    assert reopened.truncate_through(1) == 1
    assert sorted(p.name for p in (tmp_path / "offsets").iterdir()) == ["step-000000000002.json"]


SPEC = """
name: replay
source: {{kind: datagen, generator: clicks, seed: 3, users: 50, rows_per_second: 3000,
         limit: {limit}}}
state:
  - name: per_user
    kind: aggregate
    group_by: [user]
    aggregates: [{{name: n, func: count}}, {{name: total, func: sum, column: amount}}]
sinks:
  - {{name: out, kind: files, from: per_user, path: {out}}}
checkpoint: {{every_steps: 4, asynchronous: false}}
trigger: {{interval: 100ms}}
"""


def _per_step(out: Path) -> dict[int, list[tuple[object, ...]]]:
    rows = pq.read_table(str(out)).to_pylist() if any(out.iterdir()) else []
    steps: dict[int, list[tuple[object, ...]]] = {}
    for r in rows:
        steps.setdefault(r[STEP], []).append((r["user"], r["n"], r["total"], r[WEIGHT]))
    return {s: sorted(v, key=repr) for s, v in steps.items()}


def test_steps_redone_after_a_sigkill_read_the_same_input(tmp_path: Path) -> None:
    """A datagen source's step ends depend on when Spark asks (the rate): without the log,
    the steps after the checkpoint would be redone with other row ranges, so other output."""
    out = tmp_path / "out"
    out.mkdir()
    limit = 60_000
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(SPEC.format(limit=limit, out=out))
    assert run(tmp_path, spec_path, 0.0, after_steps=7) is None  # killed at its 7th step
    first = _per_step(out)
    checkpoint = list_checkpoints(tmp_path / "state").checkpoints[-1].step
    redone = sorted(s for s in first if s > checkpoint)
    assert redone, (checkpoint, sorted(first))

    run(tmp_path, spec_path, None)  # to the limit
    again = _per_step(out)
    for s in redone:
        assert again[s] == first[s], f"step {s} was redone with other output"
    # The whole input, once: each user's final count and total are the generator's.
    final: dict[object, tuple[object, object]] = {}
    for s in sorted(again):
        for user, n, total, w in again[s]:
            if w > 0:
                final[user] = (n, total)
    assert sum(n for n, _ in final.values()) == limit  # type: ignore[misc]
