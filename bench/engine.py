"""Engine benchmark: Spindle's storage engine beside RocksDB (`rocksdict`), sqlite3 and a dict.

    python -m bench.engine [--quick] [--json] [--dir DIR] [--seed N] [--keys int64,string]

Everything runs in one process on one generated workload (fixed seed): a stream of Z-set
updates (key, value, weight) in steps of `step_rows` rows, keys uniform over `key_space`,
values uniform in [0, 16), weights +1 (90 %) or -1 (10 %). See `docs/benchmarks.md` for what
each figure means and what is timed; `NOTES` below says the same in the JSON.

Measured, for int64 keys and for string keys (``user-000001234567``):

- ingest rows/s of every system over the same steps (Spindle including its merges);
- batched point lookups/s, Spindle `seek` vs `rocksdict` multi-get, half the probes present;
- commit latency at a small and a large state (median, after a fixed-size delta);
- restore latency at the large state (open + spine + first lookup answered);
- throughput with the state 16x the memory budget over throughput with budgets above the state.

Why one long module: the same workload driven into every system side by side (Spindle and
each peer's adapter, the timing and the report) reads as one method; split, a reader would
jump between files to check that the systems are timed alike.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from storage_engine import Batch, EngineSettings, Spine, StorageLocation, ZSetSchema

from .report import (
    Log,
    clean,
    engine_revision,
    log_to_stderr,
    machine_info,
    median,
    package_version,
    quiet,
    versions,
)

IntArray = npt.NDArray[np.int64]

FINGERPRINT = "bench"
OP_ID = "op"
KEY_KINDS = ("int64", "string")
STRING_PREFIX = b"user-"
STRING_DIGITS = 12
VALUE_RANGE = 16
RETRACT_FRACTION = 0.1
LARGE_KEY_SPACE = 10**STRING_DIGITS  # state builds: keys practically never repeat
DEFAULT_SEED = 20240601
SQLITE_CACHE_BYTES = 256 << 20  # the same memory Spindle's default settings may hold


@dataclass(frozen=True)
class Profile:
    """Sizes of one benchmark mode. The large state is always 16x the memory budget."""

    name: str
    ingest_rows: int
    step_rows: int
    key_space: int
    ingest_repeats: int
    probe_rows: int
    lookup_repeats: int
    budget_bytes: int
    state_bytes_small: int
    delta_rows: int
    commit_repeats: int
    restore_repeats: int

    @property
    def state_bytes_large(self) -> int:
        return 16 * self.budget_bytes


PROFILES = {
    "full": Profile(
        name="full",
        ingest_rows=2_000_000,
        step_rows=100_000,
        key_space=10_000_000,
        ingest_repeats=3,
        probe_rows=100_000,
        lookup_repeats=5,
        budget_bytes=64 << 20,
        state_bytes_small=10 << 20,
        delta_rows=100_000,
        commit_repeats=9,
        restore_repeats=5,
    ),
    "quick": Profile(
        name="quick",
        ingest_rows=500_000,
        step_rows=100_000,
        key_space=10_000_000,
        ingest_repeats=3,
        probe_rows=100_000,
        lookup_repeats=3,
        budget_bytes=4 << 20,
        state_bytes_small=4 << 20,
        delta_rows=10_000,
        commit_repeats=5,
        restore_repeats=3,
    ),
    "smoke": Profile(
        name="smoke",
        ingest_rows=20_000,
        step_rows=5_000,
        key_space=100_000,
        ingest_repeats=1,
        probe_rows=2_000,
        lookup_repeats=1,
        budget_bytes=64 << 10,
        state_bytes_small=64 << 10,
        delta_rows=1_000,
        commit_repeats=1,
        restore_repeats=1,
    ),
}

# (result key, comparison, bound): evaluated per key kind at the mode's sizes.
TARGETS: tuple[tuple[str, str, float], ...] = (
    ("ingest_ratio_vs_rocksdict", ">=", 10.0),
    ("ingest_ratio_vs_sqlite", ">=", 10.0),
    ("lookup_ratio_vs_rocksdict", ">=", 20.0),
    ("commit_ratio_large_vs_small", "<=", 2.0),
    ("restore_ms_large", "<=", 1000.0),
    ("over_budget_ratio", ">=", 0.5),
)

NOTES = [
    "Workload: Z-set updates (key, value, weight), keys uniform over key_space, values uniform "
    "in [0, 16), weights +1 (90%) / -1 (10%), fixed seed, steps of step_rows rows; every "
    "system ingests the same steps in the same order.",
    "Spindle: per step Batch.from_columns (sort + consolidate) then Spine.insert; the ingest "
    "time includes Spine.wait_idle() at the end, so all merge work is counted. Default "
    "EngineSettings for the ingest and lookup comparison.",
    "rocksdict: raw_mode=True, bytes keys (8-byte big-endian ints or UTF-8), one WriteBatch "
    "per step, WAL disabled (Spindle has no per-insert log either; both are durable only at "
    "a checkpoint/flush). It does blind puts key->value: strictly less work than "
    "accumulating weights, so the ratio against it is conservative. Background compaction "
    "is not waited for.",
    "sqlite3: WAL, synchronous=NORMAL, cache_size 256 MiB, WITHOUT ROWID table with "
    "PRIMARY KEY (k, v); per step one transaction with executemany of INSERT ... ON "
    "CONFLICT(k, v) DO UPDATE SET w = w + excluded.w. Zero weights are kept, not deleted "
    "(less work than Spindle's consolidation).",
    "dict: d[(k, v)] = d.get((k, v), 0) + w in a Python loop; zero weights are kept.",
    "Timing of peers starts from the same NumPy/Arrow columns Spindle receives (a pipeline "
    "step holds Arrow columns), so converting them to bytes/Python objects is inside the "
    "timed region; the *_excl_conversion figures leave that conversion out.",
    "Lookups: probe_rows probe keys per round, half present in the state, half absent; "
    "Spindle Spine.seek(array) returns an Arrow batch of all matching rows; rocksdict "
    "db.get(list_of_bytes) returns one value per key (conversion of probes to bytes timed). "
    "One warm-up round, then the median of lookup_repeats rounds with fresh probes.",
    "Commit latency: both states built (keys from a 1e12 space, so rows barely collide), "
    "merges drained, committed once; then repeatedly, taking turns between the large and "
    "the small state: insert one delta of delta_rows rows, drain merges (untimed), time "
    "StorageLocation.commit(); median of commit_repeats. *_merging variants skip the drain, "
    "so the commit competes with running merges. Both sizes use the over-budget settings. "
    "Old checkpoints are garbage-collected between commits (untimed).",
    "Restore: close, then time StorageLocation.open + spine() + one seek of one present key; "
    "median. Files are in the OS page cache (warm), as after a process restart.",
    "over_budget_ratio: ingest rows/s building the large state (16x memory_budget_bytes; "
    "cache_budget_bytes set equal to the budget) / rows/s of the same ingest with memory, "
    "cache and max_memory_batch_bytes budgets all 8x the state (everything in memory). "
    "over_budget_ratio_vs_default_spill uses as baseline budgets 8x the state but the default "
    "max_memory_batch_bytes (large merge outputs still go to files). One run each.",
    "The machine is a shared, noisy VM: compare ratios measured within one run, not absolute "
    "figures across runs.",
]


# -- workload ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One step of updates: key ids, the key column as the engine gets it, values, weights."""

    ids: IntArray
    keys: Any  # IntArray for int64 keys, pa.StringArray for string keys
    vals: IntArray
    weights: IntArray

    def __len__(self) -> int:
        return len(self.ids)


def schema_for(kind: str) -> ZSetSchema:
    key_type = pa.int64() if kind == "int64" else pa.string()
    return ZSetSchema.of([("k", key_type)], [("v", pa.int64())])


def string_keys(ids: IntArray) -> pa.Array:
    """`user-` + 12 zero-padded digits, built column-wise (ids must be < 10**12)."""
    n = len(ids)
    width = len(STRING_PREFIX) + STRING_DIGITS
    chars = np.empty((n, width), dtype=np.uint8)
    chars[:, : len(STRING_PREFIX)] = np.frombuffer(STRING_PREFIX, dtype=np.uint8)
    x = np.asarray(ids, dtype=np.int64).copy()
    for j in range(width - 1, len(STRING_PREFIX) - 1, -1):
        chars[:, j] = 48 + x % 10
        x //= 10
    offsets = np.arange(0, width * (n + 1), width, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes()))


def key_column(kind: str, ids: IntArray) -> Any:
    return ids if kind == "int64" else string_keys(ids)


def make_steps(
    kind: str, rows: int, step_rows: int, key_space: int, rng: np.random.Generator
) -> list[Step]:
    steps = []
    for start in range(0, rows, step_rows):
        n = min(step_rows, rows - start)
        ids = rng.integers(0, key_space, n, dtype=np.int64)
        vals = rng.integers(0, VALUE_RANGE, n, dtype=np.int64)
        weights = np.where(rng.random(n) < RETRACT_FRACTION, -1, 1).astype(np.int64)
        steps.append(Step(ids, key_column(kind, ids), vals, weights))
    return steps


def make_probes(
    kind: str, steps: Sequence[Step], n: int, key_space: int, rng: np.random.Generator
) -> Step:
    """n probe keys in random order: half drawn from the ingested keys, half absent."""
    present = np.concatenate([s.ids for s in steps])
    half = n // 2
    ids = np.concatenate(
        [
            rng.choice(present, half),
            rng.integers(key_space, 2 * key_space, n - half, dtype=np.int64),
        ]
    )
    rng.shuffle(ids)
    empty = np.zeros(0, dtype=np.int64)
    return Step(ids, key_column(kind, ids), empty, empty)


def rows_for_bytes(kind: str, target: int, step_rows: int) -> int:
    """Rows whose batch files take about `target` bytes (Arrow body plus bloom bits)."""
    rng = np.random.default_rng(0)
    sample = make_steps(kind, 10_000, 10_000, LARGE_KEY_SPACE, rng)[0]
    b = spindle_batch(schema_for(kind), sample)
    per_row = b.nbytes / len(b) + 1.25
    rows = max(step_rows, int(target / per_row))
    return rows


# -- Spindle ----------------------------------------------------------------------------------


def spindle_batch(schema: ZSetSchema, s: Step) -> Batch:
    return Batch.from_columns(schema, {"k": s.keys, "v": s.vals}, s.weights)


def _settle() -> None:
    gc.collect()


def spindle_ingest(spine: Spine, steps: Sequence[Step]) -> float:
    """Seconds to insert every step and drain the merges they caused."""
    schema = spine.schema
    _settle()
    t0 = time.perf_counter()
    for s in steps:
        spine.insert(spindle_batch(schema, s))
    spine.wait_idle()
    return time.perf_counter() - t0


def spindle_lookup(spine: Spine, probes: Step) -> tuple[float, int]:
    _settle()
    t0 = time.perf_counter()
    found = spine.seek(probes.keys)
    elapsed = time.perf_counter() - t0
    keys = found.data.column("k")
    return elapsed, int(pc.count_distinct(keys).as_py()) if len(found) else 0


def spindle_state_check(spine: Spine) -> tuple[int, int]:
    rows = weight = 0
    for b in spine.scan():
        rows += len(b)
        weight += int(b.weights.sum())
    return rows, weight


def open_location(path: str, settings: EngineSettings) -> StorageLocation:
    return StorageLocation.open(path, fingerprint=FINGERPRINT, settings=settings)


# -- peers ------------------------------------------------------------------------------------


def bytes_keys(kind: str, keys: Any) -> list[bytes]:
    """A key column as the bytes keys rocksdict's raw mode takes."""
    if kind == "int64":
        raw = np.asarray(keys).astype(">i8").tobytes()
        return [raw[i : i + 8] for i in range(0, len(raw), 8)]
    out: list[bytes] = keys.cast(pa.binary()).to_pylist()
    return out


def bytes_values(vals: IntArray) -> list[bytes]:
    raw = vals.astype(">i8").tobytes()
    return [raw[i : i + 8] for i in range(0, len(raw), 8)]


def py_keys(kind: str, keys: Any) -> list[Any]:
    out: list[Any] = keys.tolist() if kind == "int64" else keys.to_pylist()
    return out


def rocks_open(path: str) -> tuple[Any, Any]:
    db = Rdict(path, Options(raw_mode=True))
    wopt = WriteOptions()
    wopt.disable_wal = True
    return db, wopt


def rocks_ingest(db: Any, wopt: Any, kind: str, steps: Sequence[Step]) -> tuple[float, float]:
    """(total seconds, of which converting columns to bytes)."""
    _settle()
    conv = 0.0
    t0 = time.perf_counter()
    for s in steps:
        c0 = time.perf_counter()
        ks = bytes_keys(kind, s.keys)
        vs = bytes_values(s.vals)
        conv += time.perf_counter() - c0
        wb = WriteBatch(raw_mode=True)
        for k, v in zip(ks, vs, strict=True):
            wb.put(k, v)
        db.write(wb, wopt)
    return time.perf_counter() - t0, conv


def rocks_lookup(db: Any, kind: str, probes: Step) -> tuple[float, float, int]:
    _settle()
    t0 = time.perf_counter()
    ks = bytes_keys(kind, probes.keys)
    conv = time.perf_counter() - t0
    got = db.get(ks)
    elapsed = time.perf_counter() - t0
    return elapsed, conv, sum(1 for g in got if g is not None)


SQL_UPSERT = (
    "INSERT INTO z (k, v, w) VALUES (?, ?, ?) ON CONFLICT(k, v) DO UPDATE SET w = w + excluded.w"
)


def sqlite_open(path: str, kind: str) -> sqlite3.Connection:
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    con.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_BYTES >> 10}")
    con.execute("PRAGMA temp_store=MEMORY")
    key_type = "INTEGER" if kind == "int64" else "TEXT"
    con.execute(
        f"CREATE TABLE z (k {key_type} NOT NULL, v INTEGER NOT NULL, w INTEGER NOT NULL, "
        "PRIMARY KEY (k, v)) WITHOUT ROWID"
    )
    con.commit()
    return con


def sqlite_ingest(con: sqlite3.Connection, kind: str, steps: Sequence[Step]) -> tuple[float, float]:
    _settle()
    conv = 0.0
    t0 = time.perf_counter()
    for s in steps:
        c0 = time.perf_counter()
        rows = list(zip(py_keys(kind, s.keys), s.vals.tolist(), s.weights.tolist(), strict=True))
        conv += time.perf_counter() - c0
        with con:
            con.executemany(SQL_UPSERT, rows)
    return time.perf_counter() - t0, conv


def dict_ingest(kind: str, steps: Sequence[Step]) -> tuple[float, float, dict[Any, int]]:
    _settle()
    d: dict[Any, int] = {}
    conv = 0.0
    t0 = time.perf_counter()
    for s in steps:
        c0 = time.perf_counter()
        ks, vs, ws = py_keys(kind, s.keys), s.vals.tolist(), s.weights.tolist()
        conv += time.perf_counter() - c0
        for k, v, w in zip(ks, vs, ws, strict=True):
            kv = (k, v)
            d[kv] = d.get(kv, 0) + w
    return time.perf_counter() - t0, conv, d


# -- phases -----------------------------------------------------------------------------------


def _fresh_dir(root: str, name: str) -> str:
    path = os.path.join(root, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def ingest_and_lookup(kind: str, prof: Profile, root: str, seed: int, log: Log) -> dict[str, Any]:
    """Same steps into Spindle, rocksdict, sqlite3 and a dict; then batched lookups."""
    rng = np.random.default_rng([seed, 1, KEY_KINDS.index(kind)])
    steps = make_steps(kind, prof.ingest_rows, prof.step_rows, prof.key_space, rng)
    rows = prof.ingest_rows
    t: dict[str, list[float]] = {"spindle": [], "rocksdict": [], "sqlite": [], "dict": []}
    conv: dict[str, list[float]] = {"rocksdict": [], "sqlite": [], "dict": []}
    checks: dict[str, Any] = {}
    loc: StorageLocation | None = None
    db: Any = None
    spine: Spine | None = None
    try:
        for r in range(prof.ingest_repeats):
            last = r == prof.ingest_repeats - 1
            if loc is not None:
                loc.close()
            loc = open_location(_fresh_dir(root, "spindle-ingest"), EngineSettings())
            spine = loc.spine(OP_ID, schema_for(kind))
            t["spindle"].append(spindle_ingest(spine, steps))
            log(f"{kind} ingest #{r}: spindle {rows / t['spindle'][-1]:,.0f} rows/s")

            if db is not None:
                db.close()
            db, wopt = rocks_open(os.path.join(_fresh_dir(root, "rocks-ingest"), "db"))
            total, c = rocks_ingest(db, wopt, kind, steps)
            t["rocksdict"].append(total)
            conv["rocksdict"].append(c)
            log(f"{kind} ingest #{r}: rocksdict {rows / total:,.0f} rows/s")

            con = sqlite_open(os.path.join(_fresh_dir(root, "sqlite-ingest"), "z.db"), kind)
            total, c = sqlite_ingest(con, kind, steps)
            t["sqlite"].append(total)
            conv["sqlite"].append(c)
            if last:
                (nz,) = con.execute("SELECT count(*) FROM z WHERE w != 0").fetchone()
                checks["sqlite_nonzero_rows"] = int(nz)
            con.close()
            log(f"{kind} ingest #{r}: sqlite {rows / total:,.0f} rows/s")

            total, c, d = dict_ingest(kind, steps)
            t["dict"].append(total)
            conv["dict"].append(c)
            if last:
                checks["dict_nonzero_rows"] = sum(1 for w in d.values() if w)
                checks["dict_weight_sum"] = sum(d.values())
            del d
            log(f"{kind} ingest #{r}: dict {rows / total:,.0f} rows/s")

        assert spine is not None and db is not None
        s_rows, s_weight = spindle_state_check(spine)
        checks["spindle_rows"] = s_rows
        checks["spindle_weight_sum"] = s_weight
        checks["same_state_as_dict"] = (
            s_rows == checks["dict_nonzero_rows"] and s_weight == checks["dict_weight_sum"]
        )
        checks["same_rows_as_sqlite"] = s_rows == checks["sqlite_nonzero_rows"]

        lookups: dict[str, list[float]] = {"spindle": [], "rocksdict": []}
        rocks_conv: list[float] = []
        found: dict[str, int] = {}
        for r in range(prof.lookup_repeats + 1):  # round 0 warms caches up
            probes = make_probes(kind, steps, prof.probe_rows, prof.key_space, rng)
            st, found["spindle"] = spindle_lookup(spine, probes)
            rt, rc, found["rocksdict"] = rocks_lookup(db, kind, probes)
            if r:
                lookups["spindle"].append(st)
                lookups["rocksdict"].append(rt)
                rocks_conv.append(rc)
        checks["lookup_keys_found"] = found
    finally:
        if loc is not None:
            loc.close()
        if db is not None:
            db.close()
        for name in ("spindle-ingest", "rocks-ingest", "sqlite-ingest"):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)

    rate = {k: rows / median(v) for k, v in t.items()}
    rate_excl = {
        k: rows / median([a - b for a, b in zip(t[k], conv[k], strict=True)]) for k in conv
    }
    n = prof.probe_rows
    look = {k: n / median(v) for k, v in lookups.items()}
    look_excl = n / median([a - b for a, b in zip(lookups["rocksdict"], rocks_conv, strict=True)])
    log(f"{kind} lookups: spindle {look['spindle']:,.0f}/s, rocksdict {look['rocksdict']:,.0f}/s")
    return {
        "ingest_rows_per_s": rate,
        "ingest_rows_per_s_excl_conversion": {**rate_excl, "spindle": rate["spindle"]},
        "ingest_ratio_vs_rocksdict": rate["spindle"] / rate["rocksdict"],
        "ingest_ratio_vs_sqlite": rate["spindle"] / rate["sqlite"],
        "ingest_ratio_vs_dict": rate["spindle"] / rate["dict"],
        "ingest_ratio_vs_rocksdict_excl_conversion": rate["spindle"] / rate_excl["rocksdict"],
        "ingest_ratio_vs_sqlite_excl_conversion": rate["spindle"] / rate_excl["sqlite"],
        "lookups_per_s": look,
        "lookups_per_s_rocksdict_excl_conversion": look_excl,
        "lookup_ratio_vs_rocksdict": look["spindle"] / look["rocksdict"],
        "lookup_ratio_vs_rocksdict_excl_conversion": look["spindle"] / look_excl,
        "checks": checks,
    }


def commit_series(
    locs: Sequence[tuple[StorageLocation, Spine]], deltas: Sequence[Step], drain: bool
) -> list[list[float]]:
    """Milliseconds of each commit that follows one delta insert, per location. The
    locations take turns, delta by delta, so that each of them meets the same disk at the
    same moments (an fsync's latency on a shared VM varies within seconds)."""
    out: list[list[float]] = [[] for _ in locs]
    for d in deltas:
        for (loc, spine), times in zip(locs, out, strict=True):
            spine.insert(spindle_batch(spine.schema, d))
            if drain:
                spine.wait_idle()
            _settle()
            t0 = time.perf_counter()
            loc.commit(step=loc.step + 1)
            times.append((time.perf_counter() - t0) * 1000)
            loc.gc_checkpoint()
    for _, spine in locs:
        spine.wait_idle()
    return out


def restore_series(
    path: str, settings: EngineSettings, schema: ZSetSchema, probe: Any, repeats: int
) -> tuple[list[float], int, bool]:
    """Milliseconds from open to the first answered lookup; rows restored; probe found."""
    out = []
    rows, hit = 0, False
    for _ in range(repeats):
        _settle()
        t0 = time.perf_counter()
        loc = open_location(path, settings)
        try:
            spine = loc.spine(OP_ID, schema)
            got = spine.seek(probe)
            out.append((time.perf_counter() - t0) * 1000)
            rows, hit = spine.stats().rows, len(got) > 0
        finally:
            loc.close()
    return out, rows, hit


def state_measurements(kind: str, prof: Profile, root: str, seed: int, log: Log) -> dict[str, Any]:
    """Commit and restore at a small and a large state; the over-budget ingest ratio."""
    schema = schema_for(kind)
    rng = np.random.default_rng([seed, 2, KEY_KINDS.index(kind)])
    large_bytes = prof.state_bytes_large
    step = prof.step_rows
    large_rows = rows_for_bytes(kind, large_bytes, step)
    small_rows = rows_for_bytes(kind, prof.state_bytes_small, step)
    log(f"{kind}: generating {large_rows:,} rows for the large state")
    large_steps = make_steps(kind, large_rows, step, LARGE_KEY_SPACE, rng)
    small_steps = make_steps(kind, small_rows, step, LARGE_KEY_SPACE, rng)
    n_deltas = prof.commit_repeats
    deltas = make_steps(kind, prof.delta_rows * n_deltas, prof.delta_rows, LARGE_KEY_SPACE, rng)
    deltas_merging = make_steps(
        kind, prof.delta_rows * n_deltas, prof.delta_rows, LARGE_KEY_SPACE, rng
    )
    probe_large = key_column(kind, large_steps[0].ids[:1])
    probe_small = key_column(kind, small_steps[0].ids[:1])

    over = EngineSettings(
        memory_budget_bytes=prof.budget_bytes, cache_budget_bytes=prof.budget_bytes
    )
    roomy = 8 * large_bytes
    in_memory = EngineSettings(
        memory_budget_bytes=roomy, cache_budget_bytes=roomy, max_memory_batch_bytes=roomy
    )
    default_spill = EngineSettings(memory_budget_bytes=roomy, cache_budget_bytes=roomy)
    out: dict[str, Any] = {"state_rows_large": large_rows, "state_rows_small": small_rows}
    checks: dict[str, Any] = {}

    def ingest_only(name: str, settings: EngineSettings) -> float:
        path = _fresh_dir(root, name)
        try:
            with open_location(path, settings) as loc:
                secs = spindle_ingest(loc.spine(OP_ID, schema), large_steps)
        finally:
            shutil.rmtree(path, ignore_errors=True)
        log(f"{kind} {name}: {large_rows / secs:,.0f} rows/s")
        return large_rows / secs

    rate_mem = ingest_only("in-memory", in_memory)
    rate_spill = ingest_only("default-spill", default_spill)

    # The large state under the budget (the over-budget run), and the small one; then
    # commits on both, in turns; then restores.
    large_path, small_path = _fresh_dir(root, "large"), _fresh_dir(root, "small")
    try:
        large_loc = open_location(large_path, over)
        small_loc = open_location(small_path, over)
        try:
            large_spine = large_loc.spine(OP_ID, schema)
            secs = spindle_ingest(large_spine, large_steps)
            rate_over = large_rows / secs
            log(f"{kind} over-budget: {rate_over:,.0f} rows/s")
            t0 = time.perf_counter()
            large_loc.commit(step=1)
            out["first_commit_ms_large"] = (time.perf_counter() - t0) * 1000
            out["state_bytes_large"] = large_loc.list_checkpoints()[-1].total_bytes
            small_spine = small_loc.spine(OP_ID, schema)
            spindle_ingest(small_spine, small_steps)
            small_loc.commit(step=1)
            out["state_bytes_small"] = small_loc.list_checkpoints()[-1].total_bytes
            both = [(large_loc, large_spine), (small_loc, small_spine)]
            large, small = commit_series(both, deltas, drain=True)
            large_merging, small_merging = commit_series(both, deltas_merging, drain=False)
            large_rows_committed = large_loc.list_checkpoints()[-1].rows
            small_rows_committed = small_loc.list_checkpoints()[-1].rows
        finally:
            large_loc.close()
            small_loc.close()
        restore_large, restored_rows, hit = restore_series(
            large_path, over, schema, probe_large, prof.restore_repeats
        )
        checks["large_restored_rows_match"] = restored_rows == large_rows_committed
        checks["large_restore_probe_found"] = hit
        restore_small, restored_rows, hit = restore_series(
            small_path, over, schema, probe_small, prof.restore_repeats
        )
        checks["small_restored_rows_match"] = restored_rows == small_rows_committed
        checks["small_restore_probe_found"] = hit
        log(f"{kind} large: commit {median(large):.1f} ms, restore {median(restore_large):.1f} ms")
        log(f"{kind} small: commit {median(small):.1f} ms, restore {median(restore_small):.1f} ms")
    finally:
        shutil.rmtree(large_path, ignore_errors=True)
        shutil.rmtree(small_path, ignore_errors=True)

    out.update(
        {
            "commit_ms_small": median(small),
            "commit_ms_large": median(large),
            "commit_ratio_large_vs_small": median(large) / median(small),
            "commit_ms_small_merging": median(small_merging),
            "commit_ms_large_merging": median(large_merging),
            "commit_ratio_large_vs_small_merging": median(large_merging) / median(small_merging),
            "restore_ms_small": median(restore_small),
            "restore_ms_large": median(restore_large),
            "over_budget_rows_per_s": rate_over,
            "in_memory_rows_per_s": rate_mem,
            "default_spill_rows_per_s": rate_spill,
            "over_budget_ratio": rate_over / rate_mem,
            "over_budget_ratio_vs_default_spill": rate_over / rate_spill,
            "checks": checks,
        }
    )
    return out


# -- report -----------------------------------------------------------------------------------


def evaluate_targets(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for key, op, bound in TARGETS:
        value = result[key]
        ok = value >= bound if op == ">=" else value <= bound
        out[key] = {"target": f"{op} {bound:g}", "value": value, "pass": bool(ok)}
    return out


def run_benchmark(
    mode: str = "full",
    base_dir: str | None = None,
    seed: int = DEFAULT_SEED,
    kinds: Sequence[str] = KEY_KINDS,
    log: Log = quiet,
) -> dict[str, Any]:
    """Run every measurement in this process and return the report (JSON-serialisable)."""
    prof = PROFILES[mode]
    for k in kinds:
        if k not in KEY_KINDS:
            raise ValueError(f"unknown key kind {k!r}; expected one of {KEY_KINDS}")
    started = time.perf_counter()
    root = tempfile.mkdtemp(prefix="spindle-bench-", dir=base_dir)
    report: dict[str, Any] = {
        "benchmark": "engine",
        "mode": mode,
        "seed": seed,
        "sizes": {**asdict(prof), "state_bytes_large": prof.state_bytes_large},
        "machine": machine_info(),
        "versions": versions(rocksdict=package_version("rocksdict"), sqlite=sqlite3.sqlite_version),
        "revision": engine_revision(),
        "notes": NOTES,
    }
    try:
        for kind in kinds:
            result = ingest_and_lookup(kind, prof, root, seed, log)
            state = state_measurements(kind, prof, root, seed, log)
            checks = {**result.pop("checks"), **state.pop("checks")}
            result.update(state)
            result["checks"] = checks
            result["targets"] = evaluate_targets(result)
            report[kind] = result
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report["all_targets_met"] = all(t["pass"] for k in kinds for t in report[k]["targets"].values())
    report["machine"]["load_average_at_end"] = list(os.getloadavg())
    report["elapsed_s"] = time.perf_counter() - started
    cleaned: dict[str, Any] = clean(report)
    return cleaned


ROWS: tuple[tuple[str, str, str], ...] = (
    # (label, key, format)
    ("ingest rows/s spindle", "ingest_rows_per_s.spindle", "{:,.0f}"),
    ("ingest rows/s rocksdict", "ingest_rows_per_s.rocksdict", "{:,.0f}"),
    ("ingest rows/s sqlite", "ingest_rows_per_s.sqlite", "{:,.0f}"),
    ("ingest rows/s dict", "ingest_rows_per_s.dict", "{:,.0f}"),
    ("ingest ratio vs rocksdict", "ingest_ratio_vs_rocksdict", "{:.2f}x"),
    ("ingest ratio vs sqlite", "ingest_ratio_vs_sqlite", "{:.2f}x"),
    ("ingest ratio vs dict", "ingest_ratio_vs_dict", "{:.2f}x"),
    ("lookups/s spindle", "lookups_per_s.spindle", "{:,.0f}"),
    ("lookups/s rocksdict", "lookups_per_s.rocksdict", "{:,.0f}"),
    ("lookup ratio vs rocksdict", "lookup_ratio_vs_rocksdict", "{:.2f}x"),
    ("state bytes small", "state_bytes_small", "{:,}"),
    ("state bytes large", "state_bytes_large", "{:,}"),
    ("commit ms small", "commit_ms_small", "{:.1f}"),
    ("commit ms large", "commit_ms_large", "{:.1f}"),
    ("commit ratio large/small", "commit_ratio_large_vs_small", "{:.2f}"),
    ("commit ms small (merging)", "commit_ms_small_merging", "{:.1f}"),
    ("commit ms large (merging)", "commit_ms_large_merging", "{:.1f}"),
    ("restore ms small", "restore_ms_small", "{:.1f}"),
    ("restore ms large", "restore_ms_large", "{:.1f}"),
    ("over-budget rows/s", "over_budget_rows_per_s", "{:,.0f}"),
    ("in-memory rows/s", "in_memory_rows_per_s", "{:,.0f}"),
    ("over-budget ratio", "over_budget_ratio", "{:.2f}"),
    ("over-budget ratio vs default spill", "over_budget_ratio_vs_default_spill", "{:.2f}"),
)


def _get(d: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        d = d[part]
    return d


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    kinds = [k for k in KEY_KINDS if k in report]
    m, v = report["machine"], report["versions"]
    table = Table(
        title=f"Spindle engine benchmark ({report['mode']}): {m['cores']} cores, {m['cpu_model']}, "
        f"python {v['python']}, pyarrow {v['pyarrow']}, rocksdict {v['rocksdict']}"
    )
    table.add_column("metric")
    for k in kinds:
        table.add_column(k, justify="right")
    table.add_column("target")
    targets = {key: f"{op} {bound:g}" for key, op, bound in TARGETS}
    for label, key, fmt in ROWS:
        cells = []
        for k in kinds:
            cell = fmt.format(_get(report[k], key))
            t = report[k]["targets"].get(key)
            if t is not None:
                cell = f"[green]{cell}[/]" if t["pass"] else f"[red]{cell}[/]"
            cells.append(cell)
        table.add_row(label, *cells, targets.get(key, ""))
    console = Console()
    console.print(table)
    console.print(
        f"all targets met: {report['all_targets_met']}  (elapsed {report['elapsed_s']:.0f} s)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.engine", description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="print only the JSON report to stdout")
    p.add_argument("--quick", action="store_true", help="smaller sizes, under a minute")
    p.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)  # tiny, for tests
    p.add_argument("--dir", default=None, help="where to put temporary state (default: tmp)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--keys", default=",".join(KEY_KINDS), help="key kinds: int64,string")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = p.parse_args(argv)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    kinds = [k.strip() for k in args.keys.split(",") if k.strip()]
    report = run_benchmark(mode, args.dir, args.seed, kinds, quiet if args.quiet else log_to_stderr)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
