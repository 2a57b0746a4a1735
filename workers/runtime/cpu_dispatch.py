"""NumPy's choice of CPU kernels, made before NumPy is imported.

NumPy picks its SIMD kernels once, at import, and leaves out those named in the environment
variable NPY_DISABLE_CPU_FEATURES. On AMD Zen 4 its AVX-512 sort (x86-simd-sort) is several
times slower than its AVX2 sort: the memory-destination compress-store it is built on is
microcoded there (numpy/numpy#32690, numpy/x86-simd-sort#6). Sorting is the engine's main
kernel (every batch is built by a sort, every lookup sorts its probes), so on Zen 4 NumPy's
AVX-512 kernels are turned off, unless the variable is already set (set it, even empty, to
decide yourself); the engine's lookups and ingest gain on an end-to-end engine figure
(docs/benchmarks.md, "Machinery that must pay its way"). Zen 4 runs 512-bit operations as
two 256-bit halves, so the other kernels lose little. Zen 5 (family 26) and Intel are left
alone.

Process entry points call `choose()` before NumPy is imported: the driver
(`workers/runtime/driver.py`, before its JVM starts, so that Spark's Python workers inherit the
variable) and the benchmarks (`bench/__init__.py`). Importing this module changes nothing;
it imports nothing but the standard library.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping

VARIABLE = "NPY_DISABLE_CPU_FEATURES"
ZEN4_DISABLED = "X86_V4 AVX512_ICL"


def is_zen4(cpuinfo: str) -> bool:
    """Whether /proc/cpuinfo text describes AMD family 25 with AVX-512: Zen 4 (Zen 3 shares
    the family but has no AVX-512)."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break  # the first processor's block is enough
        name, _, value = line.partition(":")
        fields[name.strip()] = value.strip()
    return (
        fields.get("vendor_id") == "AuthenticAMD"
        and fields.get("cpu family") == "25"
        and "avx512f" in fields.get("flags", "").split()
    )


def choose(
    environ: MutableMapping[str, str] = os.environ,
    modules: Mapping[str, object] = sys.modules,
    cpuinfo_path: str = "/proc/cpuinfo",
) -> str | None:
    """Set NPY_DISABLE_CPU_FEATURES for Zen 4 if NumPy is not imported yet and the user has
    not set it; returns what was set (None: nothing)."""
    if VARIABLE in environ or "numpy" in modules:
        return None
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 16)
    except OSError:  # not Linux, or no /proc: keep NumPy's own choice
        return None
    if not is_zen4(text):
        return None
    environ[VARIABLE] = ZEN4_DISABLED
    return ZEN4_DISABLED
