"""The built-in pipelines a driver warms up on before it has a pipeline of its own: a files
pipeline (JSON, CSV or Parquet; a group and a window aggregate) and a Nexmark join. The
class-data archive's build runs them (`python -m workers.runtime.warm_up DUMP_TO`, from
`spark_cds.build`) and so does a spare driver (`standby.warm_up_spare`)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from pyspark import SparkContext

from pipeline_spec import model as S
from pipeline_spec.model import parse_spec

from . import spark_cds
from .run_builder import open_runner
from .session import spark_session


def cds_workload(dump_to: Path) -> None:
    """In its own process: one session dumping its classes at exit to `dump_to`; the
    workload; then the JVM is told to exit and waited for, so the archive is complete when
    this returns."""

    spark = spark_session(
        "spindle-cds",
        java_options=f"-XX:ArchiveClassesAtExit={dump_to}",
        class_path=spark_cds.workload_class_path(),
    )
    # A scratch file left behind must not fail the archive's build.
    with tempfile.TemporaryDirectory(prefix="spindle-cds-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        specs = [files_spec(work), nexmark_join_spec()]
        for i, spec in enumerate(specs):
            runner = open_runner(spec, str(work / f"storage-{i}"), spark=spark, base_dir=str(work))
            try:
                runner.run(max_steps=2, stop_when_idle=5)
            finally:
                runner.close()
    gateway = SparkContext._gateway
    spark.stop()
    assert gateway is not None
    jvm = gateway.proc
    jvm.stdin.close()  # Spark's gateway exits when its standard input ends
    jvm.wait(timeout=spark_cds.JVM_EXIT_TIMEOUT_S)


def nexmark_join_spec() -> S.PipelineSpec:
    """The archive's join workload: docs/examples/nexmark-q3.yaml without its sink."""
    return parse_spec(NEXMARK_JOIN)


# docs/examples/nexmark-q3.yaml without its sink (the worker image has no docs/).
NEXMARK_JOIN = {
    "name": "cds-nexmark",
    "source": {"kind": "datagen", "generator": "nexmark", "seed": 1, "rows_per_second": 10000},
    "state": [
        {
            "name": "auction_sellers",
            "kind": "join",
            "left": {
                "where": "event_type = 1",
                "select": [
                    "auction_id",
                    "auction_seller AS seller",
                    "auction_category AS category",
                ],
            },
            "right": {
                "where": "event_type = 0",
                "select": ["person_id", "person_name AS name", "person_state AS state"],
            },
            "left_on": ["seller"],
            "right_on": ["person_id"],
        }
    ],
}


def files_spec(work: Path, fmt: str = "json") -> S.PipelineSpec:
    """The archive's files workload: 2 files of 500 rows (customer, amount, ts) under
    `work` as JSON lines (`in/`), CSV with a header (`in-csv/`) or Parquet (`in-parquet/`),
    a transform, a group and a window aggregate, a files sink."""
    inp = work / ("in" if fmt == "json" else f"in-{fmt}")
    inp.mkdir()
    for f in range(2):
        rows = [
            {"customer": f"c{i % 50}", "amount": i, "ts": f"2024-01-01T00:0{f}:{i % 60:02d}Z"}
            for i in range(500)
        ]
        if fmt == "json":
            (inp / f"part-{f}.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        elif fmt == "csv":
            lines = ["customer,amount,ts"] + [
                f"{r['customer']},{r['amount']},{r['ts']}" for r in rows
            ]
            (inp / f"part-{f}.csv").write_text("\n".join(lines) + "\n")
        else:
            import pyarrow as pa
            import pyarrow.compute as pc
            import pyarrow.parquet as pq

            table = pa.table(
                {
                    "customer": [r["customer"] for r in rows],
                    "amount": pa.array([r["amount"] for r in rows], pa.int64()),
                    "ts": pc.assume_timezone(
                        pc.strptime([r["ts"] for r in rows], "%Y-%m-%dT%H:%M:%SZ", "us"), "UTC"
                    ),
                }
            )
            pq.write_table(table, inp / f"part-{f}.parquet")
    from pipeline_spec.model import parse_spec

    return parse_spec(
        {
            "name": "cds-workload",
            "source": {
                "kind": "files",
                "path": str(inp),
                "format": fmt,
                "schema": {"customer": "string", "amount": "bigint", "ts": "timestamp"},
                "max_files_per_step": 1,
            },
            "transform": {"where": "amount >= 0", "select": ["customer", "amount", "ts"]},
            "state": [
                {
                    "name": "per_customer",
                    "kind": "aggregate",
                    "group_by": ["customer"],
                    "aggregates": [
                        {"name": "n", "func": "count"},
                        {"name": "total", "func": "sum", "column": "amount"},
                        {"name": "top", "func": "max", "column": "amount"},
                    ],
                },
                {
                    "name": "per_minute",
                    "kind": "window_aggregate",
                    "time_column": "ts",
                    "size": 60,
                    "aggregates": [{"name": "n", "func": "count"}],
                },
            ],
            "sinks": [
                {"name": "out", "kind": "files", "from": "per_customer", "path": str(work / "out")}
            ],
            "checkpoint": {"every_steps": 1},
            "trigger": {"interval": "10ms"},
        }
    )


if __name__ == "__main__":
    cds_workload(Path(sys.argv[1]))
