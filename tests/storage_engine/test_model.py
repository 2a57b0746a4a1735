"""Model-based test: a storage location driven by random operations against a dict model.

The reference tracks each spine's live Z-set (and lower bound) and, per retained checkpoint,
a snapshot of that state. Small settings make blocks, spills and merges happen.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from storage_engine import EngineSettings, StorageLocation, ZSetSchema
from tests.conftest import trials

from .strategies import (
    CASES,
    Model,
    Row,
    add_rows,
    assert_matches,
    at_or_above,
    batch_files,
    batch_of,
    cmp_prefix,
)

FP = "model-fp"
SPINES: dict[str, str] = {"ints": "int64", "pairs": "composite"}
ENGINE = EngineSettings(
    memory_budget_bytes=6 << 10,
    max_memory_batch_bytes=2 << 10,
    cache_budget_bytes=32 << 10,
    block_rows=64,
    merge_base_rows=32,
    merge_fanout=2,
    max_batches_per_spine=12,
)


@dataclass
class SpineState:
    rows: Model = field(default_factory=dict)
    bound: Row | None = None


def _schema(op: str) -> ZSetSchema:
    return CASES[SPINES[op]].schema


def _nkeys(op: str) -> int:
    return len(_schema(op).keys)


_row_strats = {
    op: st.lists(
        st.tuples(CASES[name].key, CASES[name].value, st.integers(-2, 3)), min_size=1, max_size=80
    )
    for op, name in SPINES.items()
}
_bound_strats = {
    "ints": st.tuples(st.integers(-6, 30)),
    "pairs": st.sampled_from(["a", "b", "c"]).flatmap(
        lambda s: st.just((s,)) | st.tuples(st.just(s), st.integers(-3, 5))
    ),
}


class LocationMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="spindle-model-")
        self.loc: StorageLocation | None = None
        self.live: dict[str, SpineState] = {op: SpineState() for op in SPINES}
        self.snapshots: dict[str, dict[str, SpineState]] = {}
        self.retained: list[str] = []
        # The model of the timeline: what "latest" restores, what the next commit descends
        # from, and every checkpoint's parent ever (deleted ones included).
        self.head: str | None = None
        self.base: str | None = None
        self.parent: dict[str, str | None] = {}
        self.commits = 0
        self.reopened = False
        self._open("none")

    # -- helpers --

    def _open(self, checkpoint: str | None) -> None:
        self.loc = StorageLocation.open(
            self.dir, fingerprint=FP, checkpoint=checkpoint, settings=ENGINE
        )
        for op in SPINES:
            self.loc.spine(op, _schema(op))

    def _close(self) -> None:
        if self.loc is not None:
            self.loc.close()
            self.loc = None

    def _spine(self, op: str) -> Any:
        assert self.loc is not None
        return self.loc.spine(op, _schema(op))

    def _reopen(self, checkpoint: str, expected: dict[str, SpineState]) -> None:
        self._close()
        self._open(checkpoint)
        self.live = copy.deepcopy(expected)
        self.reopened = True
        for op in SPINES:
            assert_matches(self._spine(op).to_batch(), self.live[op].rows)

    # -- rules --

    @rule(data=st.data(), op=st.sampled_from(sorted(SPINES)))
    def insert(self, data: st.DataObject, op: str) -> None:
        case = CASES[SPINES[op]]
        rows = data.draw(_row_strats[op])
        if data.draw(st.booleans()) and self.live[op].rows:
            # retract some rows that are there now
            old = sorted(self.live[op].rows.items())
            picked = data.draw(st.lists(st.sampled_from(old), max_size=20, unique=True))
            nk = case.nkeys
            rows += [(r[:nk], r[nk:], -w) for r, w in picked]
        self._spine(op).insert(batch_of(case, rows))
        s = self.live[op]
        add_rows(s.rows, [r for r in rows if s.bound is None or cmp_prefix(r[0], s.bound) >= 0])
        self.reopened = False

    @rule()
    def wait_for_merges(self) -> None:
        assert self.loc is not None
        self.loc.wait_idle()

    @rule(identifier=st.none() | st.sampled_from(["alpha", "beta"]))
    def commit(self, identifier: str | None) -> None:
        assert self.loc is not None
        self.commits += 1
        uid = self.loc.commit(identifier=identifier, step=self.commits)
        self.snapshots[uid] = copy.deepcopy(self.live)
        self.retained.append(uid)
        self.parent[uid] = self.base
        self.head = self.base = uid
        info = self.loc.list_checkpoints()[-1]
        assert info.uuid == uid and info.step == self.commits and info.identifier == identifier
        assert info.parent == self._survivor(self.parent[uid])

    @rule()
    def gc(self) -> None:
        assert self.loc is not None
        res = self.loc.gc_checkpoint()
        # The oldest, never the newest nor the head.
        cands = [u for u in self.retained[:-1] if u != self.head]
        if cands:
            victim = cands[0]
            self.retained.remove(victim)
            del self.snapshots[victim]
            assert res.deleted == [victim]
            self._deleted()
        else:
            assert res.deleted == []

    @precondition(lambda self: bool(self.retained))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        assert self.loc is not None
        uid = data.draw(st.sampled_from(self.retained))
        res = self.loc.delete_checkpoint(uid)
        assert res.deleted == [uid]
        self.retained.remove(uid)
        del self.snapshots[uid]
        self._deleted()

    @rule()
    def reopen_latest(self) -> None:
        # The head: the newest checkpoint of the timeline, not the newest listed.
        if self.head is not None:
            self._reopen("latest", self.snapshots[self.head])
        else:
            self._reopen("latest", {op: SpineState() for op in SPINES})
        self.base = self.head

    @precondition(lambda self: bool(self.retained))
    @rule(data=st.data())
    def restore(self, data: st.DataObject) -> None:
        uid = data.draw(st.sampled_from(self.retained))
        self._reopen(uid, self.snapshots[uid])
        assert self.loc is not None and self.loc.restored is not None
        assert self.loc.restored.uuid == uid
        self.head = self.base = uid

    @rule(data=st.data(), op=st.sampled_from(sorted(SPINES)))
    def truncate_below(self, data: st.DataObject, op: str) -> None:
        bound = data.draw(_bound_strats[op])
        self._spine(op).truncate_below(bound)
        s = self.live[op]
        if s.bound is None or _raises(s.bound, bound):
            s.bound = bound
        s.rows = at_or_above(s.rows, _nkeys(op), s.bound)

    def _survivor(self, uid: str | None) -> str | None:
        """`uid`, or its nearest retained ancestor if it was deleted."""
        while uid is not None and uid not in self.retained:
            uid = self.parent[uid]
        return uid

    def _deleted(self) -> None:
        self.head = self._survivor(self.head)
        self.base = self._survivor(self.base)

    # -- invariants --

    @invariant()
    def live_state_matches(self) -> None:
        for op in SPINES:
            assert_matches(self._spine(op).to_batch(), self.live[op].rows)

    @invariant()
    def checkpoints_match(self) -> None:
        assert self.loc is not None
        assert [c.uuid for c in self.loc.list_checkpoints()] == self.retained
        assert self.loc.head == self.head
        dirs = {n for n in os.listdir(self.dir) if os.path.isdir(os.path.join(self.dir, n))}
        assert dirs == set(self.retained)

    @invariant()
    def no_unreferenced_files_after_reopen(self) -> None:
        if not self.reopened:
            return
        assert self.loc is not None
        refs: set[str] = set()
        for uid in self.retained:
            for meta in self.loc.checkpoint_spines(uid).values():
                refs |= set(meta.batches)
        live = set().union(*(self._spine(op).live_files() for op in SPINES))
        assert batch_files(self.dir) == refs | live
        assert not [n for n in os.listdir(self.dir) if n.endswith(".mut")]

    def teardown(self) -> None:
        try:
            self._close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def _raises(old: Row, new: Row) -> bool:
    """Whether `new` is a higher lower bound than `old` (same rule as a key-prefix order)."""
    common = min(len(old), len(new))
    c = cmp_prefix(new[:common], old[:common])
    return c > 0 or (c == 0 and len(new) > len(old))


LocationMachine.TestCase.settings = settings(
    max_examples=trials(60, 15),
    stateful_step_count=trials(30, 20),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestLocationModel = LocationMachine.TestCase
