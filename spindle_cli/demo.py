"""`spindle demo`: the storage engine alone on generated data (no Spark, no servers):
batches into spines, checkpoints, garbage collection and a restore."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import pyarrow as pa
import typer
from rich.console import Console
from rich.table import Table

from storage_engine import Batch, EngineSettings, StorageLocation, ZSetSchema

SCHEMA = ZSetSchema.of([("user", pa.int64())], [("clicks", pa.int64())])


def demo(
    data_dir: Annotated[Path, typer.Option(help="where the demo keeps its state")] = Path(
        ".spindle-data"
    ),
    steps: Annotated[int, typer.Option(help="micro-batches to ingest")] = 40,
    rows: Annotated[int, typer.Option(help="rows per micro-batch")] = 50_000,
) -> None:
    """Ingest generated click counts, checkpoint, gc, crash-free restore, and report."""
    console = Console()
    location = data_dir / "demo-location"
    shutil.rmtree(location, ignore_errors=True)
    settings = EngineSettings(memory_budget_bytes=32 << 20)
    rng = np.random.default_rng(7)
    started = time.perf_counter()
    with StorageLocation.open(str(location), fingerprint="demo-v1", settings=settings) as loc:
        spine = loc.spine("clicks", SCHEMA)
        for step in range(1, steps + 1):
            users = rng.integers(0, 1_000_000, rows)
            spine.insert(Batch.from_columns(SCHEMA, {"user": users, "clicks": users % 5}))
            if step % 10 == 0:
                uid = loc.commit(identifier=f"step-{step}", step=step)
                console.print(f"step {step:>3}: checkpoint [bold]{uid}[/]")
        spine.wait_idle()
        elapsed = time.perf_counter() - started
        gc = loc.gc_checkpoint()
        console.print(f"gc removed {gc.deleted} ({gc.files_removed} files, {gc.bytes_freed} B)")
        table = Table(title=f"checkpoints in {location}")
        for col in ("uuid", "identifier", "step", "bytes", "files", "ms"):
            table.add_column(col)
        for c in loc.list_checkpoints():
            table.add_row(
                c.uuid,
                c.identifier or "",
                str(c.step),
                str(c.total_bytes),
                str(c.files),
                f"{c.duration_ms:.1f}",
            )
        console.print(table)
    t0 = time.perf_counter()
    with StorageLocation.open(str(location), fingerprint="demo-v1", settings=settings) as loc:
        spine = loc.spine("clicks", SCHEMA)
        found = spine.seek([1, 2, 3, 42])
        console.print(
            f"ingested {steps * rows:,} rows in {elapsed:.2f}s; restored step {loc.step} in "
            f"{(time.perf_counter() - t0) * 1000:.1f} ms; lookup of 4 users -> {len(found)} rows"
        )
