"""Where a spec's file paths may go: local paths inside the configured file roots (symlinks
resolved), object-store paths (`s3://bucket/prefix`) inside the configured object roots
(a spec's every path checked: `model.outside_roots`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path


def resolve_path(path: str, roots: Sequence[Path]) -> Path | None:
    """`path` (relative ones against the first root) with symlinks resolved, if it lies
    inside one of `roots`; else None."""
    full = Path(os.path.realpath(Path(roots[0]) / path))
    for root in roots:
        r = Path(os.path.realpath(root))
        if full == r or r in full.parents:
            return full
    return None


OBJECT_SCHEME = "s3://"


def is_object_path(path: str) -> bool:
    """Whether a spec's path names an object-store location (`s3://bucket/prefix`)."""
    return path.startswith(OBJECT_SCHEME)


def inside_object_roots(path: str, object_roots: Sequence[str]) -> bool:
    """Whether object-store path `path` lies under one of `object_roots` (`s3://bucket/p`),
    compared segment by segment; a `.` or `..` segment, an empty one or a backslash never
    does."""
    segments = path[len(OBJECT_SCHEME) :].split("/")
    if any(s in ("", ".", "..") or "\\" in s for s in segments):
        return False
    for root in object_roots:
        want = root[len(OBJECT_SCHEME) :].strip("/").split("/")
        if is_object_path(root) and segments[: len(want)] == want:
            return True
    return False


__all__ = [
    "OBJECT_SCHEME",
    "inside_object_roots",
    "is_object_path",
    "resolve_path",
]
