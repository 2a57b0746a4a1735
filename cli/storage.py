"""`spindle storage ...`: offline tools over a storage location (no server needed)."""

from __future__ import annotations

import typer

storage_app = typer.Typer(
    help="Inspect, validate and dump storage locations offline.", no_args_is_help=True
)
