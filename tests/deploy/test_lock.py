"""requirements.lock, which `make bootstrap` installs from (`--require-hashes`), agrees with
pyproject.toml: every dependency (the dev extra's too) pinned to one version its
specifier allows, every pin with its files' hashes, and nothing pinned that no dependency
needs. `scripts/lock.sh` regenerates it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
# A pin: `name==version \` then its `--hash=sha256:...` lines, then `# via ...` comments.
HASHES = r"((?:\s+--hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)"
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+) \\\n" + HASHES, re.M)
VIA = re.compile(r"^([A-Za-z0-9_.-]+)==\S+ \\\n(?:\s+--hash=\S+(?: \\)?\n)+((?:\s+#.*\n)+)", re.M)


def _pins(text: str) -> dict[str, str]:
    return {canonicalize_name(m.group(1)): m.group(2) for m in PIN.finditer(text)}


def test_every_dependency_is_pinned_within_its_specifier_with_hashes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    wanted += [Requirement(r) for r in project["optional-dependencies"]["dev"]]
    text = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    pins = _pins(text)
    entries = [ln for ln in text.splitlines() if re.match(r"^[A-Za-z0-9_.-]+==", ln)]
    assert len(pins) == len(entries) > 100, "a pin without hashes"
    for req in wanted:
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} is not in requirements.lock: run scripts/lock.sh"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"requirements.lock pins {name}=={pins[name]}, outside {req}: run scripts/lock.sh"
        )


def test_every_pin_is_needed_by_a_dependency() -> None:
    """A dependency dropped from pyproject.toml leaves the lock too (each pin says why)."""
    text = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    unexplained = [m.group(1) for m in VIA.finditer(text) if "via" not in m.group(2)]
    assert len(list(VIA.finditer(text))) == len(_pins(text))
    assert unexplained == []


def test_the_runtime_lock_is_current_and_complete() -> None:
    """requirements-runtime.lock (the images') is what scripts/runtime_lock.py makes of
    requirements.lock now, and holds everything its pins need, as the installed
    distributions' metadata says (markers evaluated here, no extras)."""
    import importlib.metadata

    from scripts.runtime_lock import RUNTIME_LOCK, runtime_lock

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lock = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    text = RUNTIME_LOCK.read_text(encoding="utf-8")
    assert text == runtime_lock(lock, project["dependencies"]), "run scripts/lock.sh"
    pins = _pins(text)
    assert pins.items() <= _pins(lock).items()
    for r in project["dependencies"]:
        assert canonicalize_name(Requirement(r).name) in pins, r
    for name in pins:
        for spec in importlib.metadata.requires(name) or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                assert canonicalize_name(req.name) in pins, f"{name} needs {req}"
