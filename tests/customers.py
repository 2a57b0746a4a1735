"""The per-customer pipeline several crash tests run: JSON-lines files of (customer,
amount), one file per step, aggregated per customer into a `files` sink; and the plain-Python
reference its output must integrate to."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from storage_engine.schema import WEIGHT

Aggregate = Counter[tuple[str, int, int]]  # (customer, count, sum) -> weight


def write_input(d: Path, files: int, rows: int, customers: int, seed: int) -> Aggregate:
    """`files` files of `rows` lines in `d`; the final aggregate, computed in plain Python."""
    d.mkdir(parents=True)
    rng = random.Random(seed)
    n: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for f in range(files):
        lines = []
        for _ in range(rows):
            c, a = f"c{rng.randint(0, customers)}", rng.randint(1, 100)
            n[c] += 1
            total[c] += a
            lines.append(json.dumps({"customer": c, "amount": a}))
        (d / f"part-{f:04d}.json").write_text("\n".join(lines) + "\n")
    return Counter({(c, n[c], total[c]) for c in n})


def spec(name: str, source: str, sink: str, every_steps: int, trigger: str) -> dict[str, Any]:
    """count(*) and sum(amount) per customer, one input file per step, to a JSONL sink."""
    return {
        "name": name,
        "source": {
            "kind": "files",
            "path": source,
            "format": "json",
            "schema": {"customer": "string", "amount": "bigint"},
            "max_files_per_step": 1,
        },
        "state": [
            {
                "name": "per_customer",
                "kind": "aggregate",
                "group_by": ["customer"],
                "aggregates": [
                    {"name": "n", "func": "count"},
                    {"name": "total", "func": "sum", "column": "amount"},
                ],
            }
        ],
        "sinks": [
            {
                "name": "out",
                "kind": "files",
                "from": "per_customer",
                "path": sink,
                "format": "jsonl",
            }
        ],
        "checkpoint": {"every_steps": every_steps},
        "trigger": {"interval": trigger},
    }


def integrated(d: Path) -> Aggregate:
    """The sink's change rows summed up: what its output says the aggregate is."""
    out: Aggregate = Counter()
    for f in sorted(d.iterdir()):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            out[(r["customer"], r["n"], r["total"])] += r[WEIGHT]
    return +out
