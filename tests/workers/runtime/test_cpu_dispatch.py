"""NumPy's AVX-512 kernels are turned off on AMD Zen 4 only, before NumPy is imported, and
never against the user's own setting."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workers.runtime import cpu_dispatch

FLAGS_AVX512 = "fpu sse2 avx2 avx512f avx512bw avx512vl"


def cpuinfo(vendor: str, family: int, flags: str) -> str:
    first = f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nflags\t\t: {flags}\n"
    second = "\nprocessor\t: 1\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n"
    return first + second + f"flags\t\t: {FLAGS_AVX512}\n"


@pytest.mark.parametrize(
    ("vendor", "family", "flags", "zen4"),
    [
        ("AuthenticAMD", 25, FLAGS_AVX512, True),  # Zen 4
        ("AuthenticAMD", 25, "fpu sse2 avx2", False),  # Zen 3: same family, no AVX-512
        ("AuthenticAMD", 26, FLAGS_AVX512, False),  # Zen 5
        ("GenuineIntel", 6, FLAGS_AVX512, False),
    ],
)
def test_only_zen4_is_recognised(vendor: str, family: int, flags: str, zen4: bool) -> None:
    assert cpu_dispatch.is_zen4(cpuinfo(vendor, family, flags)) is zen4


def test_choose_sets_the_variable_on_zen4_unless_set_or_numpy_is_loaded(tmp_path: Path) -> None:
    zen4, intel = tmp_path / "zen4", tmp_path / "intel"
    zen4.write_text(cpuinfo("AuthenticAMD", 25, FLAGS_AVX512))
    intel.write_text(cpuinfo("GenuineIntel", 6, FLAGS_AVX512))
    env: dict[str, str] = {}
    assert cpu_dispatch.choose(env, {}, str(zen4)) == cpu_dispatch.ZEN4_DISABLED
    assert env == {cpu_dispatch.VARIABLE: cpu_dispatch.ZEN4_DISABLED}
    mine = {cpu_dispatch.VARIABLE: ""}  # the user's choice, even empty, stands
    assert cpu_dispatch.choose(mine, {}, str(zen4)) is None and mine[cpu_dispatch.VARIABLE] == ""
    late: dict[str, str] = {}  # too late once NumPy is imported
    assert cpu_dispatch.choose(late, {"numpy": object()}, str(zen4)) is None and not late
    for path in (str(intel), str(tmp_path / "missing")):
        untouched: dict[str, str] = {}
        assert cpu_dispatch.choose(untouched, {}, path) is None and not untouched


_REPORT = (
    "import os, numpy; "
    f"print(os.environ.get({cpu_dispatch.VARIABLE!r}), "
    "'X86_V4' in numpy.__config__.CONFIG['SIMD Extensions']['found'])"
)


def _driver(module: str) -> str:
    return (
        "import runpy, sys\n"
        "sys.argv = ['driver', '--help']\n"
        "try:\n"
        f"    runpy.run_module({module!r}, run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
    )


def _run(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != cpu_dispatch.VARIABLE}
    return (
        subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )


def _zen4_here() -> bool:
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
        return cpu_dispatch.is_zen4(f.read(1 << 16))


@pytest.mark.parametrize(
    "entry",
    ["import bench", _driver("workers.runtime.driver"), _driver("workers.jobs.driver")],
)
def test_entry_points_choose_before_numpy_is_imported(entry: str) -> None:
    """`python -m bench.*` (the package first), `python -m workers.runtime.driver` and
    `python -m workers.jobs.driver` (before the JVM starts): NumPy then loads with the choice
    made (the variable is what NumPy reads at import)."""
    out = _run(f"{entry}\n{_REPORT}")
    if _zen4_here():
        assert out == f"{cpu_dispatch.ZEN4_DISABLED} False"
    else:
        assert out.startswith("None ")


def test_importing_the_engine_or_the_workers_changes_nothing() -> None:
    """Process tuning is the entry points' business, not an import's."""
    out = _run(f"import storage_engine, workers.runtime.runner, backend.api.app\n{_REPORT}")
    assert out.startswith("None ")
    if _zen4_here():
        assert out == "None True"
