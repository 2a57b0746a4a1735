"""glibc malloc keeps freed memory for reuse, unless the user configured malloc."""

from __future__ import annotations

import subprocess
import sys

from storage_engine import allocator

# Finds the common prefix of 100 000 strings 20 times (each call allocates and frees arrays
# of about 1 MiB); prints the page faults per call.
CHURN = """
import resource
import numpy as np, pyarrow as pa
from storage_engine import encoding
col = pa.array([f"user-{i:012d}" for i in range(100_000)])
encoding._common_prefix(col)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    encoding._common_prefix(col)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 20)
"""


def faults(**env: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", CHURN], capture_output=True, text=True, check=True, env=env
    )
    return int(out.stdout)


def test_the_user_configuration_stands() -> None:
    assert allocator.user_configured({"MALLOC_ARENA_MAX": "2"}) is False  # no trailing _
    assert allocator.user_configured({"MALLOC_TRIM_THRESHOLD_": "0"})
    assert allocator.user_configured({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"})
    assert allocator.tune({"MALLOC_MMAP_THRESHOLD_": "131072"}) is None


def test_tuning_sets_both_thresholds() -> None:
    assert allocator.tune({}) == allocator.SETTINGS


def test_freed_arrays_are_reused_without_page_faults() -> None:
    """Page faults counted by the kernel, not time: tuned, a call reuses the pages the last
    one freed; with glibc's thresholds at their initial 128 KiB (set by the user, so the
    engine leaves them) it faults in a new page for every 4 KiB it allocates."""
    tuned = faults()
    untuned = faults(MALLOC_TRIM_THRESHOLD_="131072", MALLOC_MMAP_THRESHOLD_="131072")
    assert tuned < 50 and untuned > 500
