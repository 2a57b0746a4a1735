"""The driver's command line as the Celery jobs start it: the runtime's
(`workers.runtime.driver`), whose runs under the control plane (`--run-id`) reach it over its
REST API when SPINDLE_API_URL and the run's token are set (`control_rest`), else over its
database (`control_db`). The runtime does not import `backend`, so the choice of the
database lives here, on the jobs' side.

    python -m workers.jobs.driver run SPEC --storage DIR --run-id N [...]
    python -m workers.jobs.driver spare
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # As `workers.runtime.driver` does, before the imports below: NumPy reads its
    # CPU-kernel choice when imported, and the JVM starts while the modules load.
    from workers.runtime import cpu_dispatch

    cpu_dispatch.choose()
    if sys.argv[1:2] in (["run"], ["spare"]):
        from workers.runtime import driver_jvm as _early

        _early.launch(*_early.driver_options(None, None))

import os

import typer

from workers.runtime import driver as runtime_driver
from workers.runtime.control_plane import ControlPlane

PROG = "python -m workers.jobs.driver"


def control_plane(run_id: int) -> ControlPlane:
    """The REST API's plane when the environment names it, else the database's (each
    imported only when used: HTTP, or the control plane's models and settings)."""
    from workers.runtime.control_rest import API_URL_ENV, RUN_TOKEN_ENV

    if os.environ.get(API_URL_ENV) and os.environ.get(RUN_TOKEN_ENV):
        return runtime_driver.rest_control_plane(run_id)
    from . import control_db

    typer.echo(f"run {run_id}: control plane over its database")
    return control_db.from_env(run_id)


def preload() -> None:
    """What a spare imports before its takeover, so that the run it becomes does not wait
    for it: the plane `control_plane` will pick (the worker's environment says which)."""
    from workers.runtime.control_rest import API_URL_ENV

    runtime_driver.preload_rest_control_plane()
    if not os.environ.get(API_URL_ENV):
        from . import control_db  # noqa: F401


def main() -> None:
    runtime_driver.main(control_plane=control_plane, preload=preload, prog_name=PROG)


if __name__ == "__main__":
    main()
