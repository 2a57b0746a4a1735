"""Same step, same input: a step redone after a SIGKILL reads exactly the offsets it read the
first time (the run's offset log, `workers/runtime/offset_log.py`), however much more input there is
by then; and the log itself: which entries a restored run redoes, which it forgets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from storage_engine.location_view import list_checkpoints
from storage_engine.objstore import DirectoryObjectStore, TierSettings
from storage_engine.schema import WEIGHT
from workers.runtime.connectors.files_sink import STEP
from workers.runtime.durability import DurabilityWatch
from workers.runtime.offset_log import OffsetLog

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


def test_a_steps_processing_time_is_logged_and_an_older_entry_gets_its_first_redos(
    tmp_path: Path,
) -> None:
    """Each entry holds its step's processing time (what PROCTIME() gives); an entry an
    earlier release wrote has none, until the first redo stamps its own time into it, which
    every later reader gets (its offsets kept)."""
    log = OffsetLog(str(tmp_path))
    log.record(1, {T: (0, 5)}, 1_700_000_000_000_000)
    log.record(2, {T: (5, 9)})  # as an earlier release wrote it
    reopened = OffsetLog(str(tmp_path))
    assert reopened.proctime(1) == 1_700_000_000_000_000
    assert reopened.proctime(2) is None
    assert reopened.proctime(3) is None
    reopened.stamp(2, 1_700_000_000_500_000)
    again = OffsetLog(str(tmp_path))
    assert again.proctime(2) == 1_700_000_000_500_000
    assert [e[T] for e in again.pending(0, {T: 0})] == [(0, 5), (5, 9)]
    with pytest.raises(ValueError, match="step 3 is not in the offset log"):
        again.stamp(3, 1)


def test_the_object_store_copy_follows_the_log_and_a_new_machine_takes_it(
    tmp_path: Path,
) -> None:
    store = DirectoryObjectStore(tmp_path / "store")
    store.ensure_bucket()
    log = OffsetLog(str(tmp_path / "a"), store=store)
    for step, (a, b) in enumerate([(0, 5), (5, 9), (9, 14), (14, 20)], start=1):
        log.record(step, {T: (a, b)})
    log.record(3, {T: (9, 12)})  # another input for step 3: step 4 is forgotten, there too
    assert log.truncate_through(1) == 1
    log.record(4, {T: (12, 13)})  # each record also brings the store's deletions in line
    assert sorted(o.key for o in store.list("offsets/")) == [
        f"offsets/step-00000000000{s}.json" for s in (2, 3, 4)
    ]
    moved = OffsetLog(str(tmp_path / "b"), store=store)  # a machine without a log
    assert [e[T] for e in moved.pending(1, {T: 5})] == [(5, 9), (9, 12), (12, 13)]
    # A machine with a log of its own keeps it.
    (tmp_path / "c" / "offsets").mkdir(parents=True)
    assert OffsetLog(str(tmp_path / "c"), store=store).pending(1, {T: 5}) == []


def test_while_the_store_is_down_entries_stay_local_and_follow_in_order(
    tmp_path: Path,
) -> None:
    """The store's root moved away is a store that refuses every put: the steps go on,
    the first failure is reported once, retries wait for their backoff (not every step),
    and once the store is back the entries it missed are put."""
    root = tmp_path / "store"
    store = DirectoryObjectStore(root, TierSettings(retry_max_wait_s=4.0))
    store.ensure_bucket()
    now = [100.0]
    events: list[dict[str, Any]] = []
    log = OffsetLog(
        str(tmp_path / "a"),
        store=store,
        on_error=DurabilityWatch(events.append, lambda: None).offsets_not_uploaded,
        clock=lambda: now[0],
    )
    log.record(1, {T: (0, 5)})
    root.rename(tmp_path / "away")
    log.record(2, {T: (5, 9)})
    log.record(3, {T: (9, 14)})  # within the backoff: not tried
    now[0] += 0.5
    log.record(4, {T: (14, 20)})  # tried, fails again: not reported again
    assert [e["event"] for e in events] == ["upload_failed"]  # the run's upload failures
    assert "offsets of step 2 were not uploaded" in events[0]["message"]
    (tmp_path / "away").rename(root)
    log.record(5, {T: (20, 21)})  # the backoff (1 s by now) is still running
    assert [o.key[-7:-5] for o in store.list("offsets/")] == ["01"]
    now[0] += 1.0
    assert log.mirror()
    assert [o.key[-7:-5] for o in store.list("offsets/")] == ["01", "02", "03", "04", "05"]


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
    _check_final(again, limit)


@pytest.mark.full
def test_steps_redone_on_another_machine_read_the_same_input(tmp_path: Path) -> None:
    """The same after the machine's disk is lost: the run restores from the object store
    (`--remote`) on an empty storage location, with the store's copy of the offset log."""
    out = tmp_path / "out"
    out.mkdir()
    limit = 60_000
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(SPEC.format(limit=limit, out=out))
    remote = ("--remote", f"file://{tmp_path / 'store'}")
    assert run(tmp_path, spec_path, 0.0, *remote, after_steps=7) is None
    first = _per_step(out)
    (tmp_path / "state").rename(tmp_path / "lost")
    run(tmp_path, spec_path, None, *remote)
    again = _per_step(out)
    assert len(first) >= 7
    for s in first:
        assert again[s] == first[s], f"step {s} was redone with other output"
    _check_final(again, limit)


def _check_final(steps: dict[int, list[tuple[object, ...]]], limit: int) -> None:
    """The whole input, once: the users' final counts add up to the generator's rows."""
    final: dict[object, tuple[object, object]] = {}
    for s in sorted(steps):
        for user, n, total, w in steps[s]:
            if w > 0:
                final[user] = (n, total)
    assert sum(n for n, _ in final.values()) == limit  # type: ignore[misc]


PROCTIME_SPEC = """
name: replay-proctime
source: {{kind: datagen, generator: clicks, seed: 3, users: 50, rows_per_second: 3000,
         limit: {limit}}}
sql: |
  CREATE VIEW per_user AS SELECT user, count(*) AS n, sum(amount) AS total,
    max(PROCTIME()) AS seen FROM input GROUP BY user
sinks:
  - {{name: out, kind: files, from: per_user, path: {out}}}
checkpoint: {{every_steps: 4, asynchronous: false}}
trigger: {{interval: 100ms}}
"""


def test_steps_redone_after_a_sigkill_get_the_same_processing_time(tmp_path: Path) -> None:
    """PROCTIME() is the step's logged processing time: the steps after the checkpoint,
    redone after a SIGKILL (seconds later on the wall clock), give the same rows, times and
    all, and each step's rows carry the time its offset log entry holds."""
    out = tmp_path / "out"
    out.mkdir()
    limit = 60_000
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(PROCTIME_SPEC.format(limit=limit, out=out))
    assert run(tmp_path, spec_path, 0.0, after_steps=7) is None
    first = _per_step_seen(out)
    checkpoint = list_checkpoints(tmp_path / "state").checkpoints[-1].step
    redone = sorted(s for s in first if s > checkpoint)
    assert redone, (checkpoint, sorted(first))

    run(tmp_path, spec_path, None)
    again = _per_step_seen(out)
    log = OffsetLog(str(tmp_path / "state"))
    for s in redone:
        assert again[s] == first[s], f"step {s} was redone with other output"
    for s, rows in again.items():
        logged = log.proctime(s)
        if logged is not None:  # entries up to the oldest checkpoint are trimmed
            assert {seen for *_, seen, w in rows if w > 0} == {logged}, s


def _per_step_seen(out: Path) -> dict[int, list[tuple[Any, ...]]]:
    rows = pq.read_table(str(out)).to_pylist() if any(out.iterdir()) else []
    steps: dict[int, list[tuple[Any, ...]]] = {}
    for r in rows:
        seen = r["seen"].timestamp() * 1_000_000 if r["seen"] is not None else None
        steps.setdefault(r[STEP], []).append((r["user"], r["n"], r["total"], seen, r[WEIGHT]))
    return {s: sorted(v, key=repr) for s, v in steps.items()}


def test_an_earlier_releases_entries_get_their_first_redos_time(tmp_path: Path) -> None:
    """Entries without a processing time (as a release before PROCTIME() wrote them): the
    run redoing their steps stamps its time into each before the step's output, and the
    step's rows carry that time."""
    out = tmp_path / "out"
    out.mkdir()
    spec_path = tmp_path / "spec.yaml"
    # Fewer steps than the runner's trimming period: the stamped entries stay to be read.
    spec_path.write_text(PROCTIME_SPEC.format(limit=12_000, out=out))
    assert run(tmp_path, spec_path, 0.0, after_steps=7) is None
    checkpoint = list_checkpoints(tmp_path / "state").checkpoints[-1].step
    entries = sorted((tmp_path / "state" / "offsets").glob("step-*.json"))
    stripped = []
    for e in entries:
        doc = json.loads(e.read_text())
        if doc["step"] > checkpoint:
            del doc["proctime_us"]
            e.write_text(json.dumps(doc))
            stripped.append(doc["step"])
    assert stripped, (checkpoint, [e.name for e in entries])

    run(tmp_path, spec_path, None)
    log = OffsetLog(str(tmp_path / "state"))
    again = _per_step_seen(out)
    for s in stripped:
        logged = log.proctime(s)
        assert logged is not None, f"step {s} was not stamped"
        assert {seen for *_, seen, w in again[s] if w > 0} == {logged}, s
