"""Spindle's control plane: REST API, database records, lifecycle of pipelines and runs."""
