"""Writes requirements-runtime.lock: the pins of requirements.lock that the product itself
needs (pyproject.toml's [project] dependencies and what they need, no dev extra), as they
are there: the same versions and hashes. The images (deploy/*.Dockerfile) install from it
with --require-hashes, so an image runs what the tests ran. `scripts/lock.sh` runs this
after pip-compile; tests/deploy/test_lock.py fails while it is stale.

A pin is kept when it is a runtime dependency or when a kept pin needs it, as the lock's
`# via` comments say.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
LOCK, RUNTIME_LOCK = ROOT / "requirements.lock", ROOT / "requirements-runtime.lock"
_ENTRY = re.compile(r"^([A-Za-z0-9_.-]+)==", re.M)
_HEADER = """\
# The runtime's pins: requirements.lock's entries that pyproject.toml's [project]
# dependencies need (no dev extra), for the images. Written by scripts/runtime_lock.py
# (scripts/lock.sh runs it); do not edit.
"""


def _entries(text: str) -> dict[str, str]:
    """Each pin's block (its line, hashes and `# via` comments), by canonical name."""
    found = list(_ENTRY.finditer(text))
    ends = [m.start() for m in found[1:]] + [len(text)]
    return {
        canonicalize_name(m.group(1)): text[m.start() : end]
        for m, end in zip(found, ends, strict=True)
    }


def _parents(block: str) -> set[str]:
    """The packages that need this pin (`# via`), canonical; `spindle` for pyproject.toml."""
    comments = [ln.strip().lstrip("#").strip() for ln in block.splitlines() if "#" in ln]
    names: set[str] = set()
    for c in comments:
        c = c.removeprefix("via").strip()
        if c:
            names.add(canonicalize_name(c.split()[0]))
    return names


def runtime_lock(lock_text: str, dependencies: list[str]) -> str:
    entries = _entries(lock_text)
    needed: set[str] = {canonicalize_name(Requirement(d).name) for d in dependencies}
    grew = True
    while grew:
        grew = False
        for name, block in entries.items():
            if name not in needed and _parents(block) & needed:
                needed.add(name)
                grew = True
    missing = needed - entries.keys()
    if missing:
        raise SystemExit(f"runtime_lock: not in requirements.lock: {sorted(missing)}")
    body = "".join(entries[n] for n in entries if n in needed)
    return _HEADER + body.rstrip("\n") + "\n"


def main() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    text = runtime_lock(LOCK.read_text(encoding="utf-8"), project["dependencies"])
    RUNTIME_LOCK.write_text(text, encoding="utf-8")
    print(f"lock: wrote {RUNTIME_LOCK.name}", file=sys.stderr)


if __name__ == "__main__":
    main()
