"""Child process for the kill-during-upload test: commits a large checkpoint to a location
with an object store, prints LOCAL <uuid> once it is locally durable, then waits (the test
kills it with SIGKILL while the upload is running)."""

from __future__ import annotations

import json
import sys
import time

from storage_engine import EngineSettings, ObjectStore, ObjectStoreSettings, StorageLocation
from tests.storage_engine.test_location import INT, rows


def main() -> None:
    path, settings_json = sys.argv[1], sys.argv[2]
    # The secret comes from SPINDLE_S3_SECRET_KEY: it is never put on a command line.
    store = ObjectStore(ObjectStoreSettings(**json.loads(settings_json)))
    # Many mid-sized files (no merges), uploaded one at a time: a long upload to kill.
    settings = EngineSettings(merge_base_rows=10**9, max_batches_per_spine=10**6)
    loc = StorageLocation.open(path, fingerprint="fp", settings=settings, remote=store)
    sp = loc.spine("op", INT)
    for i in range(40):
        sp.insert(rows(10_000 + i * 20_000, 10_000 + (i + 1) * 20_000))
    uid = loc.commit_async(step=2).wait_local()
    print(f"LOCAL {uid}", flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
