"""Spindle workers: the Spark pipeline runtime (spec, sources, sinks, runner). See README.md."""
