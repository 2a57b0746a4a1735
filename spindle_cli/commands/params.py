"""Command-line parameters shared by several command groups."""

from __future__ import annotations

from typing import Annotated

import typer

PipelineArg = Annotated[
    str, typer.Argument(metavar="NAME", help="Pipeline name.", show_default=False)
]
CheckpointArg = Annotated[
    str, typer.Argument(metavar="UUID", help="Checkpoint uuid.", show_default=False)
]
