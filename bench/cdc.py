"""PostgreSQL CDC's throughput: changes read from a replication slot and applied, beside the
same view over plain inserts, in one run.

    python -m bench.cdc [--quick] [--json]

A PostgreSQL server of its own (`local_servers/postgres.py`, `wal_level=logical`) holds a
table of `KEYS` customers (id, city, credit). The `postgres_cdc` source takes its snapshot;
then N changes are committed, in transactions of 1,000 (80 % upserts of distinct random
keys, `INSERT ... ON CONFLICT DO UPDATE`, an update once the key exists; 20 % deletes).
Timed: the steps that read them, at most 100,000 changes a step, as a run does: where the
step ends (a peek at the slot), reading the step's transactions (the peek again, decoding
pgoutput, converting the text values) and the view's dataflow step (the Upsert and the
aggregate per city). The peer is the same view's dataflow over as many inserts (already in
memory: what bench.upserts calls inserts). Also reported: the snapshot's rows/s. Medians of
`REPEATS` runs, each on a fresh table and slot.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from local_servers.postgres import PostgresServer, find_bin_dir
from pipeline_spec.model import PipelineSpec, PostgresCdcSource, parse_spec
from spindle_sql.dataflow import Dataflow
from spindle_sql.spec import plan_spec
from storage_engine import StorageLocation
from workers.runtime.connectors.postgres_cdc_source import KIND
from workers.runtime.connectors.source import SourceContext
from workers.runtime.dataflow_run import DataflowRun
from workers.runtime.sources import END

from .report import Log, clean, engine_revision, machine_info, quiet, run_cli, versions
from .upserts import KEYS, PER_STEP, SQL, dataflow_records_per_s, log_spec, records

PROFILES = {"full": 300_000, "quick": 100_000, "smoke": 3_000}  # changes per run
REPEATS = {"full": 3, "quick": 2, "smoke": 1}
PER_TRANSACTION = 1_000


def _spec(dsn: str, slot: str) -> PipelineSpec:
    table = {
        "kind": "postgres_cdc",
        "table": "c",
        "dsn": dsn,
        "source_table": "c",
        "schema": {"id": "bigint", "city": "string", "credit": "bigint"},
        "key": ["id"],
        "slot": slot,
        "max_changes_per_step": PER_STEP,
    }
    return parse_spec({"name": "bench-cdc", "tables": [table], "sql": SQL})


def _write_changes(dsn: str, n: int, seed: int) -> None:
    import psycopg

    rng = np.random.default_rng(seed)
    with psycopg.connect(dsn) as c:
        for start in range(0, n, PER_TRANSACTION):
            k = min(PER_TRANSACTION, n - start)
            ids = rng.choice(KEYS, k, replace=False)
            deletes = rng.random(k) < 0.2
            ups = ids[~deletes]
            c.execute(
                "INSERT INTO c SELECT id, 'city-' || (id * 7 + %s) %% 200, %s "
                "FROM unnest(%s::bigint[]) id "
                "ON CONFLICT (id) DO UPDATE SET city = EXCLUDED.city, credit = EXCLUDED.credit",
                (start, start, ups.tolist()),
            )
            c.execute("DELETE FROM c WHERE id = ANY(%s)", (ids[deletes].tolist(),))
            c.commit()


def _cdc_run(dsn: str, n: int, slot: str, work: Path) -> tuple[float, float]:
    """(snapshot rows/s, changes/s) of one run on a fresh table and slot."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS c")
        c.execute("CREATE TABLE c (id bigint PRIMARY KEY, city text, credit bigint)")
        c.execute(
            "INSERT INTO c SELECT i, 'city-' || i %% 200, i FROM generate_series(0, %s) i",
            (KEYS - 1,),
        )
    spec = _spec(dsn, slot)
    planned = plan_spec(spec)
    flow = Dataflow(planned.views)
    shutil.rmtree(work, ignore_errors=True)
    loc = StorageLocation.open(str(work / "state"), fingerprint=flow.fingerprint)
    DataflowRun(flow).open(loc)
    ctx = SourceContext(cast(Any, None), planned.schema, "", {}, str(work / "state"), "")
    src = KIND.open(cast(PostgresCdcSource, spec.tables[0]), ctx)
    try:
        t0 = time.perf_counter()
        offset = src.first_offset({})
        snapshot_s = time.perf_counter() - t0
        _write_changes(dsn, n, seed=len(slot))
        applied, spent = 0, 0.0
        while True:
            t0 = time.perf_counter()
            end = src.step_end(offset)
            if end == offset:
                break
            rows, _ = src.read(src.splits(offset, end))
            flow.step({planned.table: rows.drop_columns([END]).cast(planned.schema)})
            flow.take_unmatched()
            took = time.perf_counter() - t0
            assert isinstance(end, dict) and isinstance(offset, dict)
            if end["snapshot"] > offset["snapshot"]:
                snapshot_s += took
            else:
                applied, spent = applied + rows.num_rows, spent + took
            offset = end
    finally:
        src.close()
        loc.close()
    return KEYS / snapshot_s, applied / spent


def run_benchmark(
    mode: str = "full", base_dir: str | None = None, log: Log = quiet
) -> dict[str, Any]:
    if find_bin_dir() is None:
        raise SystemExit("no PostgreSQL: `make services` installs Debian's")
    n, repeats = PROFILES[mode], REPEATS[mode]
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="spindle-bench-cdc-", dir=base_dir))
    pg = PostgresServer(work / "pg", {"wal_level": "logical"})
    report: dict[str, Any] = {
        "benchmark": "cdc",
        "mode": mode,
        "changes": n,
        "changes_per_step": PER_STEP,
        "changes_per_transaction": PER_TRANSACTION,
        "keys": KEYS,
        "repeats": repeats,
        "machine": machine_info(),
        "versions": versions(),
        "revision": engine_revision(),
    }
    try:
        pg.start()
        pg.create_database("bench")
        dsn = f"host=127.0.0.1 port={pg.port} user=postgres dbname=bench"
        runs: dict[str, list[float]] = {"inserts": [], "cdc": [], "snapshot": []}
        for i in range(repeats):  # interleaved, so drifting load hits both alike
            log(f"inserts: {n:,} records")
            inserts = dataflow_records_per_s(log_spec(False), records(n, False), work / "ins")
            runs["inserts"].append(inserts)
            log(f"cdc: {n:,} changes")
            snap, changes = _cdc_run(dsn, n, f"bench_cdc_{i}", work / f"cdc{i}")
            runs["snapshot"].append(snap)
            runs["cdc"].append(changes)
        ins, cdc = statistics.median(runs["inserts"]), statistics.median(runs["cdc"])
        report.update(
            inserts_per_s=ins,
            cdc_changes_per_s=cdc,
            cdc_over_inserts=cdc / ins,
            snapshot_rows_per_s=statistics.median(runs["snapshot"]),
            runs=runs,
        )
    finally:
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)
    report["machine"]["load_average_at_end"] = list(os.getloadavg())
    report["elapsed_s"] = time.perf_counter() - started
    cleaned: dict[str, Any] = clean(report)
    return cleaned


def _summary(r: dict[str, Any]) -> str:
    return (
        f"inserts {r['inserts_per_s']:,.0f}/s, CDC changes {r['cdc_changes_per_s']:,.0f}/s "
        f"(x{r['cdc_over_inserts']:.3f}), snapshot {r['snapshot_rows_per_s']:,.0f} rows/s"
    )


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("python -m bench.cdc", __doc__ or "", run_benchmark, _summary, argv)


if __name__ == "__main__":
    raise SystemExit(main())
