"""Spindle workers: the Spark runtime (`workers.runtime`) and the Celery jobs that run it under
the control plane (`workers.jobs`). See README.md."""
