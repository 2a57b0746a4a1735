"""The Celery jobs: launch and supervise runs' drivers, keep spares, run offline operations,
and the database's implementation of the driver's control plane. See README.md."""
