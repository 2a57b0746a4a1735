# syntax=docker/dockerfile:1
# The worker image: Celery workers that launch and supervise pipelines' Spark drivers
# (one child process per running pipeline), and, in the compose profile "spark", the Spark
# master and workers themselves (`spark-class ...` from the pinned PySpark), so that every
# JVM runs the same Spark and every executor the same Python and Spindle code as the driver.
# Build context: the repository root.
FROM python:3.11-slim-bookworm

# Spark 4 needs Java 17+; procps gives Spark's scripts `ps`.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# Drivers set PYSPARK_PYTHON to their own interpreter, /opt/venv/bin/python: executors on
# other machines need that same path, Python 3.11 and the code in /app (this image).
RUN python -m venv /opt/venv
WORKDIR /app

# Dependencies (PySpark included) from requirements-runtime.lock, before the code: see
# api.Dockerfile.
COPY pyproject.toml README.md requirements-runtime.lock ./
RUN pip install --require-hashes -r requirements-runtime.lock

COPY pipeline_spec/ pipeline_spec/
COPY storage_engine/ storage_engine/
COPY spindle_sql/ spindle_sql/
COPY workers/ workers/
COPY backend/ backend/
COPY spindle_cli/ spindle_cli/
RUN pip install --no-deps --config-settings editable_mode=compat -e . \
    && python -c "import workers.jobs.celery_app, workers.jobs.driver, spindle_cli.main" \
    && java -version
# Spark's classes in a class-data-sharing archive (/opt/venv/share/spindle): every driver's
# JVM maps it and starts seconds sooner (workers/runtime/spark_cds.py).
RUN python -m workers.runtime.spark_cds build

RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/spindle \
        --shell /usr/sbin/nologin spindle \
    && mkdir -p /var/lib/spindle \
    && chown spindle:spindle /var/lib/spindle
ENV SPINDLE_DATA_DIR=/var/lib/spindle

USER spindle
# --hostname: one name per container, for `celery inspect` and the compose healthcheck.
CMD ["python", "-m", "celery", "-A", "workers.jobs.celery_app", "worker", "--pool", "threads", "--concurrency", "32", "--loglevel", "INFO", "--hostname", "spindle@%h"]
