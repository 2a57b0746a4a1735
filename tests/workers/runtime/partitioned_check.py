"""The check of the partitioned path's tests (issue 50): a dataflow stepped in P shards
(`workers.runtime.partitioned`) gives, step by step, every view the same delta as the
single-process `Dataflow.step` after consolidation (doubles within 1e-9), and the same
watermarks; optionally reopened from a manifest mid-way, its shards' open state evicted
every step, or its object store the only copy of the state."""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from spindle_sql.dataflow import Dataflow
from storage_engine import EngineSettings, StorageLocation
from storage_engine.fileio import PosixFileLayer, WritableFile
from storage_engine.objstore import ObjectStoreLike
from storage_engine.schema import WEIGHT
from workers.runtime.dataflow_run import DataflowRun
from workers.runtime.partitioned import PartitionedDataflow, ShardHost

from ...spindle_sql.test_differential import Approx

Deltas = Mapping[str, pa.Table]
Outputs = dict[str, Counter[tuple[Any, ...]]]
SETTINGS = EngineSettings(memory_budget_bytes=1 << 20)


class _Unsynced:
    def __init__(self, f: WritableFile) -> None:
        self._f = f
        self.path = f.path

    def write(self, data: bytes | memoryview) -> None:
        self._f.write(data)

    def tell(self) -> int:
        return self._f.tell()

    def flush(self) -> None:
        self._f.flush()

    def sync(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class NoSyncFileLayer(PosixFileLayer):
    """The file system without fsyncs: these tests are about results, not durability (the
    engine's own tests are), and hundreds of shard commits would wait on the disk."""

    def create(self, path: str) -> WritableFile:
        return _Unsynced(super().create(path))

    def sync_dir(self, path: str) -> None:
        return


FS = NoSyncFileLayer()


def consolidated(t: pa.Table) -> Counter[tuple[Any, ...]]:
    """A delta's rows with their summed weights (none zero); doubles compare within 1e-9."""
    names = [n for n in t.column_names if n != WEIGHT]
    if t.num_rows and not any(pa.types.is_null(f.type) for f in t.schema):
        # Equal rows summed by Arrow first: the Python rows below are then few.
        t = t.group_by(names, use_threads=False).aggregate([(WEIGHT, "sum")])
        t = t.rename_columns([*names, WEIGHT])
    floats = [pa.types.is_floating(t.schema.field(n).type) for n in names]
    out: Counter[tuple[Any, ...]] = Counter()
    columns = [t.column(n).to_pylist() for n in names]
    for row, w in zip(zip(*columns, strict=True), t.column(WEIGHT).to_pylist(), strict=True):
        key = tuple(
            Approx(v) if f and v is not None else v for v, f in zip(row, floats, strict=True)
        )
        out[key] += w
    return Counter({row: w for row, w in out.items() if w})


def outputs(out: Mapping[str, pa.Table]) -> Outputs:
    return {name: consolidated(t) for name, t in out.items()}


# Step i's processing time (PROCTIME()): a second apart, the same in both runs.
PROCTIME_US = 1_767_225_600_000_000


def plain_run(
    make: Callable[[], Dataflow], steps: Sequence[Deltas], path: Path
) -> list[tuple[Outputs, dict[str, Any]]]:
    """Every step's view deltas and watermarks from the single-process dataflow."""
    flow = make()
    loc = StorageLocation.open(str(path), fingerprint=flow.fingerprint, settings=SETTINGS, fs=FS)
    DataflowRun(flow).open(loc)
    try:
        return [
            (outputs(flow.step(d, PROCTIME_US + i * 1_000_000)), flow.watermarks.state())
            for i, d in enumerate(steps, start=1)
        ]
    finally:
        loc.close()


def check_partitioned(
    make: Callable[[], Dataflow],
    steps: Sequence[Deltas],
    expected: Sequence[tuple[Outputs, dict[str, Any]]],
    root: Path,
    shards: int,
    *,
    reopen_at: int | None = None,
    rescale_to: int | None = None,
    evict: bool = False,
    store: ObjectStoreLike | None = None,
    what: str = "",
) -> PartitionedDataflow:
    """Step `make`'s dataflow in `shards` shards and compare each step with `expected`.
    `reopen_at`: after that step, continue in a new coordinator (and a new host, so
    nothing stays open) from its manifest, in `rescale_to` shards if given; `evict`:
    close every shard's state between steps; with `store`, also remove the local copies,
    as on executors that never held them. The caller closes the coordinator returned."""
    settings, fs = SETTINGS, FS

    def coordinator() -> PartitionedDataflow:
        host = ShardHost(str(root), store, settings, fs)
        return PartitionedDataflow(make, shards, str(root), host=host)

    start = shards

    part = coordinator()
    try:
        for i, (deltas, (want, wm)) in enumerate(zip(steps, expected, strict=True), start=1):
            got = outputs(part.step(deltas, proctime_us=PROCTIME_US + i * 1_000_000))
            for view in want:
                assert got[view] == want[view], (
                    f"{what} P={start}->{shards}, step {i}, view {view!r}: "
                    f"partitioned less plain {got[view] - want[view]}, "
                    f"plain less partitioned {want[view] - got[view]}"
                )
            assert part.flow.watermarks.state() == wm, f"{what} P={shards}, step {i}: watermarks"
            if evict:
                part.host.evict()
                if store is not None:
                    shutil.rmtree(root / "shards", ignore_errors=True)
            if reopen_at == i:
                manifest = part.checkpoint()
                part.close()
                shards = rescale_to or shards
                part = coordinator()
                part.open(manifest)
    except BaseException:
        part.close()  # its open locations hold files: none may outlive the test
        raise
    return part


__all__ = ["FS", "SETTINGS", "check_partitioned", "consolidated", "outputs", "plain_run"]
