"""The installed release's version: what `spindle --version`, `GET /api/v1/version` and the
console's footer show."""

from __future__ import annotations

import importlib.metadata


def installed_version() -> str:
    """The version of the installed distribution (its metadata, written by pip from
    pyproject.toml), not one kept in the code, so the two cannot disagree."""
    try:
        return importlib.metadata.version("spindle")
    except importlib.metadata.PackageNotFoundError:  # run from sources that were never installed
        return "unknown (not installed)"


__all__ = ["installed_version"]
