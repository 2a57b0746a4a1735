"""Benchmarks that run Spindle beside its peers in one process and print JSON (see README.md).

Every benchmark is a process entry point (`python -m bench.X`), and this package is imported
first: NumPy's CPU kernels are chosen here, before NumPy is imported, as the driver chooses
them for pipelines (`workers/runtime/cpu_dispatch.py`).
"""

from workers.runtime import cpu_dispatch

cpu_dispatch.choose()
