"""Spindle workers: the Spark pipeline runtime (spec, sources, sinks, runner). See README.md."""

# The engine chooses NumPy's CPU kernels; it must be imported before NumPy is
# (storage_engine/cpu_dispatch.py).
import storage_engine  # noqa: F401
