"""The Spark runtime: a pipeline's driver process (`python -m workers.runtime.driver`), its
runner, connectors and control-plane clients. Imports neither `backend` nor the Celery jobs;
see README.md."""
