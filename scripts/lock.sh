#!/usr/bin/env bash
# Regenerates requirements.lock: every Python dependency of pyproject.toml (its dev extra
# included) pinned, with the sha256 of every file pip may install for it; and from it
# requirements-runtime.lock, the runtime's pins alone, which the images install. `make bootstrap`
# installs from the lock alone (--require-hashes), so a new release of a dependency changes
# nothing until the lock does.
#
#   scripts/lock.sh  (make lock)        # re-resolve, keeping every pin that still fits
#   scripts/lock.sh --upgrade-package X # move X (and what it needs) to its newest release
#   scripts/lock.sh --upgrade           # move everything
#
# pip-tools runs from a throwaway virtual environment. Then `make test`, and commit the
# lock with pyproject.toml (tests/deploy/test_lock.py fails while they disagree).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
"$PYTHON" -m venv "$tools"
"$tools/bin/pip" install -q pip-tools==7.7.0
CUSTOM_COMPILE_COMMAND="scripts/lock.sh" "$tools/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --extra dev \
    --no-emit-index-url --no-emit-find-links --strip-extras \
    --output-file requirements.lock "$@" pyproject.toml
echo "lock: wrote requirements.lock" >&2
# The images' subset of it (deploy/*.Dockerfile): the runtime's pins, same versions.
"$tools/bin/pip" install -q packaging
"$tools/bin/python" scripts/runtime_lock.py
