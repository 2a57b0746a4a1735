"""Spines: inserts with retractions, background merges, spills, lower bounds, scans, prefetch."""

from __future__ import annotations

import datetime as dt
import itertools
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_engine import (
    Batch,
    EngineSettings,
    SchemaMismatchError,
    StorageLocation,
    ZSetSchema,
    encoding,
)
from storage_engine.fileio import PosixFileLayer
from storage_engine.lookup.probes import key_table, probe_table
from storage_engine.merging import merge_stream
from storage_engine.spine import Spine
from tests.conftest import trials
from tests.polling import wait_until

from .strategies import (
    CASES,
    Model,
    Row,
    add_rows,
    assert_invariant,
    assert_matches,
    at_or_above,
    batch_files,
    batch_of,
    key_range,
    ordered_rows,
    restrict_keys,
    rows_strategy,
    sort_key,
)

INT = CASES["int64"].schema
FP = "fp-1"


def small(**over: Any) -> EngineSettings:
    """Settings that make blocks, merges and spills happen with a few hundred rows."""
    base: dict[str, Any] = dict(
        memory_budget_bytes=4096,
        max_memory_batch_bytes=2048,
        cache_budget_bytes=1 << 16,
        block_rows=8,
        merge_base_rows=8,
        merge_fanout=2,
        max_batches_per_spine=16,
    )
    base.update(over)
    return EngineSettings(**base)


def open_loc(path: Any, s: EngineSettings | None = None, **kw: Any) -> StorageLocation:
    return StorageLocation.open(str(path), fingerprint=FP, settings=s or small(), **kw)


def referenced(loc: StorageLocation) -> set[str]:
    out: set[str] = set()
    for c in loc.list_checkpoints():
        for meta in loc.checkpoint_spines(c.uuid).values():
            out |= set(meta.batches)
    return out


def int_batch(rng: np.random.Generator, n: int, keys: int = 300) -> tuple[Batch, list[Any]]:
    k = rng.integers(0, keys, n)
    v = rng.integers(0, 3, n)
    w = rng.choice([1, 1, 2, -1], n)
    rows = [((a,), (b,), c) for a, b, c in zip(k.tolist(), v.tolist(), w.tolist(), strict=True)]
    return Batch.from_columns(INT, {"k": k, "v": v}, w), rows


# -- inserts, reads and merges against the model --------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_inserts_with_retractions_match_model(name: str) -> None:
    case = CASES[name]

    @settings(
        max_examples=trials(12, 4),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(
        parts=st.lists(rows_strategy(case, 30), min_size=1, max_size=12),
        data=st.data(),
    )
    def check(parts: list[list[tuple[Row, Row, int]]], data: st.DataObject) -> None:
        with tempfile.TemporaryDirectory() as d, open_loc(d) as loc:
            sp = loc.spine("op", case.schema)
            model: Model = {}
            for i, rows in enumerate(parts):
                sp.insert(batch_of(case, rows))
                add_rows(model, rows)
                # retract half of what was inserted, sometimes
                if i % 3 == 2:
                    back = rows[: len(rows) // 2]
                    sp.insert(batch_of(case, rows[: len(rows) // 2]).negate())
                    add_rows(model, [(k, v, -w) for k, v, w in back])
            present = [r[0] for p in parts for r in p if None not in r[0]]
            pool = st.sampled_from(present) | case.key if present else case.key
            probes = data.draw(st.lists(pool.filter(lambda k: None not in k), max_size=8))
            lo = data.draw(st.none() | pool.filter(lambda k: None not in k))
            for _ in range(2):  # before and after the merges finish
                assert_matches(sp.to_batch(), model)
                assert_matches(sp.seek(probes), restrict_keys(model, case.nkeys, probes))
                assert_matches(sp.range(lo, None), key_range(model, case.nkeys, lo, None))
                loc.wait_idle()
            chunks = list(sp.scan(chunk_rows=5))
            assert_scan_is_ordered(chunks, model)

    check()


def assert_scan_is_ordered(chunks: list[Batch], model: Model) -> None:
    rows: list[tuple[Row, int]] = []
    for c in chunks:
        assert len(c) > 0
        assert_invariant(c)
        rows.extend(ordered_rows(c))
    for (a, _), (b, _) in itertools.pairwise(rows):
        assert sort_key(a) < sort_key(b), f"scan chunks overlap or are out of order: {a} {b}"
    assert dict(rows) == model


def test_background_merges_reduce_batch_count(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    s = small(
        memory_budget_bytes=64 << 20,
        max_memory_batch_bytes=32 << 20,
        merge_fanout=4,
        merge_base_rows=64,
        max_batches_per_spine=1000,
    )
    model: Model = {}
    with open_loc(tmp_path, s) as loc:
        sp = loc.spine("op", INT)
        for _ in range(64):
            b, rows = int_batch(rng, 20)
            sp.insert(b)
            add_rows(model, rows)
        loc.wait_idle()
        st_ = sp.stats()
        assert not st_.merging
        assert st_.merge_backlog == 0
        assert st_.batches < 20, st_
        assert st_.rows == sum(e.rows for e in sp.snapshot())
        assert_matches(sp.to_batch(), model)


def test_reads_during_merges_see_a_prefix_of_inserts(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    inserts = [int_batch(rng, int(rng.integers(5, 120)), keys=200) for _ in range(trials(90, 40))]
    models: list[dict[Row, int]] = [{}]
    for _, rows in inserts:
        models.append(add_rows(dict(models[-1]), rows))
    probes = [(k,) for k in range(0, 200, 7)]
    seek_models = [restrict_keys(m, 1, probes) for m in models]
    done = 0
    stop = threading.Event()
    errors: list[BaseException] = []
    checked = [0]

    with open_loc(tmp_path, small(memory_budget_bytes=16 << 10, block_rows=32)) as loc:
        sp = loc.spine("op", INT)

        def reader() -> None:
            try:
                while not stop.is_set():
                    lo = done
                    got = sp.to_batch()
                    hi = done
                    assert_invariant(got)
                    d = got.to_dict()
                    assert any(d == models[j] for j in range(lo, min(hi + 1, len(models) - 1) + 1))
                    lo = done
                    sk = sp.seek([p[0] for p in probes]).to_dict()
                    hi = done
                    assert any(
                        sk == seek_models[j] for j in range(lo, min(hi + 1, len(models) - 1) + 1)
                    )
                    checked[0] += 1
            except BaseException as e:
                errors.append(e)

        t = threading.Thread(target=reader)
        t.start()
        try:
            for b, _ in inserts:
                sp.insert(b)
                done += 1
                time.sleep(0.001)
        finally:
            stop.set()
            t.join()
        if errors:
            raise errors[0]
        assert checked[0] > 0
        loc.wait_idle()
        assert_matches(sp.to_batch(), models[-1])


@dataclass
class SpillRun:
    min_used: int
    max_used: int
    used_after: int
    mem_after: int
    files_after: set[str]
    live_after: set[str]
    limit: int


class SlowCreate(PosixFileLayer):
    """Real files, created a little slowly: spills overlap merges more often."""

    def create(self, path: str) -> Any:
        time.sleep(0.001)
        return super().create(path)


def _spill_run(path: Path, seed: int) -> SpillRun:
    """Many inserts under a tiny budget while merges run; checks state; reports accounting."""
    rng = np.random.default_rng(seed)
    limit = 48 << 10
    s = small(
        memory_budget_bytes=limit,
        max_memory_batch_bytes=16 << 10,
        block_rows=128,
        merge_base_rows=256,
        merge_fanout=3,
        max_batches_per_spine=12,
    )
    model: Model = {}
    lo, hi = 0, 0
    with open_loc(path, s, fs=SlowCreate()) as loc:
        sp = loc.spine("op", INT)
        for _ in range(trials(50, 25)):
            b, rows = int_batch(rng, 400, keys=5000)
            sp.insert(b)
            add_rows(model, rows)
            lo, hi = min(lo, loc.budget.used), max(hi, loc.budget.used)
        loc.wait_idle()
        assert batch_files(str(path)), "nothing was spilled to a file"
        assert sp.stats().file_bytes > 0
        assert_matches(sp.to_batch(), model)
        some = [(int(k),) for k in rng.integers(0, 5000, 50)]
        assert_matches(sp.seek([k[0] for k in some]), restrict_keys(model, 1, some))
        run = SpillRun(
            lo,
            hi,
            loc.budget.used,
            sum(e.mem_bytes for e in sp.snapshot()),
            batch_files(str(path)),
            sp.live_files() | referenced(loc),
            limit,
        )
        loc.commit()
    with open_loc(path, s) as loc:
        assert_matches(loc.spine("op", INT).to_batch(), model)
    return run


SPILL_SEEDS = range(trials(6, 3))


def test_spill_under_small_memory_budget_keeps_state(tmp_path: Path) -> None:
    for seed in SPILL_SEEDS:
        run = _spill_run(tmp_path / str(seed), seed)
        assert run.max_used <= run.limit + (64 << 10)


def test_memory_budget_accounting_stays_exact(tmp_path: Path) -> None:
    """budget.used is the bytes of in-memory batches: never negative, exact when idle."""
    for seed in SPILL_SEEDS:
        run = _spill_run(tmp_path / str(seed), seed)
        assert run.min_used >= 0, run
        assert run.used_after == run.mem_after, run
        assert run.used_after <= run.limit, run


def test_spills_and_merges_leak_no_batch_files(tmp_path: Path) -> None:
    """Once idle, every batch file on disk belongs to a live batch or a checkpoint."""
    for seed in SPILL_SEEDS:
        run = _spill_run(tmp_path / str(seed), seed)
        assert run.files_after == run.live_after, sorted(run.files_after - run.live_after)


def test_two_spines_share_a_budget(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    s = small(memory_budget_bytes=24 << 10, max_memory_batch_bytes=8 << 10, block_rows=64)
    models: dict[str, Model] = {"a": {}, "b": {}}
    with open_loc(tmp_path, s) as loc:
        sps = {n: loc.spine(n, INT) for n in models}
        for i in range(30):
            n = "ab"[i % 2]
            b, rows = int_batch(rng, 200)
            sps[n].insert(b)
            add_rows(models[n], rows)
        loc.wait_idle()
        total = sum(e.mem_bytes for sp in sps.values() for e in sp.snapshot())
        assert loc.budget.used == total <= 24 << 10
        for n, sp in sps.items():
            assert_matches(sp.to_batch(), models[n])


# -- lower bounds ----------------------------------------------------------------------------

_T0 = dt.datetime(2024, 3, 1)
_D0 = dt.date(2024, 3, 1)
BOUND_CASES: list[tuple[str, ZSetSchema, Any, Any]] = [
    ("int64", INT, lambda i: (i,), (50,)),
    ("string", CASES["string"].schema, lambda i: (f"k{i:03d}",), ("k050",)),
    (
        "timestamp",
        CASES["timestamp"].schema,
        lambda i: (_T0 + dt.timedelta(hours=i),),
        (_T0 + dt.timedelta(hours=50),),
    ),
    (
        "date",
        ZSetSchema.of([("d", pa.date32())], [("v", pa.int64())]),
        lambda i: (_D0 + dt.timedelta(days=i),),
        (_D0 + dt.timedelta(days=50),),
    ),
    ("composite_prefix", CASES["composite"].schema, lambda i: ("ab"[i % 2], i), ("b",)),
    ("composite_full", CASES["composite"].schema, lambda i: ("ab"[i % 2], i), ("a", 50)),
]


@pytest.mark.parametrize(
    ("name", "schema", "key", "bound"), BOUND_CASES, ids=[c[0] for c in BOUND_CASES]
)
def test_truncate_below_applies_to_reads_and_persists(
    tmp_path: Path, name: str, schema: ZSetSchema, key: Any, bound: Row
) -> None:
    nk = len(schema.keys)
    if not schema.values:
        vals: list[Any] = [None]
    elif pa.types.is_string(schema.values[0].type):
        vals = ["x", "y", ""]
    else:
        vals = [0, 1, 2]

    def rows(lo: int, hi: int, w: int = 1) -> list[tuple[Row, Row, int]]:
        return [(key(i), (v,) if v is not None else (), w) for i in range(lo, hi) for v in vals]

    model: Model = {}
    with open_loc(tmp_path, small(memory_budget_bytes=1 << 20, max_memory_batch_bytes=1024)) as loc:
        sp = loc.spine("op", schema)
        for lo in range(0, 100, 10):
            sp.insert(Batch.from_tuples(schema, rows(lo, lo + 10)))
            add_rows(model, rows(lo, lo + 10))
        sp.truncate_below(bound)
        model = at_or_above(model, nk, bound)
        assert_matches(sp.to_batch(), model)
        # a lower bound never moves down
        sp.truncate_below(key(0)[: len(bound)])
        assert_matches(sp.to_batch(), model)
        # rows inserted below the bound stay invisible
        sp.insert(Batch.from_tuples(schema, rows(0, 100, 2)))
        add_rows(model, at_or_above_rows(rows(0, 100, 2), nk, bound))
        all_keys = [key(i) for i in range(100)]
        assert_matches(sp.seek(all_keys), model)
        assert_matches(sp.range(None, None), model)
        assert_scan_is_ordered(list(sp.scan(chunk_rows=7)), model)
        loc.wait_idle()
        assert_matches(sp.to_batch(), model)
        uid = loc.commit()
        assert loc.checkpoint_spines(uid)["op"].lower_bound is not None
    with open_loc(tmp_path) as loc:
        sp = loc.spine("op", schema)
        assert sp.lower_bound is not None
        assert_matches(sp.to_batch(), model)
        assert_matches(sp.seek(all_keys), model)


def at_or_above_rows(
    rows: list[tuple[Row, Row, int]], nk: int, bound: Row
) -> list[tuple[Row, Row, int]]:
    keep = at_or_above({(*k, *v): 1 for k, v, _ in rows}, nk, bound)
    return [r for r in rows if (*r[0], *r[1]) in keep]


# -- scans -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["int64", "string", "composite", "nullable_int", "nullable_string"]
)
def test_scan_chunks_are_sorted_and_consolidated_across_files(name: str) -> None:
    case = CASES[name]
    s = small(merge_fanout=8, merge_base_rows=10_000)

    @settings(
        max_examples=trials(6, 2), deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    @given(parts=st.lists(rows_strategy(case, 60), min_size=4, max_size=8))
    def check(parts: list[list[tuple[Row, Row, int]]]) -> None:
        model: Model = {}
        with tempfile.TemporaryDirectory() as d:
            with open_loc(d, s) as loc:
                sp = loc.spine("op", case.schema)
                for rows in parts:
                    sp.insert(batch_of(case, rows))
                    add_rows(model, rows)
                loc.commit()  # every batch is now file-backed too
                for chunk_rows in (1, 3, 8, 1000):
                    assert_scan_is_ordered(list(sp.scan(chunk_rows=chunk_rows)), model)
            with open_loc(d, s) as loc:
                sp = loc.spine("op", case.schema)
                assert all(e.mem is None for e in sp.snapshot())
                assert_scan_is_ordered(list(sp.scan(chunk_rows=4)), model)
                assert_matches(sp.to_batch(), model)

    check()


@pytest.mark.parametrize("name", ["string", "composite", "int64"])
def test_merge_stream_with_the_chunks_key_encodings_equals_merging_without_them(
    name: str,
) -> None:
    """Chunks of in-memory batches carry slices of their key encodings into the merge
    (sparing a new encoding of their strings); the merged chunks must not change, whether
    the sources' string prefixes agree or not (they then fall back to a fresh encoding)."""
    case = CASES[name]

    def chunks(b: Batch, rows: int, keyed: bool) -> Any:
        enc = b.known_key_encoding if keyed else None
        for at in range(0, len(b), rows):
            yield b.data.slice(at, rows), None if enc is None else enc.slice(at, at + rows)

    @settings(
        max_examples=trials(20, 4), deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    @given(
        parts=st.lists(rows_strategy(case, 50), min_size=2, max_size=5),
        rows=st.integers(1, 12),
    )
    def check(parts: list[list[tuple[Row, Row, int]]], rows: int) -> None:
        batches = [batch_of(case, p) for p in parts]
        model: Model = {}
        for p in parts:
            add_rows(model, p)
        plain = list(merge_stream([chunks(b, rows, False) for b in batches], case.schema))
        keyed = list(merge_stream([chunks(b, rows, True) for b in batches], case.schema))
        assert [c.to_pylist() for c in keyed] == [c.to_pylist() for c in plain]
        assert_scan_is_ordered([Batch(case.schema, c) for c in keyed], model)

    check()


# -- prefetch --------------------------------------------------------------------------------


def test_prefetch_populates_the_cache(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    s = small(
        memory_budget_bytes=1 << 20,
        max_memory_batch_bytes=1 << 20,
        block_rows=64,
        cache_budget_bytes=8 << 20,
        merge_base_rows=1 << 20,
    )
    model: Model = {}
    with open_loc(tmp_path, s) as loc:
        sp = loc.spine("op", INT)
        for _ in range(3):
            b, rows = int_batch(rng, 2000, keys=100_000)
            sp.insert(b)
            add_rows(model, rows)
        loc.commit()
    with open_loc(tmp_path, s) as loc:
        sp = loc.spine("op", INT)
        probes = sorted({r[0] for r in list(model)[::40]})
        before = loc.cache.stats.prefetched
        sp.prefetch(probes)
        wait_until(lambda: loc.cache.stats.prefetched > before, 10, "a prefetch", every=0.01)
        time.sleep(0.2)
        hits = loc.cache.stats.hits
        got = sp.seek(probes)
        assert_matches(got, restrict_keys(model, 1, [(p,) for p in probes]))
        assert loc.cache.stats.hits > hits


# -- errors ----------------------------------------------------------------------------------


def test_insert_of_another_schema_is_refused(tmp_path: Path) -> None:
    with open_loc(tmp_path) as loc:
        sp = loc.spine("op", INT)
        other = CASES["string"].schema
        with pytest.raises(SchemaMismatchError):
            sp.insert(Batch.from_tuples(other, [(("a",), ("b",), 1)]))
        with pytest.raises(SchemaMismatchError):
            loc.spine("op", other)
        assert loc.spine("op", INT) is sp
        with pytest.raises(ValueError):
            loc.spine("bad/id", INT)


def test_empty_and_cancelling_inserts(tmp_path: Path) -> None:
    with open_loc(tmp_path) as loc:
        sp = loc.spine("op", INT)
        sp.insert(Batch.empty(INT))
        assert sp.stats().batches == 0
        b = Batch.from_tuples(INT, [((k,), (1,), 1) for k in range(40)])
        for _ in range(5):
            sp.insert(b)
            sp.insert(b.negate())
        loc.wait_idle()
        assert len(sp.to_batch()) == 0
        assert list(sp.scan()) == []
        assert len(sp.seek(list(range(40)))) == 0
        assert len(sp.range((0,), (40,))) == 0
        uid = loc.commit()
    with open_loc(tmp_path) as loc:
        assert loc.restored is not None and loc.restored.uuid == uid
        assert len(loc.spine("op", INT).to_batch()) == 0
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".mut")]


STR = ZSetSchema.of([("k", pa.string())], [("v", pa.int64())])
# Keys whose batches get different layouts: shared prefixes of several lengths, short and
# long values (more chunks), values that are prefixes of others.
str_keys = st.sampled_from(
    ["", "a", "ab", "abc", "abd", "user-0001", "user-0002", "user-00021", "zz" * 9, "zz" * 12]
)
str_batches = st.lists(
    st.lists(st.tuples(str_keys, st.integers(0, 2), st.sampled_from([1, -1, 2])), max_size=12),
    min_size=1,
    max_size=6,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(str_batches, st.lists(str_keys, max_size=12))
def test_string_seeks_across_batches_of_different_layouts_match_the_model(
    batches: list[list[tuple[str, int, int]]], probes: list[str]
) -> None:
    """A seek encodes its probes once per distinct batch layout and merges the batches'
    results with the encodings they carry: same answer as a dict, and the result's carried
    encoding serves a second seek on it."""
    with tempfile.TemporaryDirectory() as d:
        loc = open_loc(d, EngineSettings(max_batches_per_spine=64, merge_base_rows=1 << 20))
        try:
            spine = loc.spine("s", STR)
            model: dict[tuple[str, int], int] = {}
            for rows in batches:
                ks, vs, ws = zip(*rows, strict=True) if rows else ((), (), ())
                spine.insert(Batch.from_columns(STR, {"k": list(ks), "v": list(vs)}, list(ws)))
                for k, v, w in rows:
                    model[(k, v)] = model.get((k, v), 0) + w
            want = {(k, v): w for (k, v), w in model.items() if w and k in set(probes)}
            got = spine.seek(probes)
            assert got.to_dict() == want
            assert_invariant(got)
            again = got.seek(probes[: len(probes) // 2])
            half = set(probes[: len(probes) // 2])
            assert again.to_dict() == {r: w for r, w in want.items() if r[0] in half}
        finally:
            loc.close()


@pytest.mark.parametrize(
    ("schema", "inside", "outside"),
    [
        (INT, [3, 5, 7, 9], [-(2**40), 2, 10, 2**62]),
        (STR, ["b", "bb", "c", "d"], ["", "a", "dd", "zz"]),
        (
            ZSetSchema.of([("t", pa.timestamp("us"))], [("v", pa.int64())]),
            [dt.datetime(2024, 1, d) for d in (3, 5, 7, 9)],
            [dt.datetime(1999, 1, 1), dt.datetime(2024, 1, 2), dt.datetime(2030, 1, 1)],
        ),
        (
            ZSetSchema.of([("s", pa.string()), ("i", pa.int32())], [("v", pa.int64())]),
            [("b", 1), ("b", 9), ("c", -4), ("d", 0)],
            [("a", 1), ("e", 0)],
        ),
    ],
)
def test_probes_outside_the_spines_key_range_are_dropped_without_changing_the_answer(
    schema: ZSetSchema, inside: list[Any], outside: list[Any]
) -> None:
    """A seek drops probes outside the first key column's range over all batches before it
    sorts them: the same answer over batch files and over in-memory batches, and nulls
    (which sort first) are still looked up."""
    nk = len(schema.keys)
    rows = [((k if nk > 1 else (k,)), (1,), 1) for k in inside]
    want = Batch.from_tuples(schema, rows).to_dict()
    for settings_ in (small(memory_budget_bytes=1), EngineSettings()):  # files, memory
        with tempfile.TemporaryDirectory() as d, open_loc(d, settings_) as loc:
            sp = loc.spine("op", schema)
            sp.insert(Batch.from_tuples(schema, rows[:2]))
            sp.insert(Batch.from_tuples(schema, rows[2:]))
            files = {e.file is not None for e in sp.snapshot()}  # (merges may join them)
            assert files == {settings_.memory_budget_bytes == 1}
            assert sp.seek([*outside, *inside[::-1], *outside]).to_dict() == want
            assert len(sp.seek(outside)) == 0
    nullable = ZSetSchema.of([("k", pa.int64())], [("v", pa.int64())])
    b = Batch.from_tuples(nullable, [((None,), (1,), 2), ((4,), (1,), 1)])
    assert b.seek([None, 99]).to_dict() == {(None, 1): 2}
    with tempfile.TemporaryDirectory() as d, open_loc(d) as loc:
        sp = loc.spine("n", nullable)
        sp.insert(Batch.from_tuples(nullable, [((4,), (1,), 1)]))
        assert sp.seek([None, 4, 99]).to_dict() == {(4, 1): 1}
        sp.insert(b)
        assert sp.seek([None, 4, 99]).to_dict() == {(None, 1): 2, (4, 1): 2}


@pytest.mark.parametrize("name", ["string", "composite", "nullable_string", "int64"])
def test_a_lookups_probe_table_is_key_tables_and_its_encoding_is_the_probes(name: str) -> None:
    """`probe_table` (a spine's seek) gives `key_table`'s probes for any lead range,
    and the encoding it hands to the lookup's batches is exactly the encoding of those
    probes with the range's prefix cut (a string lead column), one row per probe."""
    case = CASES[name]
    names = case.schema.key_names
    shared = []  # lookups that handed an encoding on

    @settings(max_examples=trials(60, 10), deadline=None)
    @given(
        keys=st.lists(case.key, max_size=30),
        ends=st.tuples(case.key, case.key),
    )
    def check(keys: list[Row], ends: tuple[Row, Row]) -> None:
        firsts = sorted((e[0] for e in ends), key=lambda v: (v is not None, v))
        lead = None if firsts[0] is None else (firsts[0], firsts[1])
        for lead_range in (lead, None):
            probes, encodings = probe_table(keys, case.schema, lead_range)
            assert probes.equals(key_table(keys, case.schema, lead_range))
            shared.extend(encodings.by_cut)
            for cut, (enc, valid) in encodings.by_cut.items():
                assert valid is None and lead_range is not None
                assert isinstance(cut[0], bytes)
                assert all(v.encode().startswith(cut[0]) for v in probes.column(0).to_pylist())
                want = encoding.encode_prefixed(probes, names, cut)
                assert want is not None and bool(want[1].all())
                assert len(enc.cols) == len(want[0].cols)
                for got_col, want_col in zip(enc.cols, want[0].cols, strict=True):
                    assert np.array_equal(got_col, want_col)

    check()
    if name in ("string", "composite"):  # a string lead column: the encoding is handed on
        assert shared
    if name == "int64":
        assert not shared


def test_merges_of_disjoint_batches_run_at_once_on_the_merger_threads() -> None:
    """With two merger threads, a merge of new batches completes while an earlier merge is
    still running (held here until then), and the spine ends with what was inserted."""
    first_started, release = threading.Event(), threading.Event()
    seen: list[int] = []
    original = Spine._merge_entries

    def held(self: Spine, group: list[Any]) -> Any:
        if not seen:
            seen.append(len(group))
            first_started.set()
            assert release.wait(30)
        else:
            seen.append(len(group))
        return original(self, group)

    settings_ = EngineSettings(merge_threads=2, merge_fanout=2, merge_base_rows=1)
    with tempfile.TemporaryDirectory() as d, open_loc(d, settings_) as loc:
        sp = loc.spine("op", INT)
        model: Model = {}
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(Spine, "_merge_entries", held)
            for k in range(2):
                rows = [((k,), (0,), 1)]
                sp.insert(batch_of(CASES["int64"], rows))
                add_rows(model, rows)
            assert first_started.wait(30)
            for k in range(100, 104):  # two batches of 2 rows: the level above the first two
                rows = [((k,), (0,), 1), ((k + 50,), (0,), 1)]
                sp.insert(batch_of(CASES["int64"], rows))
                add_rows(model, rows)
            # A second merge runs while the first is held.
            wait_until(lambda: len(seen) >= 2, 30, "a second merge", every=0.01)
            release.set()
            loc.wait_idle()
        assert_matches(sp.to_batch(), model)


class _HeldDeferredSyncs(PosixFileLayer):
    """Holds every fsync of a file already renamed into place (a merge output's or a spill's,
    deferred to the sync thread) until `release` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.held: list[str] = []

    def create(self, path: str) -> Any:
        inner = super().create(path)
        layer = self

        class _File:
            def __init__(self) -> None:
                self.path = inner.path
                self.write, self.tell, self.flush = inner.write, inner.tell, inner.flush
                self.close = inner.close

            def sync(self) -> None:
                if not os.path.exists(inner.path):  # renamed before its sync: deferred
                    layer.held.append(inner.path)
                    assert layer.release.wait(30)
                inner.sync()

        return _File()


def test_merge_outputs_are_synced_off_the_merge_and_before_a_commit_names_them(
    tmp_path: Path,
) -> None:
    fs = _HeldDeferredSyncs()
    rng = np.random.default_rng(3)
    model: Model = {}
    s = small(memory_budget_bytes=1 << 20, max_memory_batch_bytes=256)
    with open_loc(tmp_path, s, fs=fs) as loc:
        sp = loc.spine("op", INT)
        for _ in range(8):
            b, rows = int_batch(rng, 20)
            sp.insert(b)
            add_rows(model, rows)
        loc.wait_idle()  # the merges are done (and swapped in) while their fsyncs are held
        assert fs.held and any(f.file is not None for f in sp.snapshot())
        handle = loc.commit_async(step=1)
        assert not handle._local.wait(0.2)  # the commit waits for the held fsyncs
        fs.release.set()
        handle.wait_local(30)
    with open_loc(tmp_path, s) as loc:
        assert_matches(loc.spine("op", INT).to_batch(), model)
