"""A pipeline's driver process: the command line of the Spark runtime.

    python -m workers.runtime.driver run SPEC --storage DIR [--from-checkpoint latest|none|UUID]
                                              [--max-steps N] [--stop-when-idle SECONDS]
    python -m workers.runtime.driver spare

`run` opens the storage location, restores the pipeline (`run_builder.open_runner`) and runs
it (`runner.Runner`) until it is stopped or a limit is reached, and ends with one of
`pipeline_spec.exits`' codes; under the control plane (`--run-id`) its `control.JobControl`
reports steps and run states through the control plane it is given
(`main(control_plane=...)`). Run as this module, that is the
REST API's (`control_rest`, with SPINDLE_API_URL and the run's token): the runtime does not
import the Celery jobs, so the database's plane is chosen by their entry point,
`python -m workers.jobs.driver`, which calls `main` with it. `spare` starts Spark and waits
to become some pipeline's `run` (`spare.py`).
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # The process's tuning first: NumPy reads its CPU-kernel choice when it is imported, and
    # the JVM started below passes this environment on to Spark's Python workers.
    from workers.runtime import cpu_dispatch

    cpu_dispatch.choose()
    if sys.argv[1:2] in (["run"], ["spare"]):
        # A driver: its JVM starts while the modules below load (`driver_jvm`).
        from workers.runtime import driver_jvm as _early

        _early.launch(*_early.driver_options(None, None))

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import tenacity
import typer
from pyspark.sql import SparkSession

from pipeline_spec import model as S
from pipeline_spec.exits import (
    EXIT_FENCED,
    EXIT_INTERRUPTED,
    EXIT_SPEC,
    EXIT_STATE,
    EXIT_STOPPED,
    FENCED_HEADING,
    STATE_ERROR_HEADING,
)
from pipeline_spec.spark_conf import SparkConfError
from storage_engine.errors import CorruptionError, LockedError
from storage_engine.objstore import open_object_store
from storage_engine.remote import FencedError

from .control_plane import ControlPlane
from .restore import StateError
from .run_builder import open_runner
from .runner import TAKEOVER_LOCK_WAIT_S, Runner
from .session import Timeline, process_start_time
from .udfs import UDF_ERROR_HEADING, udf_failure

app = typer.Typer(help="Run a Spindle pipeline on Spark.", no_args_is_help=True)


@app.callback()
def _commands() -> None:
    """Subcommands: run, spare."""


# How a run under the control plane (`--run-id`) gets its plane, and what a spare imports
# ahead of its takeover so that the run does not wait for it: set by `main`.
PlaneFactory = Callable[[int], ControlPlane]


def rest_control_plane(run_id: int) -> ControlPlane:
    """The control plane over its REST API, named by the environment with the run's token."""
    from . import control_rest

    plane = control_rest.from_env(run_id)
    if plane is None:
        typer.echo(
            f"run {run_id}: no control plane: set {control_rest.API_URL_ENV} and "
            f"{control_rest.RUN_TOKEN_ENV}, or start it with python -m workers.jobs.driver",
            err=True,
        )
        raise typer.Exit(EXIT_SPEC)
    typer.echo(f"run {run_id}: control plane over its REST API, {plane.client.base_url}")
    return plane


def preload_rest_control_plane() -> None:
    from . import control, control_rest  # noqa: F401


_PLANE: PlaneFactory = rest_control_plane
_PRELOAD: Callable[[], None] = preload_rest_control_plane

# A spare's Spark session and when its takeover arrived, for the `run` it turns into.
_SPARE: tuple[SparkSession, float] | None = None


@app.command("spare")
def spare_cmd() -> None:
    """A spare driver: start Spark and warm up on a built-in pipeline, then wait for one line
    on standard input, {"argv": [...]}, the arguments of a `run`, and become that run on the
    Spark already started; exit 0 if the input ends first (workers/runtime/spare.py)."""
    global _SPARE
    from .spare import stand_by_spare

    spark, takeover = stand_by_spare(_PRELOAD)
    if takeover is None:
        spark.stop()
        return  # not needed
    _SPARE = (spark, takeover.at)
    os.environ.update(takeover.env)
    app(["run", *takeover.argv], prog_name=_PROG)


@app.command("run")
def run_cmd(
    spec_file: Annotated[Path, typer.Argument(help="Pipeline spec (YAML or JSON).")],
    storage: Annotated[str, typer.Option(help="The pipeline's storage location.")],
    from_checkpoint: Annotated[str, typer.Option(help="latest, none, or a uuid.")] = "latest",
    drop_state: Annotated[
        list[str] | None,
        typer.Option(
            help="An operator whose state no longer fits the changed query starts empty "
            "(repeat for several; `*`: all that do not fit). Others keep their state."
        ),
    ] = None,
    max_steps: Annotated[int | None, typer.Option(help="Stop after N steps.")] = None,
    stop_when_idle: Annotated[
        float | None, typer.Option(help="Stop after S seconds without a step.")
    ] = None,
    base_dir: Annotated[str, typer.Option(help="Relative sink paths start here.")] = ".",
    hang_timeout: Annotated[
        float,
        typer.Option(
            help="End the run (exit 7, restarted like a crash) when it takes no step for "
            "this many seconds while input waits; 0: never."
        ),
    ] = 600.0,
    files_root: Annotated[
        list[str] | None,
        typer.Option(
            help="Files sources and sinks must resolve inside these directories (repeat the "
            "option for several); checked as the run opens them."
        ),
    ] = None,
    object_root: Annotated[
        list[str] | None,
        typer.Option(
            help="Object-store paths (s3://...) of delta sinks must lie under these "
            "(repeat the option for several); checked as the run opens them."
        ),
    ] = None,
    final_checkpoint: Annotated[bool, typer.Option(help="Checkpoint when stopping.")] = True,
    run_id: Annotated[
        int | None,
        typer.Option(
            help="Run under the control plane as this run: over its REST API with "
            "SPINDLE_API_URL and SPINDLE_RUN_TOKEN, else (python -m workers.jobs.driver "
            "only) over its database (SPINDLE_*)."
        ),
    ] = None,
    control_poll_s: Annotated[
        float, typer.Option(min=0.01, help="Under the control plane: how often to poll it.")
    ] = 0.2,
    heartbeat_s: Annotated[
        float, typer.Option(min=0.01, help="Under the control plane: how often to heartbeat.")
    ] = 1.0,
    remote: Annotated[
        str | None,
        typer.Option(help="Mirror checkpoints to this object store: file:///dir or s3://b/p."),
    ] = None,
) -> None:
    timeline = Timeline(process_start_time())
    timeline.mark("imports")
    started: list[Runner] = []

    def _term(*_: object) -> None:
        # SIGTERM (the worker shutting down): finish the step, checkpoint, exit.
        if not started:
            raise SystemExit(EXIT_INTERRUPTED)
        started[0].request_exit(EXIT_INTERRUPTED)

    signal.signal(signal.SIGTERM, _term)
    control = None
    try:
        spec = S.load_spec(spec_file)
        spark = None
        if _SPARE is not None:
            spark, at = _SPARE
            timeline = Timeline(at, spare=True)
        if run_id is not None:
            from .control import JobControl

            control = JobControl(_PLANE(run_id), control_poll_s, heartbeat_s)
        # A spare may be told to take over while the driver it replaces is still exiting:
        # the location's lock is then released within moments.
        opening = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(LockedError),
            stop=tenacity.stop_after_delay(TAKEOVER_LOCK_WAIT_S if spark is not None else 0),
            wait=tenacity.wait_fixed(0.05),
            reraise=True,
        )
        runner = opening(
            open_runner,
            spec,
            storage,
            from_checkpoint=from_checkpoint,
            drop_state=drop_state or (),
            base_dir=base_dir,
            files_roots=files_root,
            object_roots=object_root,
            spark=spark,
            own_retention=control is None,
            metrics_sinks=[control.metrics_sink] if control else None,
            remote=open_object_store(remote) if remote else None,
            timeline=timeline,
        )
    except (S.SpecError, SparkConfError) as e:
        # A bad SPINDLE_SPARK_CONF (set by hand: the control plane validates its own) fails
        # every restart alike.
        typer.echo(str(e), err=True)
        raise typer.Exit(EXIT_SPEC) from None
    except StateError as e:
        typer.echo(f"{STATE_ERROR_HEADING} {e}", err=True)
        raise typer.Exit(EXIT_STATE) from None
    started.append(runner)
    try:
        if control is not None:
            control.opened(runner)
        try:
            res = runner.run(max_steps, stop_when_idle, hang_timeout or None)
        except CorruptionError as e:
            # Read from a checkpoint's file during a step: restoring it again would too.
            typer.echo(f"{STATE_ERROR_HEADING} {e}", err=True)
            raise typer.Exit(EXIT_STATE) from None
        except FencedError as e:
            typer.echo(f"{FENCED_HEADING} {e}", err=True)
            raise typer.Exit(EXIT_FENCED) from None
        except Exception as e:
            failed = udf_failure(e)
            if failed is None:
                raise
            # The function's traceback, then the one line the run's reason shows; a crash,
            # restarted as any other (pipelines.md: restarts) until the pipeline fails.
            typer.echo(failed[1].rstrip(), err=True)
            typer.echo(f"{UDF_ERROR_HEADING} {failed[0]}", err=True)
            raise typer.Exit(1) from None
        code = runner.exit_code or EXIT_STOPPED
        # A checkpoint on the way out, unless a stop said not to or a restore discards it.
        commit = final_checkpoint if control is None else code == EXIT_INTERRUPTED
        # Not when the policy's checkpoint already covers the last step: a second one at the
        # same step would take a retention slot for nothing.
        if commit and runner.step > res.first_step and runner.checkpoints.steps_since:
            runner.checkpoints.commit(wait=True)
        typer.echo(json.dumps(res.__dict__ | {"last_step": runner.step}))
    finally:
        if control is not None:
            # The final mirror must see the last checkpoint's upload: a stopped pipeline's
            # rows are re-read from the manifest only, which does not say what is remote.
            runner.loc.wait_commits()
            if runner.loc.remote is not None:
                runner.loc.remote.wait_idle(runner.loc.settings.remote_close_timeout_s)
            control.close()
        runner.close()
        # Stop Spark while this process can still answer it: a JVM left to notice the
        # process's exit may still send it a query's last progress event, and print the
        # failure to deliver it.
        runner.spark.stop()
    if code:
        raise typer.Exit(code)


_PROG = "python -m workers.runtime.driver"


def main(
    control_plane: PlaneFactory | None = None,
    preload: Callable[[], None] | None = None,
    prog_name: str | None = None,
) -> None:
    """The command line, runs under the control plane given `control_plane` (by default
    over the REST API), a spare preloading with `preload` what that plane imports."""
    global _PLANE, _PRELOAD, _PROG
    _PLANE = control_plane or rest_control_plane
    _PRELOAD = preload or preload_rest_control_plane
    _PROG = prog_name or _PROG
    app(prog_name=_PROG)


if __name__ == "__main__":
    main()
