"""Benchmarks that run Spindle beside its peers in one process and print JSON (see README.md)."""
