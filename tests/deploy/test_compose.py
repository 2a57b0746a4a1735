"""The deployment files agree with the code and with each other (see tests/deploy/checks.py).

Docker does not run on the test machines: these tests read docker-compose.yml, .env.example,
the Dockerfiles, nginx.conf and the systemd units, check them against the settings classes
and command-line interfaces they configure, and show on broken copies that each check
catches what it is for.
"""

from __future__ import annotations

import copy
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from backend.api import ui

from . import checks
from .checks import ROOT

COMPOSE_PATH = ROOT / "docker-compose.yml"
ENV_EXAMPLE = (ROOT / ".env.example").read_text()
NGINX = (ROOT / "deploy" / "nginx.conf").read_text()
UNITS = sorted((ROOT / "deploy" / "systemd").glob("*.service"))
SYSTEMD_ENV = (ROOT / "deploy" / "systemd" / "spindle.env.example").read_text()
SPINDLE_SERVICES = ("migrate", "api", "worker", "beat")


@pytest.fixture
def compose() -> dict[str, Any]:
    return checks.load_compose(COMPOSE_PATH)


def env_of(compose: dict[str, Any], service: str) -> dict[str, str]:
    """A service's environment as the container gets it with .env = .env.example."""
    example = checks.example_env(ENV_EXAMPLE)
    raw = checks.environment_of(checks.services(compose)[service])
    return {k: checks.interpolate(v, example) for k, v in raw.items()}


def command_of(compose: dict[str, Any], service: str) -> list[str]:
    cmd = checks.services(compose)[service]["command"]
    return shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]


# -- environment variables ----------------------------------------------------------------


def test_every_spindle_variable_is_a_setting(compose: dict[str, Any]) -> None:
    assert checks.check_spindle_vars(compose, ENV_EXAMPLE) == []
    assert checks.check_spindle_vars({"services": {}}, SYSTEMD_ENV) == []


def test_an_unknown_spindle_variable_is_reported(compose: dict[str, Any]) -> None:
    broken = copy.deepcopy(compose)
    broken["services"]["worker"]["environment"] = {
        **broken["services"]["worker"]["environment"],
        "SPINDLE_SPARK_MASTER_URL": "spark://x:7077",
    }
    broken["services"]["api"]["environment"] = ["SPINDLE_DATA_DIR=/d", "SPINDLE_DB_URL=x"]
    env = ENV_EXAMPLE + "\n# SPINDLE_S3_BUCKETS=x\n"
    problems = checks.check_spindle_vars(broken, env)
    assert problems == [
        ".env.example: SPINDLE_S3_BUCKETS is not a Spindle setting",
        "service api: SPINDLE_DB_URL is not a Spindle setting",
        "service worker: SPINDLE_SPARK_MASTER_URL is not a Spindle setting",
    ]
    broken["x-extra"] = "${SPINDLE_NOPE:-1}"
    assert "${SPINDLE_NOPE} is not a Spindle setting" in checks.check_spindle_vars(
        broken, ENV_EXAMPLE
    )


def test_known_names_follow_the_settings_classes() -> None:
    names = checks.settings_env_names()
    assert {"SPINDLE_DATABASE_URL", "SPINDLE_OBJECT_STORE_URL", "SPINDLE_SPARK_MASTER"} <= names
    assert {"SPINDLE_S3_ENDPOINT", "SPINDLE_S3_SECRET_KEY"} <= names
    assert "SPINDLE_S3_URL" not in names and "SPINDLE_ENDPOINT" not in names


@pytest.mark.parametrize(
    "text", [ENV_EXAMPLE, SYSTEMD_ENV], ids=[".env.example", "spindle.env.example"]
)
def test_example_values_parse(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each documented SPINDLE_* value (commented examples too) is accepted by its settings
    class: lists must be JSON, numbers numbers."""
    from pydantic import ValidationError

    from backend.settings import Settings
    from storage_engine.objstore import ObjectStoreSettings

    monkeypatch.setenv("SPINDLE_S3_ENDPOINT", "minio:9000")
    monkeypatch.setenv("SPINDLE_S3_BUCKET", "b")
    bad = []
    for name, (value, _) in checks.env_file_assignments(text).items():
        if not name.startswith("SPINDLE_") or value == "":
            continue
        with monkeypatch.context() as m:
            m.setenv(name, value)
            try:
                Settings()
                ObjectStoreSettings()  # from the environment
            except ValidationError as e:
                bad.append(f"{name}={value}: {e}")
    assert bad == []


def test_a_malformed_list_value_would_be_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic_settings import SettingsError

    from backend.settings import Settings

    monkeypatch.setenv("SPINDLE_CORS_ORIGINS", "https://a.example")  # not JSON
    with pytest.raises(SettingsError):
        Settings()


def test_every_substituted_variable_is_in_env_example(compose: dict[str, Any]) -> None:
    assert checks.check_env_example_lists_vars(compose, ENV_EXAMPLE) == []
    broken = copy.deepcopy(compose)
    broken["services"]["redis"]["command"] = ["redis-server", "--port", "${REDIS_PORT:-6379}"]
    broken["services"]["postgres"]["environment"]["POSTGRES_DB"] = "${PG_DB:?required}"
    env = ENV_EXAMPLE.replace("POSTGRES_PASSWORD=", "# POSTGRES_PASSWORD=")
    assert checks.check_env_example_lists_vars(broken, env) == [
        "${PG_DB} is used but not listed in .env.example",
        "${POSTGRES_PASSWORD} is required but commented out in .env.example",
        "${REDIS_PORT} is used but not listed in .env.example",
    ]


def test_interpolation_follows_compose_rules() -> None:
    env = {"SET": "v", "EMPTY": ""}
    assert checks.interpolate("${SET:-d} ${UNSET:-d} ${EMPTY:-d} ${EMPTY-d}", env) == "v d d "
    assert checks.interpolate("$$HOSTNAME $SET ${SET:+alt}", env) == "$HOSTNAME v alt"
    with pytest.raises(KeyError, match="UNSET"):
        checks.interpolate("${UNSET:?set it}", env)


# -- wiring between services ---------------------------------------------------------------


def test_spindle_services_share_one_wiring(compose: dict[str, Any]) -> None:
    """One wiring, which gives the workers' drivers their way to the API: they report over
    HTTP to the `api` service, on the port its command listens on."""
    envs = {s: env_of(compose, s) for s in SPINDLE_SERVICES}
    assert all(e == envs["api"] for e in envs.values()), envs
    api_url = envs["worker"]["SPINDLE_API_URL"]
    api = command_of(compose, "api")
    assert api_url == f"http://api:{api[api.index('--port') + 1]}"


def test_database_broker_and_store_point_at_the_services(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from backend.settings import Settings
    from storage_engine.objstore import ObjectStore, open_object_store

    svcs = checks.services(compose)
    env = env_of(compose, "api")
    pg = {
        k: checks.interpolate(v, checks.example_env(ENV_EXAMPLE))
        for k, v in checks.environment_of(svcs["postgres"]).items()
    }
    db = make_url(env["SPINDLE_DATABASE_URL"])
    assert db.drivername == "postgresql+psycopg"  # psycopg 3 is the installed driver
    assert (db.host, db.username, db.password, db.database) == (
        "postgres",
        pg["POSTGRES_USER"],
        pg["POSTGRES_PASSWORD"],
        pg["POSTGRES_DB"],
    )
    assert env["SPINDLE_BROKER_URL"].startswith("redis://redis:")

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    url = Settings().pipeline_store_url("clicks")
    assert url is not None and url.startswith("s3://")
    store = open_object_store(url)
    assert isinstance(store, ObjectStore)
    assert store.settings.endpoint.split(":")[0] in svcs  # minio:9000
    assert store.prefix == "pipelines/clicks" and not store.settings.secure

    # minio-init makes that bucket and that user.
    init = {
        k: checks.interpolate(v, checks.example_env(ENV_EXAMPLE))
        for k, v in checks.environment_of(svcs["minio-init"]).items()
    }
    assert init["S3_BUCKET"] == store.bucket
    assert init["S3_ACCESS_KEY"] == store.settings.access_key
    assert init["S3_SECRET_KEY"] == store.settings.secret_key.get_secret_value()
    for service in SPINDLE_SERVICES[1:3]:  # api, worker: need the bucket
        deps = svcs[service]["depends_on"]
        assert deps["minio-init"]["condition"] == "service_completed_successfully"


def test_api_and_workers_share_the_data_directory(compose: dict[str, Any]) -> None:
    """The API reads storage locations and appends ingested records to input logs that
    the workers' drivers read: one volume, at SPINDLE_DATA_DIR, for all of them."""
    svcs = checks.services(compose)
    data_dir = env_of(compose, "api")["SPINDLE_DATA_DIR"]
    for service in ("api", "worker", "spark-worker"):
        assert f"spindle-data:{data_dir}" in svcs[service]["volumes"], service


def test_spark_profile(compose: dict[str, Any]) -> None:
    svcs = checks.services(compose)
    assert svcs["spark-master"]["profiles"] == ["spark"]
    assert svcs["spark-worker"]["profiles"] == ["spark"]
    # Two workers: a partitioned pipeline's shards run on both (docs/deploy.md).
    assert svcs["spark-worker"]["deploy"]["replicas"] == 2
    master = command_of(compose, "spark-master")
    host = master[master.index("--host") + 1]
    port = master[master.index("--port") + 1]
    assert f"spark://{host}:{port}" in command_of(compose, "spark-worker")
    # .env.example shows the master URL to set with the profile, and it is that one.
    listed = checks.env_file_assignments(ENV_EXAMPLE)
    assert listed["SPINDLE_SPARK_MASTER"][0] == f"spark://{host}:{port}"
    assert listed["COMPOSE_PROFILES"][0] == "spark"
    # Executors must run the driver's image (Python, PySpark and Spindle's code).
    worker_build = svcs["worker"]["build"]
    assert svcs["spark-worker"]["build"] == worker_build == svcs["spark-master"]["build"]


# -- commands ------------------------------------------------------------------------------


def _parse_backend(args: list[str]) -> None:
    """Parse `python -m backend ARGS` with the real CLI: with --help appended, a command
    that exists with options that exist prints its help and nothing runs; anything else
    is a usage error (exit code 2)."""
    from typer.testing import CliRunner

    from backend.__main__ import cli

    result = CliRunner().invoke(cli, [*args, "--help"])
    if result.exit_code != 0:
        raise UsageError(f"python -m backend {' '.join(args)}: {result.output.strip()}")


class UsageError(Exception):
    pass


def _check_celery(args: list[str]) -> None:
    """`python -m celery ARGS`: the app is Spindle's and every option exists."""
    from celery.bin.beat import beat
    from celery.bin.celery import celery
    from celery.bin.control import inspect
    from celery.bin.worker import worker

    assert args[:2] == ["-A", "workers.jobs.celery_app"], args
    sub = {"worker": worker, "beat": beat, "inspect": inspect}[args[2]]
    known = {o for c in (celery, sub) for p in c.params for o in p.opts}
    unknown = [a for a in args[3:] if a.startswith("-") and a not in known]
    assert unknown == [], f"celery {args[2]}: unknown options {unknown}"


def check_command(argv: list[str]) -> None:
    module_args = checks.python_module_args(argv)
    assert module_args, f"not a `python -m` command: {argv}"
    module, args = module_args[0], module_args[1:]
    if module == "backend":
        _parse_backend(args)
    elif module == "celery":
        _check_celery(args)
    else:
        raise AssertionError(f"unexpected module {module}")


@pytest.mark.parametrize("service", SPINDLE_SERVICES)
def test_service_commands_parse(compose: dict[str, Any], service: str) -> None:
    check_command(command_of(compose, service))


def test_a_wrong_option_is_caught() -> None:
    with pytest.raises(UsageError):
        _parse_backend(["serve", "--no-workers"])
    with pytest.raises(UsageError):
        _parse_backend(["serv"])
    with pytest.raises(AssertionError, match="--pools"):
        _check_celery(["-A", "workers.jobs.celery_app", "worker", "--pools", "threads"])


def test_worker_command_matches_worker_command(compose: dict[str, Any]) -> None:
    """The compose worker is backend/__main__.py's worker_command() minus beat."""
    from backend.__main__ import worker_command
    from backend.settings import Settings

    def options(argv: list[str]) -> dict[str, str]:
        argv = argv[argv.index("worker") + 1 :]
        out = {}
        for i, a in enumerate(argv):
            if a.startswith("--"):
                nxt = argv[i + 1] if i + 1 < len(argv) else ""
                out[a] = "" if nxt.startswith("--") else nxt
        return out

    want = options(worker_command(Settings()))
    for beat_only in ("--beat", "--schedule", "--hostname"):
        want.pop(beat_only)
    got = options(command_of(compose, "worker"))
    assert got.pop("--hostname") == "spindle@%h"
    assert got == want
    healthcheck = checks.services(compose)["worker"]["healthcheck"]["test"][1]
    assert "--destination spindle@$$HOSTNAME" in healthcheck  # the name above, with %h


def test_worker_image_default_command_is_the_compose_one(compose: dict[str, Any]) -> None:
    ins = checks.parse_dockerfile((ROOT / "deploy" / "worker.Dockerfile").read_text())
    cmd = [i for i in ins if i.keyword == "CMD"][-1]
    assert re.findall(r'"([^"]*)"', cmd.args) == command_of(compose, "worker")


# -- images ---------------------------------------------------------------------------------


def test_builds_exist(compose: dict[str, Any]) -> None:
    assert checks.check_builds(compose) == []
    broken = copy.deepcopy(compose)
    broken["services"]["api"]["build"] = {"context": ".", "dockerfile": "deploy/nope.Dockerfile"}
    broken["services"]["frontend"]["build"] = "frontend-missing"
    problems = checks.check_builds(broken)
    assert len(problems) == 2
    assert "nope.Dockerfile does not exist" in problems[0]
    assert "frontend-missing does not exist" in problems[1]


def test_dockerfiles_copy_existing_files_and_drop_root(compose: dict[str, Any]) -> None:
    built = checks.dockerfiles(compose)
    assert {d.name for _, d in built} == {
        "api.Dockerfile",
        "worker.Dockerfile",
        "frontend.Dockerfile",
    }
    for context, dockerfile in built:
        assert checks.check_dockerfile(dockerfile, context) == [], dockerfile


def test_a_broken_dockerfile_is_reported(tmp_path: Path) -> None:
    (tmp_path / "present.txt").write_text("x")
    (tmp_path / "node_modules").mkdir()
    df = tmp_path / "Dockerfile"
    df.write_text(
        "FROM python:3.11-slim AS build\n"
        "USER nobody\n"
        "COPY present.txt \\\n"
        "     missing.txt /app/\n"
        "COPY --from=build /opt/x /opt/x\n"
        "COPY node_modules/ /app/node_modules/\n"
        "FROM python:3.11-slim\n"
        "USER root\n"
    )
    problems = checks.check_dockerfile(df, tmp_path, dockerignore="**/node_modules\n")
    assert problems == [
        "Dockerfile:3: COPY source missing.txt does not exist",
        "Dockerfile:6: COPY source node_modules/ is in .dockerignore",
        "Dockerfile:8: the final stage runs as root",
    ]
    df.write_text("FROM a AS one\nUSER app\nFROM b\nCOPY present.txt /\n")
    assert checks.check_dockerfile(df, tmp_path, dockerignore="") == [
        "Dockerfile: no USER in the final stage (the image would run as root)"
    ]


def test_dockerignore_keeps_the_code_and_drops_the_bulk() -> None:
    patterns = checks.dockerignore_patterns((ROOT / ".dockerignore").read_text())
    for dropped in (
        ".venv",
        ".venv/bin/python",
        ".git/HEAD",
        "frontend/node_modules/react/index.js",
        "backend/api/console/index.html",
        ".spindle-data/spindle.db",
        "backend/__pycache__/x.pyc",
        "spindle.egg-info/PKG-INFO",
        ".env",
    ):
        assert checks.is_ignored(dropped, patterns), dropped
    for kept in (
        "backend/api/app.py",
        "frontend/src/main.tsx",
        "frontend/package-lock.json",
        "backend/migrations/versions/0001_initial.py",
        "deploy/nginx.conf",
        ".env.example",
        "pyproject.toml",
        "README.md",
    ):
        assert not checks.is_ignored(kept, patterns), kept
    assert not checks.is_ignored("a/keep", checks.dockerignore_patterns("a\n!a/keep\n"))


def test_images_have_the_code_the_packages_import() -> None:
    """Every top-level package of this repository that the copied code imports is
    copied too (the migrations are inside `backend`), with what `pip install` reads."""
    top_level = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    for name in ("api.Dockerfile", "worker.Dockerfile"):
        ins = checks.parse_dockerfile((ROOT / "deploy" / name).read_text())
        copied = {
            src.strip("/") for i in ins if i.keyword == "COPY" for src in checks.copy_sources(i)[0]
        }
        assert {"pyproject.toml", "README.md"} <= copied, name
        packages = copied & top_level
        imported: set[str] = set()
        for pkg in packages:
            for py in (ROOT / pkg).rglob("*.py"):
                imported |= set(re.findall(r"^\s*(?:from|import)\s+(\w+)", py.read_text(), re.M))
        missing = (imported & top_level) - packages
        assert missing == set(), f"{name}: code imports {missing}, which is not copied"


def test_frontend_image_ships_the_tested_nginx_conf_and_the_ui_path() -> None:
    text = (ROOT / "deploy" / "frontend.Dockerfile").read_text()
    assert "COPY deploy/nginx.conf /etc/nginx/conf.d/default.conf" in text
    # The build stage works in /src/frontend; Vite writes where the backend serves from.
    assert "COPY --from=build /src/backend/api/console /usr/share/nginx/html/ui\n" in text
    vite = (ROOT / "frontend" / "vite.config.ts").read_text()
    assert 'base: "/ui/"' in vite  # the path nginx serves the build under
    assert 'outDir: "../backend/api/console"' in vite
    assert ui.DIST == ROOT / "backend" / "api" / "console"
    assert "root /usr/share/nginx/html;" in NGINX


# -- compose structure ----------------------------------------------------------------------


def test_host_ports_do_not_collide(compose: dict[str, Any]) -> None:
    env = checks.example_env(ENV_EXAMPLE)
    assert checks.check_host_ports(compose, env) == []
    broken = copy.deepcopy(compose)
    broken["services"]["spark-master"]["ports"] = ["${HTTP_PORT:-8080}:8080"]
    broken["services"]["redis"]["ports"] = [
        {"target": 6379, "published": "9001", "host_ip": "127.0.0.1"}
    ]
    assert checks.check_host_ports(broken, env) == [
        "host port 9001/tcp published by both redis and minio",
        "host port 8080/tcp published by both frontend and spark-master",
    ]
    # Different addresses, or different protocols, do not collide.
    ok = {
        "services": {
            "a": {"ports": ["127.0.0.1:7000:1"]},
            "b": {"ports": ["127.0.0.2:7000:1", "7001:1/udp"]},
            "c": {"ports": ["7001:1"]},
        }
    }
    assert checks.check_host_ports(ok, {}) == []


def test_depends_on_names_services(compose: dict[str, Any]) -> None:
    assert checks.check_depends_on(compose) == []
    broken = copy.deepcopy(compose)
    broken["services"]["api"]["depends_on"]["postgress"] = {"condition": "service_healthy"}
    broken["services"]["beat"]["depends_on"] = ["migrate"]
    del broken["services"]["redis"]["healthcheck"]
    broken["services"]["frontend"]["depends_on"] = {
        "spark-master": {"condition": "service_healthy"}
    }
    problems = checks.check_depends_on(broken)
    assert "service api depends on unknown service postgress" in problems
    assert "service api waits for redis to be healthy: no healthcheck" in problems
    assert (
        "service beat depends on one-shot migrate without "
        "condition: service_completed_successfully" in problems
    )
    assert "service frontend depends on spark-master, which only runs in {'spark'}" in problems


def test_named_volumes_are_declared(compose: dict[str, Any]) -> None:
    assert checks.check_volumes(compose) == []
    broken = copy.deepcopy(compose)
    broken["services"]["beat"]["volumes"] = ["beat-data:/var/lib/beat", "./local:/x"]
    broken["volumes"]["orphan"] = None
    assert checks.check_volumes(broken) == [
        "service beat uses undeclared volume beat-data",
        "volume orphan is declared but never used",
    ]


def test_long_running_services_have_healthchecks(compose: dict[str, Any]) -> None:
    assert checks.check_healthchecks(compose) == []
    one_shots = {n for n, s in checks.services(compose).items() if checks.is_one_shot(s)}
    assert one_shots == {"migrate", "minio-init"}
    broken = copy.deepcopy(compose)
    del broken["services"]["worker"]["healthcheck"]
    broken["services"]["beat"]["healthcheck"] = {"disable": True}
    assert checks.check_healthchecks(broken) == [
        "long-running service worker has no healthcheck",
        "long-running service beat has no healthcheck",
    ]


def test_no_service_is_forced_to_root(compose: dict[str, Any]) -> None:
    assert checks.check_users(compose) == []
    broken = copy.deepcopy(compose)
    broken["services"]["api"]["user"] = "0:0"
    assert checks.check_users(broken) == ["service api runs as root (user: 0:0)"]


# -- nginx ----------------------------------------------------------------------------------


def test_nginx_proxies_to_the_api_service(compose: dict[str, Any]) -> None:
    assert checks.check_nginx(NGINX, compose) == []
    frontend_deps = checks.services(compose)["frontend"]["depends_on"]
    assert "api" in frontend_deps


def test_nginx_mismatches_are_reported(compose: dict[str, Any]) -> None:
    wrong_port = NGINX.replace("http://api:8000", "http://api:8080")
    assert "nginx: /api proxies to api:8080, not api:8000" in checks.check_nginx(
        wrong_port, compose
    )
    buffered = NGINX.replace("proxy_buffering off;", "")
    assert checks.check_nginx(buffered, compose) == [
        "nginx: the metrics stream location does not set proxy_buffering off"
    ]
    moved = copy.deepcopy(compose)
    cmd = moved["services"]["api"]["command"]
    cmd[cmd.index("--port") + 1] = "9000"
    problems = checks.check_nginx(NGINX, moved)
    assert "service api listens on 9000 but exposes {'8000'}" in problems
    assert "nginx: /healthz proxies to api:8000, not api:9000" in problems
    no_readyz = re.sub(r"location = /readyz \{[^}]*\}", "", NGINX)
    assert checks.check_nginx(no_readyz, compose) == ["nginx: no location for /readyz"]


# -- systemd --------------------------------------------------------------------------------


def test_units_exist_and_run_the_real_commands() -> None:
    assert {u.name for u in UNITS} == {
        "spindle-api.service",
        "spindle-worker.service",
        "spindle-beat.service",
    }
    for unit in UNITS:
        assert checks.check_unit(unit) == [], unit
        svc = checks.read_unit(unit)["Service"]
        for key in ("ExecStartPre", "ExecStart"):
            if key in svc:
                check_command(checks.unit_command(svc[key]))
        assert svc["EnvironmentFile"] == "/etc/spindle/spindle.env"


def test_worker_unit_lets_drivers_checkpoint_on_stop() -> None:
    svc = checks.read_unit(ROOT / "deploy" / "systemd" / "spindle-worker.service")["Service"]
    assert svc["KillMode"] == "mixed"  # SIGTERM to Celery only, not to the Spark JVMs
    assert int(svc["TimeoutStopSec"]) >= 60
    argv = checks.unit_command(svc["ExecStart"])
    assert "--beat" not in argv and argv[argv.index("--hostname") + 1] == "spindle@%h"


def test_a_root_unit_is_reported(tmp_path: Path) -> None:
    unit = tmp_path / "x.service"
    unit.write_text("[Service]\nUser=root\nExecStart=python -m backend serve\n")
    assert checks.check_unit(unit) == [
        "x.service: runs as root (set User=)",
        "x.service: ExecStart is not an absolute command: python -m backend serve",
    ]


# -- the stack without Docker (local_servers/stack.py) -------------------------------------


def test_the_stack_without_docker_matches_compose(compose: dict[str, Any], tmp_path: Path) -> None:
    """docs/deploy.md's stack on one machine stands in for every service of compose's
    default and `spark` profiles, gives every Spindle process the same SPINDLE_* wiring,
    and runs the API, worker and beat with the same commands (addresses and paths aside)."""
    from local_servers.stack import SERVICES, LocalStack

    services = {
        name
        for name, s in checks.services(compose).items()
        if set(s.get("profiles", [])) <= {"spark"}
    }
    assert services == set(SERVICES)
    stack = LocalStack(tmp_path)
    assert stack.spindle_env().keys() == env_of(compose, "api").keys()

    def shape(cmd: list[str]) -> list[str]:
        """The command with its interpreter, addresses and paths as placeholders."""
        out = ["python" if c == sys.executable else c for c in cmd]
        for option in ("--host", "--port", "--hostname", "--schedule"):
            if option in out:
                out[out.index(option) + 1] = "*"
        return out

    ours = stack.commands()
    for service in ("api", "worker", "beat"):
        assert all(shape(c) == shape(command_of(compose, service)) for c in ours[service])
