"""A checkpoint taken by an earlier release resumes on this runtime.

`golden/operator-spec-v1/` was written once by the release of 2026-11-28 (issue 30: before
SQL pipelines changed the runtime) running `make` below: an operator-spec pipeline (count,
sum, min and max per customer) over four input files, stopped after two steps with a
checkpoint at step 2 (`state/`), and its sink's output of those steps (`out/`). The test
resumes a copy: the run must restore that checkpoint (not start over), take steps 3 and 4,
and the sink's output must integrate to the aggregate over all four files. Regenerate only
when the storage format changes on purpose, keeping the old fixture beside the new one.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from pipeline_spec.model import parse_spec
from storage_engine.fileio import PosixFileLayer
from storage_engine.manifest import CHECKPOINT_META, read_doc
from storage_engine.schema import WEIGHT
from workers.runtime.run_builder import open_runner

from ... import customers

GOLDEN = Path(__file__).parent / "golden" / "operator-spec-v1"


def golden_spec(root: Path) -> dict[str, Any]:
    spec = customers.spec("golden", str(root / "in"), str(root / "out"), 2, "200ms")
    spec["state"][0]["aggregates"] += [
        {"name": "lo", "func": "min", "column": "amount"},
        {"name": "hi", "func": "max", "column": "amount"},
    ]
    return spec


def make(out: Path) -> None:
    """How the fixture was made (python -m tests.workers.runtime.test_golden_checkpoint DIR)."""
    customers.write_input(out / "in", 4, 150, customers=12, seed=9)
    r = open_runner(parse_spec(golden_spec(out)), str(out / "state"), base_dir=str(out))
    try:
        r.run(max_steps=2, stop_when_idle=2.0)
    finally:
        r.close()


def expected(root: Path) -> Counter[tuple[Any, ...]]:
    rows = [json.loads(x) for f in sorted((root / "in").iterdir()) for x in f.open()]
    per: dict[str, list[int]] = {}
    for r in rows:
        per.setdefault(r["customer"], []).append(r["amount"])
    return Counter({(c, len(a), sum(a), min(a), max(a)): 1 for c, a in per.items()})


def test_a_checkpoint_of_the_earlier_release_resumes(tmp_path: Path, spark: SparkSession) -> None:
    root = tmp_path / "golden"
    shutil.copytree(GOLDEN, root)
    # Its metadata holds the offset as one-source releases wrote it: `source_offset` only.
    (path,) = (root / "state").glob(f"*/{CHECKPOINT_META}")
    old = read_doc(PosixFileLayer(), str(path))["metadata"]
    assert old["source_offset"] == 2 and "source_offsets" not in old
    r = open_runner(
        parse_spec(golden_spec(root)), str(root / "state"), base_dir=str(root), spark=spark
    )
    try:
        result = r.run(stop_when_idle=2.0)
        # The checkpoints this run took hold every table's offset, and only that way.
        taken = [c for c in r.loc.list_checkpoints() if c.step > 2]
        metadata = [r.loc.checkpoint_metadata(c.uuid) for c in taken]
    finally:
        r.close()
    assert (result.first_step, result.last_step) == (2, 4)  # restored at 2, not started over
    # Read on from the restored offset: the two files left, steps 3 and 4.
    assert result.source_offsets == {"input": 4}
    assert metadata and all("source_offset" not in m for m in metadata)
    assert metadata[-1]["source_offsets"] == {"input": 4}
    got: Counter[tuple[Any, ...]] = Counter()
    for f in sorted((root / "out").iterdir()):
        for line in f.read_text().splitlines():
            x = json.loads(line)
            got[(x["customer"], x["n"], x["total"], x["lo"], x["hi"])] += x[WEIGHT]
    assert +got == expected(root)


if __name__ == "__main__":
    make(Path(sys.argv[1]))
