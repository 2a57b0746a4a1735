"""Write the golden storage location that test_format_compat.py reads (run once, by hand).

    .venv/bin/python -m tests.storage_engine.make_golden   # writes tests/storage_engine/golden/v1/
    .venv/bin/python -m tests.storage_engine.make_golden --out DIR  # anywhere else

It refuses to overwrite an existing golden directory: a committed golden copy is a record of
what an older build wrote, and the current engine must keep reading it. When the on-disk
format changes, bump the version, write a NEW directory (golden/v2/ + v2-expected.json) with
the new build and keep the old ones; test_format_compat.py reads every one of them.

The output is deterministic: a seeded RNG drives the data, and the engine's uuid4, clock
and perf_counter are replaced by seeded or fixed stand-ins while the location is written, so
a rerun with the same build produces the same bytes. The expected contents are computed from
an independent dict model of the inserts (not by reading the files back) and checked against
the engine before anything is written.

Contents (fingerprint "golden-v1", lz4 compression, bloom filters, 16-row blocks):
- spine "counts": int64 key `user`, int64 value `clicks`;
- spine "names": string key `name`, string value `city`;
- spine "events": timestamp[ms] key `ts`, int64 value `n`, with a lower bound (truncated);
- spine "pairs": composite key (`a` int64, `b` string), no value columns;
- checkpoints "first" (step 3) and "second" (step 5; shares three batch files per spine with
  "first": merging starts at six batches).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parent
if __package__ in (None, ""):
    sys.path.insert(0, str(HERE.parents[1]))

from storage_engine import Batch, EngineSettings, StorageLocation, ZSetSchema  # noqa: E402
from storage_engine.file_format import FORMAT_VERSION  # noqa: E402

FINGERPRINT = "golden-v1"
SETTINGS = EngineSettings(block_rows=16, compression="lz4", bloom=True, merge_fanout=6)
SCHEMAS = {
    "counts": ZSetSchema.of([("user", pa.int64())], [("clicks", pa.int64())]),
    "names": ZSetSchema.of([("name", pa.string())], [("city", pa.string())]),
    "events": ZSetSchema.of([("ts", pa.timestamp("ms"))], [("n", pa.int64())]),
    "pairs": ZSetSchema.of([("a", pa.int64()), ("b", pa.string())]),
}
T0 = dt.datetime(2024, 3, 1, 12, 0, 0)
CITIES = ["Lisbon", "Oslo", "Quito", "Perth", "Zürich"]

Row = tuple[Any, ...]


@contextmanager
def _deterministic(seed: int) -> Iterator[None]:
    """Seeded uuids, a fixed clock and a stepping perf_counter inside the engine."""
    rnd = random.Random(seed)
    ticks = iter(range(10**9))
    with ExitStack() as stack:
        stack.enter_context(
            mock.patch(
                "storage_engine.location.uuidlib.uuid4",
                lambda: uuid.UUID(int=rnd.getrandbits(128), version=4),
            )
        )
        stack.enter_context(
            mock.patch("storage_engine.location.time.perf_counter", lambda: next(ticks) * 0.001)
        )
        yield


def _batch(op: str, rng: np.random.Generator, n: int) -> Batch:
    s = SCHEMAS[op]
    w = rng.choice([1, 1, 2, -1], n)
    if op == "counts":
        cols: dict[str, Any] = {"user": rng.integers(0, 120, n), "clicks": rng.integers(0, 4, n)}
    elif op == "names":
        cols = {
            "name": [f"user-{x:03d}" for x in rng.integers(0, 80, n)],
            "city": [CITIES[x] for x in rng.integers(0, len(CITIES), n)],
        }
    elif op == "events":
        cols = {
            "ts": [T0 + dt.timedelta(seconds=int(x)) for x in rng.integers(0, 3600, n)],
            "n": rng.integers(0, 3, n),
        }
    else:
        cols = {"a": rng.integers(0, 10, n), "b": [f"b{x}" for x in rng.integers(0, 12, n)]}
    return Batch.from_columns(s, cols, w)


def _json_value(v: Any) -> Any:
    return v.isoformat() if isinstance(v, dt.datetime) else v


def _json_rows(rows: dict[Row, int]) -> list[list[Any]]:
    return [[*(_json_value(x) for x in r), w] for r, w in sorted(rows.items()) if w != 0]


def generate(out: Path) -> dict[str, Any]:
    """Write the location into `out` (must not exist) and return the expected contents."""
    rng = np.random.default_rng(20240301)
    ref: dict[str, dict[Row, int]] = {op: {} for op in SCHEMAS}
    lower: dict[str, Row] = {}
    expected: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "fingerprint": FINGERPRINT,
        "settings": SETTINGS.model_dump(),
        "spines": {
            op: {
                "keys": [[f.name, str(f.type)] for f in s.keys],
                "values": [[f.name, str(f.type)] for f in s.values],
            }
            for op, s in SCHEMAS.items()
        },
        "checkpoints": [],
    }
    clock = iter(1_709_294_400.0 + 60 * i for i in range(10**6))
    with tempfile.TemporaryDirectory() as tmp:
        work = os.path.join(tmp, "loc")
        with (
            _deterministic(42),
            StorageLocation.open(
                work, fingerprint=FINGERPRINT, settings=SETTINGS, clock=lambda: next(clock)
            ) as loc,
        ):
            spines = {op: loc.spine(op, s) for op, s in SCHEMAS.items()}
            for step in range(1, 6):
                for op, sp in spines.items():
                    b = _batch(op, rng, 40)
                    for r, w in b.to_dict().items():
                        ref[op][r] = ref[op].get(r, 0) + w
                    sp.insert(b)
                    sp.wait_idle()
                if step in (3, 5):
                    bound = (T0 + dt.timedelta(minutes=10 * step),)
                    spines["events"].truncate_below(bound)
                    lower["events"] = bound
                    ident = "first" if step == 3 else "second"
                    meta = {"source_offsets": {"clicks": step * 40}, "note": ident}
                    uid = loc.commit(identifier=ident, step=step, metadata=meta)
                    state = {
                        op: {
                            r: w
                            for r, w in rows.items()
                            if w != 0 and (op not in lower or r[: len(lower[op])] >= lower[op])
                        }
                        for op, rows in ref.items()
                    }
                    for op, sp in spines.items():
                        got = sp.to_batch().to_dict()
                        assert got == state[op], f"engine disagrees with the model on {op}"
                    expected["checkpoints"].append(
                        {
                            "uuid": uid,
                            "identifier": ident,
                            "step": step,
                            "metadata": meta,
                            "lower_bounds": {
                                op: [_json_value(x) for x in b] for op, b in lower.items()
                            },
                            "contents": {op: _json_rows(rows) for op, rows in state.items()},
                        }
                    )
        with StorageLocation.open(work, fingerprint=FINGERPRINT, settings=SETTINGS):
            pass  # the normal startup clean-up: nothing unreferenced is left behind
        os.remove(os.path.join(work, "LOCK"))
        shutil.copytree(work, out)
    return expected


def _pretty(v: Any, indent: str = "") -> str:
    """JSON with sorted keys, one line per row: lists of scalars stay on one line."""
    inner = indent + " "
    if isinstance(v, dict) and v:
        items = [f"{inner}{json.dumps(k)}: {_pretty(v[k], inner)}" for k in sorted(v)]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(v, list) and v and any(isinstance(x, dict | list) for x in v):
        return "[\n" + ",\n".join(inner + _pretty(x, inner) for x in v) + "\n" + indent + "]"
    return json.dumps(v, ensure_ascii=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=HERE / "golden" / f"v{FORMAT_VERSION}")
    ap.add_argument(
        "--expected", type=Path, help="default: <out>-expected.json beside the directory"
    )
    args = ap.parse_args()
    out: Path = args.out
    exp_path: Path = args.expected or out.with_name(out.name + "-expected.json")
    if out.exists() or exp_path.exists():
        sys.exit(f"{out} or {exp_path} exists: golden copies are never regenerated in place")
    expected = generate(out)
    exp_path.write_text(_pretty(expected) + "\n")
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out} ({total} bytes) and {exp_path}")


if __name__ == "__main__":
    main()
