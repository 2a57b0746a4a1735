"""Profiles: which server the CLI talks to and with which token.

The config file (`$SPINDLE_CONFIG`, default `~/.config/spindle/config.yaml`, mode 0600):

    current: local
    profiles:
      local: {url: http://127.0.0.1:8080, token: spd_...}

Resolution of the target, highest first: `SPINDLE_URL` / `SPINDLE_TOKEN` from the
environment, then the selected profile (`--profile`, else `SPINDLE_PROFILE`, else the file's
`current`), then the default URL and no token.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_PROFILE = "default"
ENV_CONFIG = "SPINDLE_CONFIG"
ENV_URL = "SPINDLE_URL"
ENV_TOKEN = "SPINDLE_TOKEN"
ENV_PROFILE = "SPINDLE_PROFILE"


class ConfigError(Exception):
    """The config file cannot be read, or names something that does not exist."""


@dataclass
class Profile:
    url: str = DEFAULT_URL
    token: str | None = None


@dataclass
class Config:
    path: Path
    current: str | None = None
    profiles: dict[str, Profile] = field(default_factory=dict)

    def save(self) -> None:
        """Write atomically; the file (it holds tokens) is readable by its owner only."""
        doc: dict[str, Any] = {
            "current": self.current,
            "profiles": {
                name: {k: v for k, v in (("url", p.url), ("token", p.token)) if v is not None}
                for name, p in sorted(self.profiles.items())
            },
        }
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".config-", suffix=".tmp")
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                yaml.safe_dump(doc, f, sort_keys=False)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


@dataclass(frozen=True)
class Target:
    """Where requests go, and where each value came from (for `profile ls`/error hints)."""

    url: str
    token: str | None
    profile: str | None
    url_from: str
    token_from: str


def config_path() -> Path:
    env = os.environ.get(ENV_CONFIG)
    return Path(env).expanduser() if env else Path.home() / ".config" / "spindle" / "config.yaml"


def load(path: Path | None = None) -> Config:
    path = path or config_path()
    if not path.exists():
        return Config(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read the config file {path}: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("profiles", {}) or {}, dict):
        raise ConfigError(f"the config file {path} is not a mapping with `profiles`")
    profiles: dict[str, Profile] = {}
    for name, raw in (doc.get("profiles") or {}).items():
        if not isinstance(raw, dict):
            raise ConfigError(f"profile {name!r} in {path} is not a mapping")
        token = raw.get("token")
        profiles[str(name)] = Profile(
            url=str(raw.get("url") or DEFAULT_URL), token=None if token is None else str(token)
        )
    current = doc.get("current")
    return Config(path, None if current is None else str(current), profiles)


def resolve(selected: str | None, config: Config | None = None) -> Target:
    """The target for a command: `selected` is `--profile` (or `SPINDLE_PROFILE`)."""
    cfg = config or load()
    name = selected or os.environ.get(ENV_PROFILE) or cfg.current
    profile: Profile | None = None
    if name is not None:
        profile = cfg.profiles.get(name)
        if profile is None and (selected or os.environ.get(ENV_PROFILE)):
            known = ", ".join(sorted(cfg.profiles)) or "none"
            raise ConfigError(f"no profile {name!r} in {cfg.path} (known: {known})")
    env_url, env_token = os.environ.get(ENV_URL), os.environ.get(ENV_TOKEN)
    where = f"profile {name}" if profile is not None else "default"
    url = env_url or (profile.url if profile else DEFAULT_URL)
    token = env_token or (profile.token if profile else None)
    return Target(
        url=url.rstrip("/"),
        token=token or None,
        profile=name if profile is not None else None,
        url_from=ENV_URL if env_url else where,
        token_from=ENV_TOKEN if env_token else (where if token else "none"),
    )


def mask(token: str | None) -> str:
    """A token as it may be shown: its first characters only."""
    if not token:
        return "(none)"
    if len(token) <= 12:
        return "****"
    return token[:8] + "…"
