"""`python -m backend serve`: the whole platform in one command (DESIGN.md §7): migrates the
database, makes sure an admin token exists, starts a Celery worker with beat, and serves
the API; Ctrl-C or SIGTERM stops all of it, asking running pipelines to checkpoint first.
`python -m backend migrate` only upgrades the database (deployments run it once per
release).

The composition root: the one module of `backend` that imports `workers` (the API's task
queue is Celery's, `create_app_from_env`; the worker it starts), and where pipeline drivers
are told the API's URL (SPINDLE_API_URL), so they reach the control plane over HTTP."""

from __future__ import annotations

import functools
import gc
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
import uvicorn
from fastapi import FastAPI
from uvicorn.supervisors import Multiprocess

from .api import ui
from .child_processes import die_with_parent
from .settings import Settings

cli = typer.Typer(help="Spindle's control plane.", no_args_is_help=True, add_completion=False)

WORKER_STOP_S = 60.0
WORKER_GROUP_STOP_S = 5.0  # for the worker's children, once it has exited


def _settings(data_dir: Path | None) -> Settings:
    if data_dir is not None:
        os.environ["SPINDLE_DATA_DIR"] = str(data_dir.resolve())
    s = Settings()
    s.data_path.mkdir(parents=True, exist_ok=True)
    os.environ["SPINDLE_DATA_DIR"] = str(s.data_path)
    return s


@cli.command()
def migrate(
    data_dir: Annotated[Path | None, typer.Option(help="default: SPINDLE_DATA_DIR")] = None,
) -> None:
    """Upgrade the database to the newest schema."""
    from .migrate import upgrade

    upgrade(_settings(data_dir).db_url)
    typer.echo("database is up to date")


def worker_command(settings: Settings, concurrency: int = 32) -> list[str]:
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers.jobs.celery_app",
        "worker",
        "--beat",
        "--schedule",
        str(settings.data_path / "celerybeat-schedule"),
        "--pool",
        "threads",
        "--concurrency",
        str(concurrency),
        "--loglevel",
        "INFO",
        "--hostname",
        f"spindle@{os.uname().nodename}-{os.getpid()}",
    ]


def create_app_from_env() -> FastAPI:
    """The app with every component built from `Settings()` (the environment): the factory
    each API process imports when `serve` runs several of them, and the one to give
    `uvicorn --factory backend.__main__:create_app_from_env` in a deployment."""
    from workers.jobs.celery_app import make_celery
    from workers.jobs.tasks import CeleryQueue

    from .api.app import create_app
    from .db import Database

    settings = Settings()
    app = create_app(settings, Database(settings.db_url), CeleryQueue(make_celery(settings)))
    # The loaded libraries' objects live as long as the process: moved out of the
    # collector's reach, a full collection no longer walks them all, a pause every request
    # in flight would otherwise wait out (the API's latency tail).
    gc.collect()
    gc.freeze()
    return app


def _api_url(host: str, port: int) -> str:
    """Where the drivers this `serve` starts reach its API: itself, on the loopback when it
    listens on every address."""
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _exit_on_signal(signum: int, _: object) -> None:
    raise SystemExit(0)  # a requested stop is a clean one


def _serve_api(settings: Settings, host: str, port: int) -> None:
    """Serve the API until SIGTERM/SIGINT. Every API process builds its app from the
    environment (`create_app_from_env`); with several, uvicorn's supervisor runs them on
    one shared listening socket, stops them on a signal and returns."""
    config = uvicorn.Config(
        "backend.__main__:create_app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=settings.api_workers,
        log_level="warning",
    )
    if settings.api_workers == 1:
        uvicorn.Server(config).run()
    else:
        Multiprocess(config, sockets=[config.bind_socket()]).run()


@cli.command()
def serve(
    data_dir: Annotated[
        Path | None, typer.Option(help="default: SPINDLE_DATA_DIR or ./.spindle-data")
    ] = None,
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8080,
    worker: Annotated[bool, typer.Option(help="also run a Celery worker with beat")] = True,
    api_workers: Annotated[
        int | None, typer.Option(min=1, max=64, help="API processes; default SPINDLE_API_WORKERS")
    ] = None,
    show_token: Annotated[
        bool | None,
        typer.Option(
            help="print a newly created admin token; default: only to an interactive "
            "terminal (a service manager's captured output would keep it)"
        ),
    ] = None,
) -> None:
    """Run the API, a worker and beat until Ctrl-C."""
    from .db import Database
    from .migrate import upgrade
    from .services import tokens

    settings = _settings(data_dir)
    if api_workers is not None:
        os.environ["SPINDLE_API_WORKERS"] = str(api_workers)
    # Unless the deployment says where drivers reach the API, they reach this one.
    os.environ.setdefault("SPINDLE_API_URL", _api_url(host, port))
    settings = Settings()
    upgrade(settings.db_url)
    db = Database(settings.db_url)
    configured = settings.admin_token.get_secret_value() if settings.admin_token else None
    with db.session() as s:
        new = tokens.bootstrap_admin(s, settings.data_path, configured)
    db.dispose()
    token_file = settings.data_path / "admin-token"
    proc = None
    if worker:
        from workers.jobs.celery_app import declare_queues, make_celery

        declare_queues(make_celery(settings))
        logs = settings.data_path / "logs"
        logs.mkdir(exist_ok=True)
        with open(logs / "worker.log", "ab") as out:
            # Its own process group, so that stopping it ends every process it forked
            # (pipeline drivers have sessions of their own and stop through the worker).
            # A serve that is killed outright gives it a warm shutdown all the same.
            proc = subprocess.Popen(
                worker_command(settings),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(os.environ),
                start_new_session=True,
                preexec_fn=functools.partial(die_with_parent, signal.SIGTERM),
            )
    typer.echo(
        f"Spindle is serving on http://{host}:{port}  (API: http://{host}:{port}/api/v1/docs)"
    )
    if not ui.is_built():  # /ui/ says so too; a wheel built before `make ui` has none
        typer.echo(f"note: {ui.NOT_BUILT}")
    if new and (sys.stdout.isatty() if show_token is None else show_token):
        typer.echo(f"admin token (shown once; also in {token_file}): {new}")
    elif new:
        typer.echo(f"admin token: created, in {token_file} (mode 0600; --show-token prints it)")
    elif configured:
        typer.echo("admin token: the one in SPINDLE_ADMIN_TOKEN")
    else:
        typer.echo(f"admin token: in {token_file}")
    typer.echo(
        f"data: {settings.data_path}   worker log: {settings.data_path / 'logs' / 'worker.log'}"
    )
    # uvicorn stops on SIGTERM, then restores the previous handler and raises the signal
    # again: with this one, that becomes SystemExit, and the worker is stopped below.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        _serve_api(settings, host, port)
    finally:
        if proc is not None:
            typer.echo("stopping the worker (running pipelines checkpoint first)...")
            _stop_worker(proc)
        typer.echo("stopped")


def _stop_worker(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the worker (a warm shutdown: running pipelines checkpoint first), SIGKILL it
    after WORKER_STOP_S; then end what is left of its process group. Celery's embedded beat
    is a child process, and one forked just as the worker began shutting down is never told
    to stop (seen: an orphaned beat scheduling tasks for good)."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(WORKER_STOP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if _signal_group(proc.pid, signal.SIGTERM):
        deadline = time.monotonic() + WORKER_GROUP_STOP_S
        while time.monotonic() < deadline and _signal_group(proc.pid, 0):
            time.sleep(0.1)
        _signal_group(proc.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to process group `pgid` (0: none, only look); False if it has no process
    left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


if __name__ == "__main__":
    cli()
