#!/usr/bin/env bash
# Creates .venv/ at the repository root with every Python dependency, on a fresh machine.
# Idempotent: reinstalls only when pyproject.toml or requirements.lock changed since the last
# successful run.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
stamp=.venv/.spindle-installed
want=$(cat pyproject.toml requirements.lock | sha256sum | cut -d' ' -f1)

# Spark's classes in a class-data-sharing archive: every driver's JVM starts seconds sooner
# (workers/runtime/spark_cds.py). Built once per JDK and Spark install; without it Spark still works.
spark_cds() {
    .venv/bin/python -m workers.runtime.spark_cds path >/dev/null 2>&1 && return 0
    echo "bootstrap: building the class-data archive of Spark's classes (about a minute)" >&2
    .venv/bin/python -m workers.runtime.spark_cds build >&2 ||
        echo "bootstrap: warning: no class-data archive; Spark starts without it" >&2
}

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    spark_cds
    exit 0
fi
if ! command -v java >/dev/null 2>&1; then
    echo "bootstrap: installing a Java runtime for Spark (openjdk-17-jre-headless)" >&2
    apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
# Every dependency from the lock, each file checked against its hash (scripts/lock.sh
# updates the lock); then Spindle itself, with nothing more.
.venv/bin/python -m pip install -q --require-hashes -r requirements.lock
.venv/bin/python -m pip install -q --no-deps -e . --config-settings editable_mode=compat
echo "$want" > "$stamp"
spark_cds
