"""A first end-to-end check of the engine's public surface; the thorough suites live beside."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from storage_engine import Batch, EngineSettings, StorageLocation, ZSetSchema

SCHEMA = ZSetSchema.of([("k", pa.int64())], [("v", pa.int64())])


def test_insert_commit_reopen_matches_dict_reference(tmp_path: Path) -> None:
    settings = EngineSettings(memory_budget_bytes=1 << 20, max_memory_batch_bytes=256 << 10)
    rng = np.random.default_rng(0)
    ref: dict[tuple[int, int], int] = {}
    with StorageLocation.open(str(tmp_path), fingerprint="f", settings=settings) as loc:
        spine = loc.spine("op", SCHEMA)
        for step in range(30):
            k, v = rng.integers(0, 5000, 2000), rng.integers(0, 3, 2000)
            w = rng.choice([1, -1], 2000)
            for key, val, wt in zip(k.tolist(), v.tolist(), w.tolist(), strict=True):
                ref[(key, val)] = ref.get((key, val), 0) + wt
            spine.insert(Batch.from_columns(SCHEMA, {"k": k, "v": v}, w))
            if step % 10 == 9:
                loc.commit(step=step)
        expected = {r: w for r, w in ref.items() if w}
        assert spine.to_batch().to_dict() == expected
    with StorageLocation.open(str(tmp_path), fingerprint="f", settings=settings) as loc:
        assert loc.step == 29
        assert loc.spine("op", SCHEMA).to_batch().to_dict() == expected
