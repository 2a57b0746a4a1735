"""A checkpoint of an operator-spec pipeline using every operator kind resumes on this runtime.

`golden/operator-kinds-v1/` was written once by the release of 2026-12-06 (before issue 49
compiled operator specs into the SQL dataflow) with the standalone driver:

    python -m tests.workers.runtime.test_golden_operators DIR   # writes DIR/in from the seed
    cd DIR && python -m workers.runtime.driver run spec.yaml --storage state --max-steps 3

`spec.yaml` has a transform (filter, computed column), an aggregate (count, sum, avg, min,
max), a hopping window aggregate with lateness, a distinct over some columns and a join of
two filtered projections; each writes a `files` sink. The run stopped after three of the
six input files with a checkpoint at step 3 (`state/`; `out/` its sinks' output). The test
resumes a copy: the run must restore that checkpoint (not start over) and take steps 4 to
6, and every sink's output must integrate to its result over all six files, computed here in
plain Python. Regenerate only when the storage format changes on purpose, keeping the old
fixture beside the new one.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import shutil
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from pipeline_spec.model import load_spec
from storage_engine.schema import WEIGHT
from workers.runtime.run_builder import open_runner

GOLDEN = Path(__file__).parent / "golden" / "operator-kinds-v1"
Rows = Counter[tuple[Any, ...]]


def write_input(d: Path) -> None:
    """Six JSON-lines files of 30 rows, event times increasing (so no row is late)."""
    d.mkdir(parents=True)
    rng = random.Random(49)
    t = 1_700_000_000
    for f in range(6):
        lines = []
        for _ in range(30):
            t += rng.randint(1, 9)
            c = f"c{rng.randint(0, 5)}"
            choices: list[int | None] = [None, *range(1, 100)]
            a = rng.choice(choices) if rng.random() < 0.1 else rng.randint(1, 99)
            ts = dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            row = {"customer": c, "amount": a, "ts": ts, "kind": rng.choice("ab")}
            lines.append(json.dumps(row))
        (d / f"part-{f:04d}.json").write_text("\n".join(lines) + "\n")


def _stream(root: Path) -> list[dict[str, Any]]:
    """The transformed stream: customers other than c5, with `twice` = 2 * amount."""
    rows = [json.loads(x) for f in sorted((root / "in").iterdir()) for x in f.open()]
    out = []
    for r in rows:
        if r["customer"] == "c5":
            continue
        r["twice"] = None if r["amount"] is None else 2 * r["amount"]
        r["ts"] = dt.datetime.fromisoformat(r["ts"]).timestamp()
        out.append(r)
    return out


def _agg(rows: list[dict[str, Any]]) -> tuple[int, int | None]:
    amounts = [r["amount"] for r in rows if r["amount"] is not None]
    return len(rows), sum(amounts) if amounts else None


def per_customer(stream: list[dict[str, Any]]) -> Rows:
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in stream:
        groups.setdefault(r["customer"], []).append(r)
    out: Rows = Counter()
    for c, rows in groups.items():
        amounts = [r["amount"] for r in rows if r["amount"] is not None]
        twice = [r["twice"] for r in rows if r["twice"] is not None]
        mean = round(sum(twice) / len(twice), 9) if twice else None
        out[(c, *_agg(rows), mean, min(amounts, default=None), max(amounts, default=None))] = 1
    return out


def per_minute(stream: list[dict[str, Any]]) -> Rows:
    """Windows of 60 s every 30 s, per kind."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in stream:
        first = int(r["ts"]) // 30 * 30
        for start in (first, first - 30):
            groups.setdefault((_utc(start), _utc(start + 60), r["kind"]), []).append(r)
    return Counter({(*k, *_agg(rows)): 1 for k, rows in groups.items()})


def _utc(seconds: int) -> str:
    return str(dt.datetime.fromtimestamp(seconds, dt.UTC))


def pairs(stream: list[dict[str, Any]]) -> Rows:
    return Counter({(r["kind"], r["customer"]): 1 for r in stream})


def matches(stream: list[dict[str, Any]]) -> Rows:
    left = [r for r in stream if r["kind"] == "a"]
    right = [r for r in stream if r["kind"] == "b" and r["amount"] is not None and r["amount"] > 80]
    return Counter(
        (a["customer"], a["amount"], b["amount"])
        for a in left
        for b in right
        if a["customer"] == b["customer"]
    )


SINKS: dict[str, tuple[list[str], Callable[[list[dict[str, Any]]], Rows]]] = {
    "per_customer": (["customer", "n", "total", "mean", "lo", "hi"], per_customer),
    "per_minute": (["window_start", "window_end", "kind", "n", "total"], per_minute),
    "pairs": (["kind", "customer"], pairs),
    "matches": (["customer", "amount", "big"], matches),
}


def integrated(d: Path, columns: list[str]) -> Rows:
    """A sink's change rows summed up (floats rounded: an average's last digits may vary)."""
    got: Rows = Counter()
    for f in sorted(d.iterdir()):
        for line in f.read_text().splitlines():
            x = json.loads(line)
            row = [round(v, 9) if isinstance(v, float) else v for v in (x[c] for c in columns)]
            got[tuple(row)] += x[WEIGHT]
    return +got


def test_a_checkpoint_of_every_operator_kind_resumes(tmp_path: Path, spark: SparkSession) -> None:
    root = tmp_path / "golden"
    shutil.copytree(GOLDEN, root)
    spec = load_spec(root / "spec.yaml")
    source = spec.source.model_copy(update={"path": str(root / "in")})
    spec = spec.model_copy(update={"tables": [source, *spec.tables[1:]]})
    r = open_runner(spec, str(root / "state"), base_dir=str(root), spark=spark)
    try:
        result = r.run(stop_when_idle=2.0)
    finally:
        r.close()
    assert (result.first_step, result.last_step) == (3, 6)  # restored at 3, not started over
    stream = _stream(root)
    for name, (columns, reference) in SINKS.items():
        assert integrated(root / "out" / name, columns) == reference(stream), name


if __name__ == "__main__":
    write_input(Path(sys.argv[1]) / "in")
