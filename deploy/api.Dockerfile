# syntax=docker/dockerfile:1
# The control plane's image: the API (`python -m backend serve --no-worker`), the one-shot
# `python -m backend migrate`, and Celery beat. No Java: Spark runs in the worker image.
# Build context: the repository root (docker compose does this; by hand:
#   docker build -f deploy/api.Dockerfile -t spindle-api .).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

RUN python -m venv /opt/venv
WORKDIR /app

# Dependencies first, so that code changes do not reinstall them: pinned with hashes
# (requirements-runtime.lock, the versions the tests ran).
COPY pyproject.toml README.md requirements-runtime.lock ./
RUN pip install --require-hashes -r requirements-runtime.lock

# The packages the wheel installs (pyproject.toml); the migrations are inside `backend`.
COPY pipeline_spec/ pipeline_spec/
COPY storage_engine/ storage_engine/
COPY spindle_sql/ spindle_sql/
COPY workers/ workers/
COPY backend/ backend/
COPY spindle_cli/ spindle_cli/
# Editable ("compat": a .pth naming /app), as scripts/bootstrap.sh does: the code stays in
# /app, the same path in every image, and the `spindle` command is installed.
RUN pip install --no-deps --config-settings editable_mode=compat -e . \
    && python -c "import backend.api.app, workers.jobs.celery_app, spindle_cli.main" \
    && python -c "from backend.migrate import head; assert head()"

RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/spindle \
        --shell /usr/sbin/nologin spindle \
    && mkdir -p /var/lib/spindle \
    && chown spindle:spindle /var/lib/spindle
# (An empty named volume mounted here starts out with this ownership.)
ENV SPINDLE_DATA_DIR=/var/lib/spindle

USER spindle
EXPOSE 8000
CMD ["python", "-m", "backend", "serve", "--no-worker", "--host", "0.0.0.0", "--port", "8000"]
