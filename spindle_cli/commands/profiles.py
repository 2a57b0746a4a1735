"""`spindle profile ...`: named servers and tokens in the config file (cli.config)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from .. import config, output
from ..output import JsonOpt
from ..session import EXIT_USAGE, target, usage

profile_app = typer.Typer(
    help="Manage profiles: a server URL and a token each.", no_args_is_help=True
)

NameArg = Annotated[str, typer.Argument(metavar="NAME", help="Profile name.", show_default=False)]


def _load() -> config.Config:
    try:
        return config.load()
    except config.ConfigError as e:
        output.error(str(e))
        raise typer.Exit(EXIT_USAGE) from None


@profile_app.command("set")
def set_profile(
    name: NameArg,
    url: Annotated[str | None, typer.Option(help="Server URL, e.g. http://host:8080.")] = None,
    token: Annotated[str | None, typer.Option(help="API token (spd_...).")] = None,
    token_stdin: Annotated[
        bool, typer.Option("--token-stdin", help="Read the token from stdin.")
    ] = False,
    use: Annotated[bool, typer.Option("--use", help="Also make it the current profile.")] = False,
) -> None:
    """Create or update a profile (unset options keep their values). The first profile
    becomes the current one."""
    if token_stdin:
        if token is not None:
            raise usage("give either --token or --token-stdin")
        token = sys.stdin.readline().strip()
    if url is not None and not url.startswith(("http://", "https://")):
        raise usage(f"--url must start with http:// or https://, got {url!r}")
    cfg = _load()
    prof = cfg.profiles.get(name, config.Profile())
    if url is not None:
        prof.url = url.rstrip("/")
    if token is not None:
        prof.token = token or None
    cfg.profiles[name] = prof
    if use or cfg.current is None or cfg.current not in cfg.profiles:
        cfg.current = name
    cfg.save()
    mark = " (current)" if cfg.current == name else ""
    output.say(f"profile {name}{mark}: {prof.url}, token {config.mask(prof.token)}")


@profile_app.command("ls")
def list_profiles(json_output: JsonOpt = False) -> None:
    """The profiles in the config file (tokens shortened)."""
    cfg = _load()
    profiles = sorted(cfg.profiles.items())
    if json_output:
        rows = [
            {"name": n, "url": p.url, "token": config.mask(p.token), "current": n == cfg.current}
            for n, p in profiles
        ]
        output.emit_json({"config": str(cfg.path), "current": cfg.current, "profiles": rows})
        return
    if not profiles:
        output.say(f"no profiles in {cfg.path}; add one with `spindle profile set NAME --url U`")
        return
    output.table(
        ["", "name", "url", "token"],
        [["*" if n == cfg.current else "", n, p.url, config.mask(p.token)] for n, p in profiles],
    )


@profile_app.command("use")
def use_profile(name: NameArg) -> None:
    """Make a profile the current one."""
    cfg = _load()
    if name not in cfg.profiles:
        raise usage(f"no profile {name!r} in {cfg.path}")
    cfg.current = name
    cfg.save()
    output.say(f"current profile: {name}")


@profile_app.command("rm")
def remove_profile(name: NameArg) -> None:
    """Delete a profile."""
    cfg = _load()
    if cfg.profiles.pop(name, None) is None:
        raise usage(f"no profile {name!r} in {cfg.path}")
    if cfg.current == name:
        cfg.current = None
    cfg.save()
    output.say(f"removed profile {name}")


@profile_app.command("show")
def show_target(json_output: JsonOpt = False) -> None:
    """Where commands go now, and where each value comes from (env, profile, default)."""
    t = target()
    doc = {
        "profile": t.profile,
        "url": t.url,
        "url_from": t.url_from,
        "token": config.mask(t.token),
        "token_from": t.token_from,
        "config": str(config.config_path()),
    }
    if json_output:
        output.emit_json(doc)
        return
    output.fields(
        [
            ("profile", output.dash(t.profile)),
            ("url", f"{t.url} (from {t.url_from})"),
            ("token", f"{config.mask(t.token)} (from {t.token_from})"),
            ("config", str(config.config_path())),
        ]
    )
