"""Crash-test workload: a deterministic writer, its reference model, and location checks.

Run as a child process by tests/storage_engine/test_crash.py (which SIGKILLs it at random moments):

    .venv/bin/python tests/storage_engine/crash_worker.py DIR SEED

The worker opens the storage location DIR, resumes from its latest checkpoint (step S, or 0
without one) and runs steps S+1, S+2, ... until killed. Everything it does is a function of
(SEED, step): step s inserts `step_data(SEED, s)` into two spines, raises spine "b"'s lower
bound to `bound_at(s)`, commits with `commit(step=s)` when `plan(SEED, s).commit`, and then
may gc or delete old checkpoints. So the contents of ANY checkpoint are recomputable from its
step alone (`Model.view(step)`), however many crashes and resumes happened before it.

Output lines (flushed): `I` once imports are done, `O <step>` after open/restore,
`C <step> <uuid>` after each commit returned, `G <n>`/`D <uuid>` after gc/delete. With
`SPINDLE_KILL_AT_OP=N` set, the worker SIGKILLs itself at its N-th mutating file call.

The same workload, model and checks are used in-process by the power-loss and write-fault
tests (tests/storage_engine/test_powerloss.py, tests/storage_engine/test_write_faults.py).
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass

if __name__ == "__main__":  # runnable as a script from any working directory
    sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from storage_engine import (
    Batch,
    EngineSettings,
    FileLayer,
    PosixFileLayer,
    StorageLocation,
    ZSetSchema,
)
from storage_engine.fileio import WritableFile

FINGERPRINT = "crash-test-v1"
SCHEMA_A = ZSetSchema.of([("k", pa.int64())], [("v", pa.int64())])
SCHEMA_B = ZSetSchema.of([("k", pa.int64())])
KA, VA = 3000, 4  # spine "a": keys x values, a dense model of KA * VA cells
B_SPAN = 300  # spine "b": keys in [bound(s) - 20, bound(s) + B_SPAN)

IntArray = npt.NDArray[np.int64]


def small_settings(**overrides: object) -> EngineSettings:
    """Tiny budgets so merges, spills to files and multi-block files happen constantly."""
    base: dict[str, object] = {
        "memory_budget_bytes": 96 << 10,
        "cache_budget_bytes": 256 << 10,
        "max_memory_batch_bytes": 24 << 10,
        "block_rows": 64,
        "merge_fanout": 3,
        "merge_base_rows": 128,
        "max_batches_per_spine": 12,
        "write_attempts": 3,
        "write_backoff_s": 0.001,
    }
    base.update(overrides)
    return EngineSettings(**base)  # type: ignore[arg-type]


def bound_at(step: int) -> int:
    """Spine "b"'s lower bound after `step` (monotone)."""
    return 2 * step


@dataclass(frozen=True)
class StepData:
    a_k: IntArray
    a_v: IntArray
    a_w: IntArray
    b_k: IntArray
    b_w: IntArray


@dataclass(frozen=True)
class Plan:
    commit: bool
    gc: bool
    keep: int  # gc while more than this many checkpoints are retained
    delete: bool
    pick: int  # which non-latest checkpoint `delete` picks


def step_data(seed: int, step: int) -> StepData:
    rng = np.random.default_rng([seed, step, 1])
    n = int(rng.integers(40, 320))
    m = int(rng.integers(10, 160))
    lo = bound_at(step)
    return StepData(
        a_k=rng.integers(0, KA, n),
        a_v=rng.integers(0, VA, n),
        a_w=rng.choice(np.array([-1, 1, 1, 2], dtype=np.int64), n),
        b_k=np.maximum(lo + rng.integers(-20, B_SPAN, m), 0),
        b_w=rng.choice(np.array([-1, 1, 1], dtype=np.int64), m),
    )


def plan(seed: int, step: int) -> Plan:
    rng = np.random.default_rng([seed, step, 2])
    return Plan(
        commit=bool(rng.random() < 0.3),
        gc=bool(rng.random() < 0.6),
        keep=int(rng.integers(1, 5)),
        delete=bool(rng.random() < 0.1),
        pick=int(rng.integers(0, 1 << 30)),
    )


def apply_step(loc: StorageLocation, seed: int, step: int) -> None:
    d = step_data(seed, step)
    a = loc.spine("a", SCHEMA_A)
    b = loc.spine("b", SCHEMA_B)
    a.insert(Batch.from_columns(SCHEMA_A, {"k": d.a_k, "v": d.a_v}, d.a_w))
    b.insert(Batch.from_columns(SCHEMA_B, {"k": d.b_k}, d.b_w))
    b.truncate_below([bound_at(step)])


class Model:
    """Reference contents at any step: dense weight arrays, replayed from the generator."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._step = 0
        self._a = np.zeros(KA * VA, dtype=np.int64)
        self._b = np.zeros(B_SPAN + 64, dtype=np.int64)
        self._snaps: dict[int, tuple[IntArray, IntArray]] = {0: (self._a.copy(), self._b.copy())}

    def _advance(self, step: int) -> None:
        for s in range(self._step + 1, step + 1):
            d = step_data(self.seed, s)
            np.add.at(self._a, d.a_k * VA + d.a_v, d.a_w)
            need = int(d.b_k.max()) + 1 if len(d.b_k) else 0
            if need > len(self._b):
                self._b = np.concatenate([self._b, np.zeros(need * 2 - len(self._b), np.int64)])
            np.add.at(self._b, d.b_k, d.b_w)
        self._step = step

    def view(self, step: int) -> tuple[IntArray, IntArray]:
        """(dense a, dense b with keys below the bound hidden) as of `step`."""
        if step not in self._snaps:
            if step < self._step:
                base = max(s for s in self._snaps if s <= step)
                a, b = self._snaps[base]
                self._step, self._a, self._b = base, a.copy(), b.copy()
            self._advance(step)
            b = self._b.copy()
            b[: min(bound_at(step), len(b))] = 0
            self._snaps[step] = (self._a.copy(), b)
        return self._snaps[step]

    def forget_below(self, step: int) -> None:
        """Drop cached views older than `step` (they can never be requested again)."""
        for s in [s for s in self._snaps if 0 < s < step]:
            del self._snaps[s]


def dense_state(loc: StorageLocation) -> tuple[IntArray, IntArray]:
    """The location's spines as dense arrays: the sum of every batch (in memory or in a
    file, each read and checksummed) with spine "b"'s lower bound applied. Much faster than
    `Spine.to_batch()` with the tiny blocks the tests use, and independent of merge_stream."""
    a = loc.spine("a", SCHEMA_A)
    b = loc.spine("b", SCHEMA_B)
    da = np.zeros(KA * VA, dtype=np.int64)
    for e in a.snapshot():
        rb = e.data()
        _check_consolidated(rb.column("k").to_numpy() * VA + rb.column("v").to_numpy(), rb)
        np.add.at(
            da,
            rb.column("k").to_numpy() * VA + rb.column("v").to_numpy(),
            rb.column("__weight").to_numpy(),
        )
    parts = [e.data() for e in b.snapshot()]
    top = max((int(rb.column("k").to_numpy().max()) + 1 for rb in parts if rb.num_rows), default=0)
    db = np.zeros(top, dtype=np.int64)
    for rb in parts:
        _check_consolidated(rb.column("k").to_numpy(), rb)
        np.add.at(db, rb.column("k").to_numpy(), rb.column("__weight").to_numpy())
    if b.lower_bound is not None:
        db[: min(int(b.lower_bound[0]), len(db))] = 0
    return da, db


def _check_consolidated(idx: IntArray, rb: pa.RecordBatch) -> None:
    w = rb.column("__weight").to_numpy()
    assert (w != 0).all(), "zero weights in a consolidated batch"
    assert (np.diff(idx) > 0).all(), "batch rows not sorted and unique"


def same_state(got: tuple[IntArray, IntArray], want: tuple[IntArray, IntArray]) -> bool:
    (ga, gb), (wa, wb) = got, want
    n = max(len(gb), len(wb))
    return bool(
        np.array_equal(ga, wa)
        and np.array_equal(np.pad(gb, (0, n - len(gb))), np.pad(wb, (0, n - len(wb))))
    )


def diff_summary(got: tuple[IntArray, IntArray], want: tuple[IntArray, IntArray]) -> str:
    (ga, gb), (wa, wb) = got, want
    n = max(len(gb), len(wb))
    gb, wb = np.pad(gb, (0, n - len(gb))), np.pad(wb, (0, n - len(wb)))
    return (
        f"spine a: {int((ga != wa).sum())} cells differ (sum {int(ga.sum())} vs "
        f"{int(wa.sum())}); spine b: {int((gb != wb).sum())} keys differ"
    )


def storage_names(path: str) -> list[str]:
    """Every path below the location, relative, directories with a trailing slash."""
    out = []
    for dirpath, dirnames, filenames in os.walk(path):
        rel = os.path.relpath(dirpath, path)
        for d in dirnames:
            out.append(os.path.normpath(os.path.join(rel, d)) + "/")
        for f in filenames:
            out.append(os.path.normpath(os.path.join(rel, f)))
    return sorted(out)


def check_location(
    path: str,
    model: Model,
    *,
    settings: EngineSettings | None = None,
    fs: FileLayer | None = None,
    allowed_latest: set[int] | None = None,
    min_latest: int | None = None,
) -> tuple[int, list[int]]:
    """Open `path` normally (so startup cleanup runs), then assert:

    - the restored (latest) checkpoint's state equals the model at its step, and its step is
      in `allowed_latest` / at least `min_latest` (0 stands for "no checkpoint");
    - cleanup left no unreferenced file: no `*.mut` anywhere, every `*.batch` referenced by
      some checkpoint, every checkpoint directory in the manifest and vice versa;
    - every retained checkpoint (not just the latest) restores to the model at its step.

    Returns (latest step, steps of all retained checkpoints).
    """
    settings = settings or small_settings()
    with StorageLocation.open(
        path, fingerprint=FINGERPRINT, settings=settings, fs=fs or PosixFileLayer()
    ) as loc:
        latest = loc.restored.step if loc.restored is not None else 0
        assert loc.step == latest
        if allowed_latest is not None:
            assert latest in allowed_latest, (
                f"restored step {latest}, expected one of {sorted(allowed_latest)}"
            )
        if min_latest is not None:
            assert latest >= min_latest, (
                f"restored step {latest} is older than the last acknowledged commit {min_latest}"
            )
        got = dense_state(loc)
        want = model.view(latest)
        assert same_state(got, want), f"latest (step {latest}): {diff_summary(got, want)}"
        cps = loc.list_checkpoints()
        steps = [c.step for c in cps]
        assert steps == sorted(steps) and len(set(steps)) == len(steps), steps
        referenced: set[str] = set()
        for c in cps:
            for meta in loc.checkpoint_spines(c.uuid).values():
                referenced.update(meta.batches)
        uuids = {c.uuid for c in cps}
        names = storage_names(path)
        stray = [n for n in names if n.endswith(".mut")]
        assert not stray, f"temporary files survived startup: {stray}"
        dirs = {n[:-1] for n in names if n.endswith("/")}
        assert dirs == uuids, f"checkpoint dirs {sorted(dirs)} != manifest {sorted(uuids)}"
        batches = {n for n in names if n.endswith(".batch")}
        assert batches <= referenced, f"unreferenced batch files: {sorted(batches - referenced)}"
        assert referenced <= batches, f"missing batch files: {sorted(referenced - batches)}"
    for c in cps:
        with StorageLocation.open(
            path, fingerprint=FINGERPRINT, checkpoint=c.uuid, settings=settings, read_only=True
        ) as ro:
            assert ro.step == c.step
            got = dense_state(ro)
            want = model.view(c.step)
            assert same_state(got, want), f"checkpoint step {c.step}: {diff_summary(got, want)}"
    return latest, steps


class KillingFileLayer(PosixFileLayer):
    """Counts mutating calls and SIGKILLs its own process at call `kill_at` (before it)."""

    def __init__(self, kill_at: int) -> None:
        self.kill_at = kill_at
        self.ops = 0

    def _tick(self) -> None:
        self.ops += 1
        if self.ops >= self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def create(self, path: str) -> WritableFile:
        self._tick()
        inner = super().create(path)
        layer = self

        class _File:
            def __init__(self) -> None:
                self.path = inner.path

            def write(self, data: bytes | memoryview) -> None:
                layer._tick()
                inner.write(data)

            def tell(self) -> int:
                return inner.tell()

            def flush(self) -> None:
                inner.flush()

            def sync(self) -> None:
                layer._tick()
                inner.sync()

            def close(self) -> None:
                inner.close()

        return _File()

    def rename(self, src: str, dst: str) -> None:
        self._tick()
        super().rename(src, dst)

    def remove(self, path: str) -> None:
        self._tick()
        super().remove(path)

    def mkdir(self, path: str) -> None:
        self._tick()
        super().mkdir(path)

    def rmtree(self, path: str) -> None:
        self._tick()
        super().rmtree(path)

    def sync_dir(self, path: str) -> None:
        self._tick()
        super().sync_dir(path)


def run_worker(path: str, seed: int, max_steps: int) -> None:
    """`SPINDLE_KILL_AT_OP=N` in the environment: SIGKILL at the N-th mutating file call
    (commit lines then carry the op count so far: `C <step> <uuid> <ops>`)."""
    out = sys.stdout
    out.write("I\n")
    out.flush()
    kill_at = os.environ.get("SPINDLE_KILL_AT_OP")
    fs = KillingFileLayer(int(kill_at)) if kill_at else PosixFileLayer()
    loc = StorageLocation.open(path, fingerprint=FINGERPRINT, settings=small_settings(), fs=fs)
    start = loc.step
    out.write(f"O {start}\n")
    out.flush()
    for step in range(start + 1, start + 1 + max_steps):
        apply_step(loc, seed, step)
        p = plan(seed, step)
        if not p.commit:
            continue
        uid = loc.commit(step=step)
        ops = f" {fs.ops}" if isinstance(fs, KillingFileLayer) else ""
        out.write(f"C {step} {uid}{ops}\n")
        out.flush()
        if p.gc:
            n = 0
            while len(loc.list_checkpoints()) > p.keep:
                n += len(loc.gc_checkpoint().deleted)
            out.write(f"G {n}\n")
            out.flush()
        cps = loc.list_checkpoints()
        if p.delete and len(cps) > 1:
            victim = cps[:-1][p.pick % (len(cps) - 1)].uuid
            loc.delete_checkpoint(victim)
            out.write(f"D {victim}\n")
            out.flush()
    loc.close()


if __name__ == "__main__":
    run_worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 10**6)
