"""`spindle pipelines ...`: register, list, read, replace, delete and validate pipelines."""

from __future__ import annotations

from typing import Annotated, Any

import typer
import yaml

from .. import output, specfile
from ..client import Json
from ..output import JsonOpt
from ..session import connect, usage
from .params import PipelineArg

pipelines_app = typer.Typer(
    help="Register, list, read, replace and delete pipelines.", no_args_is_help=True
)

SpecOpt = Annotated[
    str,
    typer.Option(
        "--file", "-f", help="Spec file, YAML or JSON; `-` reads stdin.", show_default=False
    ),
]
DescOpt = Annotated[str | None, typer.Option(help="A description of the pipeline.")]


def _read(source: str) -> specfile.SpecFile:
    try:
        return specfile.read(source)
    except specfile.SpecFileError as e:
        raise usage(str(e)) from None


def state_of(p: Json) -> str:
    state, desired = str(p.get("state")), str(p.get("desired_state"))
    return state if desired in (state, "None") else f"{state} (wants {desired})"


def show(p: Json) -> None:
    run: dict[str, Any] = p.get("current_run") or {}
    run_text = (
        f"#{run['number']} {run['state']}, started {output.when(run.get('started_at'))}, "
        f"{run.get('restart_count', 0)} restart(s)"
        if run
        else "-"
    )
    output.fields(
        [
            ("name", str(p["name"])),
            ("state", state_of(p)),
            ("run", run_text),
            ("last step", output.dash(p.get("last_step"))),
            ("checkpoints", output.dash(p.get("checkpoints"))),
            ("restore point", output.dash(p.get("restore_point"))),
            ("error", output.dash(p.get("error"))),
            ("durability", output.dash(p.get("durability_error"))),
            ("forked from", _lineage(p.get("forked_from"))),
            ("description", output.dash(p.get("description"))),
            ("created", output.when(p.get("created_at"))),
            ("updated", output.when(p.get("updated_at"))),
        ]
    )


def _lineage(origin: Json | None) -> str:
    if not origin:
        return "-"
    return (
        f"{origin['pipeline']} at checkpoint {origin['checkpoint']} (step {origin['step']}), "
        f"{output.when(origin.get('forked_at'))}"
    )


@pipelines_app.command("create")
def create(spec_file: SpecOpt, description: DescOpt = None, json_output: JsonOpt = False) -> None:
    """Register a pipeline; its name is the spec's `name`."""
    f = _read(spec_file)
    with connect(locate=f.position) as api:
        p = api.create_pipeline(
            f.spec, description if description is not None else f.description or ""
        )
    if json_output:
        output.emit_json(p)
    else:
        output.say(f"created pipeline {p['name']} ({p['state']})")


@pipelines_app.command("fork")
def fork(
    name: PipelineArg,
    new: Annotated[str, typer.Option("--name", help="The new pipeline's name.")],
    checkpoint: Annotated[
        str,
        typer.Option(
            "--checkpoint", "-c", help="The origin's checkpoint: uuid, identifier, step or latest."
        ),
    ],
    spec_file: Annotated[
        str | None,
        typer.Option(
            "--spec",
            "-f",
            help="The fork's spec, YAML or JSON (`-`: stdin); default the origin's. "
            "Operators it changes start empty.",
        ),
    ] = None,
    start: Annotated[bool, typer.Option("--start", help="Start the fork at once.")] = False,
    description: DescOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """A new pipeline from a retained checkpoint of NAME, sharing its state (nothing is
    copied); its sinks must write elsewhere than the origin's."""
    f = _read(spec_file) if spec_file is not None else None
    with connect(locate=f.position if f is not None else None) as api:
        desc = description if description is not None else (f.description if f else None)
        p = api.fork_pipeline(name, new, checkpoint, f.spec if f else None, start, desc or "")
    if json_output:
        output.emit_json(p)
        return
    origin = p["forked_from"]
    output.say(
        f"forked {p['name']} from {origin['pipeline']} at step {origin['step']} "
        f"(checkpoint {origin['checkpoint']}), {p['state']}"
    )


@pipelines_app.command("ls")
def list_pipelines(json_output: JsonOpt = False) -> None:
    """Every pipeline with its state, run and progress."""
    with connect() as api:
        ps = api.list_pipelines()
    if json_output:
        output.emit_json(ps)
        return
    if not ps:
        output.say("no pipelines")
        return
    output.table(
        ["name", "state", "run", "last step", "checkpoints", "updated"],
        [
            [
                str(p["name"]),
                state_of(p),
                f"#{p['current_run']['number']}" if p.get("current_run") else "-",
                output.dash(p.get("last_step")),
                output.dash(p.get("checkpoints")),
                output.when(p.get("updated_at")),
            ]
            for p in ps
        ],
    )


@pipelines_app.command("get")
def get(
    name: PipelineArg,
    spec_only: Annotated[
        bool, typer.Option("--spec", help="Print only the spec, as YAML (for `edit -f`).")
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """A pipeline's state, current run and spec."""
    with connect() as api:
        p = api.get_pipeline(name)
    if json_output:
        output.emit_json(p["spec"] if spec_only else p)
        return
    text = yaml.safe_dump(p["spec"], sort_keys=False).rstrip()
    if spec_only:
        output.say(text)
        return
    show(p)
    output.say("spec:")
    output.say("\n".join("  " + line for line in text.splitlines()))


@pipelines_app.command("edit")
def edit(
    name: PipelineArg, spec_file: SpecOpt, description: DescOpt = None, json_output: JsonOpt = False
) -> None:
    """Replace a stopped pipeline's spec (the name cannot change). The description is kept
    unless given."""
    f = _read(spec_file)
    with connect(locate=f.position) as api:
        desc = description if description is not None else f.description
        if desc is None:
            desc = str(api.get_pipeline(name).get("description") or "")
        p = api.replace_pipeline(name, f.spec, desc)
    if json_output:
        output.emit_json(p)
    else:
        output.say(f"replaced the spec of {p['name']}")


@pipelines_app.command("rm")
def remove(name: PipelineArg) -> None:
    """Delete a stopped pipeline with its checkpoints and storage (admin)."""
    with connect() as api:
        api.delete_pipeline(name)
    output.say(f"deleted pipeline {name}")


@pipelines_app.command("validate")
def validate(spec_file: SpecOpt, json_output: JsonOpt = False) -> None:
    """Check a spec without registering it; each error names the offending field."""
    f = _read(spec_file)
    with connect(locate=f.position) as api:
        res = api.validate_spec(f.spec)
    if json_output:
        output.emit_json(res)
    else:
        output.say(f"valid: pipeline {res['name']}")
