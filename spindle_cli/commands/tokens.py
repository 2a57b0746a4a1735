"""`spindle tokens create|ls|revoke`: API tokens (admin only on the server)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from .. import config, output
from ..output import JsonOpt
from ..session import EXIT_USAGE, connect, target

tokens_app = typer.Typer(help="Create, list and revoke API tokens (admin).", no_args_is_help=True)


class Role(StrEnum):
    viewer = "viewer"
    operator = "operator"
    admin = "admin"


@tokens_app.command("create")
def create(
    name: Annotated[str, typer.Option("--name", help="What the token is for.", show_default=False)],
    role: Annotated[Role, typer.Option("--role", help="What it may do.", show_default=False)],
    save_as: Annotated[
        str | None,
        typer.Option(
            "--save-as",
            help="Store the secret in this profile (with the current URL) instead of printing it.",
        ),
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Create a token. The secret is shown once (or only saved, with --save-as)."""
    t = target()
    with connect() as api:
        tok = api.create_token(name, role.value)
    secret = str(tok["token"])
    if save_as is not None:
        try:
            cfg = config.load()
        except config.ConfigError as e:
            output.error(f"the token {tok['id']} was created but not saved: {e}")
            raise typer.Exit(EXIT_USAGE) from None
        cfg.profiles[save_as] = config.Profile(url=t.url, token=secret)
        cfg.current = cfg.current if cfg.current in cfg.profiles else save_as
        cfg.save()
        tok["token"] = config.mask(secret)
    if json_output:
        output.emit_json(tok)
        return
    output.say(f"created token {tok['id']} ({tok['name']}, {tok['role']})")
    if save_as is not None:
        output.say(f"saved in profile {save_as}: {t.url}, token {config.mask(secret)}")
    else:
        output.say(f"token: {secret}")
        output.note("the secret is shown only now; store it safely")


@tokens_app.command("ls")
def list_tokens(json_output: JsonOpt = False) -> None:
    """Every token: id, name, role, prefix, created, last used (never the secret)."""
    with connect() as api:
        toks = api.list_tokens()
    if json_output:
        output.emit_json(toks)
        return
    output.table(
        ["id", "name", "role", "prefix", "created (UTC)", "last used (UTC)"],
        [
            [
                str(x["id"]),
                str(x["name"]),
                str(x["role"]),
                str(x.get("prefix")),
                output.when(x.get("created_at")),
                output.when(x.get("last_used_at")),
            ]
            for x in toks
        ],
    )


@tokens_app.command("revoke")
def revoke(
    token_id: Annotated[
        int,
        typer.Argument(min=1, metavar="ID", help="Token id (see `tokens ls`).", show_default=False),
    ],
) -> None:
    """Revoke a token: requests with it fail from now on."""
    with connect() as api:
        api.revoke_token(token_id)
    output.say(f"revoked token {token_id}")
