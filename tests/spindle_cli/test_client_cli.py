"""`spindle` against a real platform (`python -m backend serve`: API, Celery worker, Spark).

Every command runs with its own environment and config file (exit-code checks and the
main paths as real subprocesses, the rest in process) and is checked for its exit code
(0 ok, 1 server/network failure, 2 usage), its output, and the absence of a traceback.
One platform for the module; two pipeline starts in all: the `log` pipeline starts early
(its Spark start-up overlaps the datagen tests) and is read at the end. The tests run in
file order and share the platform's state.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from spindle_cli.main import app
from tests.backend.api_fixtures import build_checkpoints
from tests.backend.live_platform import Platform, free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "docs" / "examples"
CLICKS = "clicks-per-user"
BIDS = "bids-from-log"
INGEST_LIMIT = 64 << 10  # the platform's ingest limit, so chunking is exercised
WAIT = ["--timeout", "400"]

runner = CliRunner()


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str


class Cli:
    """Runs `spindle` with SPINDLE_* taken only from here (never the caller's): as a real
    subprocess (`python -m spindle_cli.main`) when `sub`, else in process through Typer's runner
    (the same code path, without a Python start-up per call on a busy machine)."""

    def __init__(self, config: Path, url: str, token: str, sub: bool = False) -> None:
        self.config = config
        self.url = url
        self.token = token
        self.sub = sub

    def env(self, **extra: str | None) -> dict[str, str | None]:
        env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("SPINDLE_")}
        env.update(SPINDLE_CONFIG=str(self.config), SPINDLE_URL=self.url, SPINDLE_TOKEN=self.token)
        env.update(extra)
        return env

    def __call__(
        self,
        *args: str,
        code: int = 0,
        stdin: str | None = None,
        sub: bool | None = None,
        **env: str | None,
    ) -> Ran:
        if self.sub if sub is None else sub:
            full = {**os.environ, **self.env(**env)}
            p = subprocess.run(
                [sys.executable, "-m", "spindle_cli.main", *args],
                cwd=REPO,
                env={k: v for k, v in full.items() if v is not None},
                input=stdin,
                capture_output=True,
                text=True,
                timeout=600,
            )
            r = Ran(p.returncode, p.stdout, p.stderr)
        else:
            res = runner.invoke(app, list(args), input=stdin, env=self.env(**env))
            exc = res.exception
            assert exc is None or isinstance(exc, SystemExit), repr(exc)
            r = Ran(res.exit_code, res.stdout, res.stderr)
        shown = f"spindle {' '.join(args)} -> {r.code}\n{r.stdout}\n{r.stderr}"
        assert "Traceback" not in r.stdout + r.stderr, shown
        assert r.code == code, shown
        return r

    def json(self, *args: str, **env: str | None) -> Any:
        r = self(*args, "--json", **env)
        return json.loads(r.stdout)  # exactly one document


@pytest.fixture(scope="module")
def plat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    p = Platform(
        tmp_path_factory.mktemp("platform"),
        None,
        None,
        {"SPINDLE_MAX_INGEST_BYTES": str(INGEST_LIMIT), "SPINDLE_OPERATION_POLL_S": "0.2"},
    )
    try:
        yield p.start()
    finally:
        p.stop()


@pytest.fixture(scope="module")
def cli(plat: Platform, tmp_path_factory: pytest.TempPathFactory) -> Cli:
    return Cli(
        tmp_path_factory.mktemp("home") / "config.yaml", f"http://127.0.0.1:{plat.port}", plat.token
    )


@pytest.fixture(scope="module")
def bids(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, tuple[float, int]]]:
    """An NDJSON file of bids larger than the ingest limit, and max price/count per auction."""
    path = tmp_path_factory.mktemp("input") / "bids.ndjson"
    expect: dict[int, tuple[float, int]] = {}
    with path.open("w") as f:
        for i in range(6000):
            auction, price = i % 7, float((i * 37) % 1000) / 10
            f.write(
                json.dumps(
                    {
                        "auction": auction,
                        "bidder": i,
                        "price": price,
                        "ts": f"2024-01-01T00:{i % 60:02d}:00Z",
                    }
                )
                + "\n"
            )
            best, n = expect.get(auction, (0.0, 0))
            expect[auction] = (max(best, price), n + 1)
    assert path.stat().st_size > INGEST_LIMIT
    return path, expect


# -- no server needed ----------------------------------------------------------------------


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "config.yaml", "http://127.0.0.1:9", "spd_nothing", sub=True)
    r = cli("pipelines", "frobnicate", code=2)
    assert "No such command" in r.stderr
    cli("start", "x", "--from-checkpoint", "yesterday", code=2)
    cli("retention", "set", "x", "--max-age", "a while", code=2)
    cli("tokens", "create", "--name", "n", "--role", "root", code=2)
    r = cli("pipelines", "create", "-f", str(tmp_path / "missing.yaml"), code=2)
    assert "cannot read" in r.stderr
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    r = cli("pipelines", "validate", "-f", str(tmp_path / "bad.yaml"), code=2)
    assert "neither valid YAML nor JSON" in r.stderr
    cli("logs", "x", "--follow", "--json", code=2)
    cli("views", "get", "x", "v", "--page", "2", "--offset", "3", code=2)
    r = cli("pipelines", "ls", code=2, SPINDLE_PROFILE="nope")
    assert "no profile 'nope'" in r.stderr


def test_version_is_the_installed_distributions(tmp_path: Path) -> None:
    """`spindle --version` needs no server and prints the version pip installed."""
    cli = Cli(tmp_path / "config.yaml", "http://127.0.0.1:9", "spd_nothing", sub=True)
    r = cli("--version")
    assert r.stdout == f"spindle {importlib.metadata.version('spindle')}\n", r.stdout


def test_unreachable_server_exits_1_with_a_clear_message(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    cli = Cli(tmp_path / "config.yaml", url, "spd_nothing", sub=True)
    for args in (
        ["pipelines", "ls"],
        ["checkpoints", "commit", "x", "--wait"],
        ["metrics", "x", "--watch"],
    ):
        r = cli(*args, code=1)
        assert r.stderr.startswith(f"error: cannot reach {url}: "), r.stderr
        assert r.stdout == ""


# -- against the platform ------------------------------------------------------------------


def test_profiles_and_precedence(cli: Cli) -> None:
    token = cli.token
    bogus = f"http://127.0.0.1:{free_port()}"
    no_env = {"SPINDLE_URL": None, "SPINDLE_TOKEN": None}
    r = cli("profile", "set", "local", "--url", cli.url, "--token", token, **no_env)
    assert token not in r.stdout + r.stderr and "local (current)" in r.stdout
    assert stat.S_IMODE(cli.config.stat().st_mode) == 0o600
    assert yaml.safe_load(cli.config.read_text())["profiles"]["local"]["token"] == token
    cli("profile", "set", "broken", "--url", bogus, "--token", "spd_wrong", **no_env)

    listed = cli.json("profile", "ls", **no_env)
    assert listed["current"] == "local"
    assert {p["name"] for p in listed["profiles"]} == {"local", "broken"}
    assert token not in json.dumps(listed) and token not in cli("profile", "ls").stdout

    # The current profile alone is enough.
    assert isinstance(cli.json("pipelines", "ls", **no_env), list)
    # --profile and SPINDLE_PROFILE select another one.
    r = cli("--profile", "broken", "pipelines", "ls", code=1, sub=True, **no_env)
    assert f"cannot reach {bogus}" in r.stderr
    cli("pipelines", "ls", code=1, SPINDLE_PROFILE="broken", **no_env)
    # The environment overrides the file: URL and token separately.
    cli("--profile", "broken", "pipelines", "ls", SPINDLE_URL=cli.url, SPINDLE_TOKEN=token)
    r = cli("pipelines", "ls", code=1, SPINDLE_URL=bogus, SPINDLE_TOKEN=None)
    assert f"cannot reach {bogus}" in r.stderr
    r = cli(
        "--profile", "broken", "pipelines", "ls", code=1, SPINDLE_URL=cli.url, SPINDLE_TOKEN=None
    )
    assert "unknown or revoked API token" in r.stderr
    shown = cli.json("profile", "show", SPINDLE_TOKEN=None)
    assert shown["url_from"] == "SPINDLE_URL" and shown["token_from"] == "profile local"
    assert shown["token"] != token and token.startswith(shown["token"].rstrip("…"))

    cli("profile", "use", "broken", **no_env)
    cli("pipelines", "ls", code=1, **no_env)
    cli("profile", "use", "missing", code=2)
    cli("profile", "rm", "broken")
    cli("profile", "use", "local")
    # No token at all: the server's 401 message and a hint.
    r = cli(
        "pipelines",
        "ls",
        code=1,
        sub=True,
        SPINDLE_CONFIG=str(cli.config) + ".none",
        SPINDLE_TOKEN=None,
    )
    assert "an API token is required" in r.stderr and "hint:" in r.stderr


def test_validate_create_get_edit_rm(cli: Cli, tmp_path: Path) -> None:
    spec_path = EXAMPLES / f"{CLICKS}.yaml"
    r = cli("pipelines", "validate", "-f", str(spec_path))
    assert r.stdout.strip() == f"valid: pipeline {CLICKS}"

    bad = yaml.safe_load(spec_path.read_text())
    bad["state"][0]["group_by"] = "user"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    for cmd in ("validate", "create"):
        r = cli("pipelines", cmd, "-f", str(tmp_path / "bad.yaml"), code=1, sub=True)
        assert r.stderr.startswith("error: invalid pipeline spec\n"), r.stderr
        assert "  state.0.group_by: " in r.stderr and r.stdout == ""

    created = cli.json("pipelines", "create", "-f", str(spec_path), "--description", "clicks")
    assert created["name"] == CLICKS and created["state"] == "stopped"
    r = cli("pipelines", "create", "-f", str(spec_path), code=1)
    assert "exists" in r.stderr and "spec.name: already used" in r.stderr

    # JSON on stdin, wrapped as a request body.
    other = yaml.safe_load(spec_path.read_text()) | {"name": "clicks-copy"}
    body = json.dumps({"spec": other, "description": "a copy"})
    r = cli("pipelines", "create", "-f", "-", stdin=body)
    assert r.stdout.strip() == "created pipeline clicks-copy (stopped)"

    names = [p["name"] for p in cli.json("pipelines", "ls")]
    assert names == sorted(names) and {CLICKS, "clicks-copy"} <= set(names)
    got = cli.json("pipelines", "get", "clicks-copy")
    assert got["description"] == "a copy" and got["spec"]["name"] == "clicks-copy"
    text = cli("pipelines", "get", CLICKS).stdout
    assert "state:" in text and "spec:" in text and "per_user" in text

    # get --spec | edit -f - round trip; the description is kept.
    spec_text = cli("pipelines", "get", "clicks-copy", "--spec").stdout
    changed = yaml.safe_load(spec_text)
    changed["trigger"] = {"interval": "2s"}
    cli("pipelines", "edit", "clicks-copy", "-f", "-", stdin=yaml.safe_dump(changed))
    got = cli.json("pipelines", "get", "clicks-copy")
    assert got["spec"]["trigger"] == {"interval": "2s"} and got["description"] == "a copy"
    r = cli("pipelines", "edit", "clicks-copy", "-f", str(spec_path), code=1)
    assert "the name cannot change" in r.stderr and "spec.name:" in r.stderr

    r = cli("pipelines", "rm", "clicks-copy")
    assert r.stdout.strip() == "deleted pipeline clicks-copy"
    r = cli("pipelines", "get", "clicks-copy", code=1)
    assert r.stderr.strip() == "error: no pipeline named 'clicks-copy'"


def test_fork(cli: Cli, plat: Platform, tmp_path: Path) -> None:
    spec = yaml.safe_load((EXAMPLES / "nexmark-q3-sql.yaml").read_text()) | {"name": "q3-cli"}
    cli("pipelines", "create", "-f", "-", stdin=json.dumps({"spec": spec}))
    uids = build_checkpoints(plat.data_dir / "pipelines" / "q3-cli" / "storage", 2)
    r = cli("pipelines", "fork", "q3-cli", "--name", "q3-cli-fork", "--checkpoint", "1")
    assert r.stdout.strip() == (
        f"forked q3-cli-fork from q3-cli at step 1 (checkpoint {uids[0]}), stopped"
    )
    text = cli("pipelines", "get", "q3-cli-fork").stdout
    assert f"forked from:   q3-cli at checkpoint {uids[0]} (step 1), " in text, text
    assert "forked from:   -" in cli("pipelines", "get", "q3-cli").stdout
    # Another spec from a file, a uuid, JSON out; then the errors, named.
    (tmp_path / "fork.yaml").write_text(yaml.safe_dump(spec | {"name": "q3-cli-2"}))
    got = cli.json(
        "pipelines", "fork", "q3-cli", "--name", "q3-cli-2", "--checkpoint", uids[1],
        "--spec", str(tmp_path / "fork.yaml"), "--description", "second",
    )  # fmt: skip
    assert got["forked_from"]["step"] == 2 and got["description"] == "second"
    r = cli("pipelines", "fork", "q3-cli", "--name", "q3-cli-3", "--checkpoint", "9", code=1)
    assert "no retained checkpoint '9'" in r.stderr and uids[1] in r.stderr
    assert "  checkpoint: no such retained checkpoint" in r.stderr
    r = cli("pipelines", "fork", "q3-cli", "--name", "q3-cli-2", "--checkpoint", "1", code=1)
    assert "  name: already used" in r.stderr
    for name in ("q3-cli", "q3-cli-fork", "q3-cli-2"):
        cli("pipelines", "rm", name)


def test_tokens_and_roles(cli: Cli) -> None:
    viewer = cli.json("tokens", "create", "--name", "dashboards", "--role", "viewer")
    assert viewer["role"] == "viewer" and viewer["token"].startswith(viewer["prefix"])
    listed = cli.json("tokens", "ls")
    mine = next(t for t in listed if t["id"] == viewer["id"])
    assert mine["name"] == "dashboards" and "token" not in mine
    assert "dashboards" in cli("tokens", "ls").stdout

    as_viewer = {"SPINDLE_TOKEN": viewer["token"]}
    assert CLICKS in {p["name"] for p in cli.json("pipelines", "ls", **as_viewer)}
    r = cli("pipelines", "rm", CLICKS, code=1, sub=True, **as_viewer)
    assert r.stderr.strip() == "error: this needs the admin role; the token has viewer"
    r = cli("checkpoints", "gc", CLICKS, code=1, **as_viewer)
    assert "this needs the operator role; the token has viewer" in r.stderr
    cli("tokens", "ls", code=1, **as_viewer)

    r = cli("tokens", "revoke", str(viewer["id"]))
    assert r.stdout.strip() == f"revoked token {viewer['id']}"
    r = cli("pipelines", "ls", code=1, **as_viewer)
    assert "unknown or revoked API token" in r.stderr
    r = cli("tokens", "revoke", str(viewer["id"]), code=1)
    assert f"no token {viewer['id']}" in r.stderr

    # --save-as keeps the secret out of the output.
    r = cli("tokens", "create", "--name", "ops", "--role", "operator", "--save-as", "ops")
    saved = yaml.safe_load(cli.config.read_text())["profiles"]["ops"]["token"]
    assert saved.startswith("spd_") and saved not in r.stdout + r.stderr


def test_ingest_into_a_log_pipeline_then_start_it(
    cli: Cli, bids: tuple[Path, dict[int, tuple[float, int]]]
) -> None:
    path, _ = bids
    cli("pipelines", "create", "-f", str(EXAMPLES / "ingest-log.yaml"))
    # A chunk larger than the server's limit: the 413 names the limit, chunks shrink.
    got = cli.json("ingest", BIDS, "bids", str(path), "--chunk-bytes", str(1 << 20))
    assert got["records"] == 6000 and (got["first_offset"], got["end_offset"]) == (0, 6000)
    assert got["requests"] > 1
    r = cli("ingest", BIDS, "bids", "-", code=1, sub=True, stdin='{"auction": "not a number"}\n')
    assert "records do not parse as ndjson" in r.stderr
    r = cli("ingest", BIDS, "nope", str(path), code=1)
    assert "has no input stream 'nope'" in r.stderr
    r = cli("ingest", BIDS, "bids", "-", code=2, stdin="\n\n")
    assert "holds no records" in r.stderr
    # Started now, without waiting: its Spark start-up overlaps the next test.
    cli("start", BIDS)


@pytest.mark.full
def test_datagen_pipeline_lifecycle(cli: Cli, plat: Platform) -> None:
    pol = cli.json(
        "retention",
        "set",
        CLICKS,
        "--keep-last",
        "none",
        "--max-age",
        "7d",
        "--auto-commit",
        "none",
    )
    assert pol == {
        "keep_last": None,
        "max_age_s": 604800.0,
        "min_keep": 1,
        "auto_commit_interval_s": None,
    }
    assert cli.json("retention", "get", CLICKS) == pol
    assert "max_age_s:              7d" in cli("retention", "get", CLICKS).stdout

    r = cli("start", CLICKS, "--wait", *WAIT, sub=True)
    assert r.stdout.strip() == f"{CLICKS} is running (run #1)"
    cli("start", CLICKS, code=1, sub=True)  # already running: the server's 409
    r = cli("wait", CLICKS, "--step", "2", *WAIT)
    assert r.stdout.startswith(f"{CLICKS} is running (run #1), step ")

    r = cli("checkpoints", "commit", CLICKS, "--identifier", "first", "--wait", *WAIT)
    assert r.stdout.startswith("checkpoint ") and " at step " in r.stdout
    first = r.stdout.split()[1]
    op = cli.json("checkpoints", "commit", CLICKS, "--wait", *WAIT)
    assert op["status"] == "succeeded" and op["kind"] == "commit"
    second = op["result"]["checkpoint"]
    done = cli.json("operations", "get", op["id"])
    assert done["result"] == op["result"]

    cps = {c["uuid"]: c for c in cli.json("checkpoints", "ls", CLICKS)}
    assert cps[first]["identifier"] == "first" and cps[first]["local_durable"]
    assert cps[second]["step"] >= cps[first]["step"] and not cps[first]["pinned"]
    assert first in cli("checkpoints", "ls", CLICKS).stdout

    r = cli("checkpoints", "pin", CLICKS, first)
    assert r.stdout.strip() == f"pinned checkpoint {first}"
    r = cli("checkpoints", "rm", CLICKS, first, code=1, sub=True)
    assert r.stderr.strip() == f"error: checkpoint {first} is pinned; unpin it first"
    gc = cli.json("checkpoints", "gc", CLICKS, "--keep", "1", "--wait", *WAIT)
    assert gc["status"] == "succeeded" and first not in gc["result"]["deleted"]
    left = {c["uuid"]: c for c in cli.json("checkpoints", "ls", CLICKS)}
    assert left[first]["pinned"] and not set(gc["result"]["deleted"]) & set(left)
    cli("checkpoints", "unpin", CLICKS, first)
    assert not {c["uuid"]: c for c in cli.json("checkpoints", "ls", CLICKS)}[first]["pinned"]

    runs = cli.json("runs", CLICKS)
    assert len(runs) == 1 and runs[0]["state"] == "running" and runs[0]["number"] == 1
    assert "#1" in cli("runs", CLICKS).stdout
    logs = cli.json("logs", CLICKS, "--lines", "50")
    assert logs["run"] == 1 and 0 < len(logs["lines"]) <= 50
    cli("logs", CLICKS, "-n", "5")
    samples = cli.json("metrics", CLICKS, "--limit", "5")
    assert 0 < len(samples) <= 5 and all(s["rows_in"] >= 0 for s in samples)
    assert samples == sorted(samples, key=lambda s: s["ts"])
    r = cli("metrics", CLICKS, "--watch", "--count", "2", "--limit", "3", sub=True)
    assert "rows in" in r.stdout and "state rows" in r.stdout
    flow = cli.json("dataflow", CLICKS)
    (op,) = [n for n in flow["nodes"] if n["operator"]]
    assert op["id"] == "per_user" and op["metrics"]["state_rows"] > 0 and flow["step"] > 0
    r = cli("dataflow", CLICKS, "--watch", "--count", "1", "--interval", "0.2", sub=True)
    assert "per_user" in r.stdout and "aggregate" in r.stdout and "table:source" in r.stdout

    # Stopped from paused: the state is still open, so the final checkpoint is taken.
    assert cli.json("pause", CLICKS, "--wait", *WAIT)["state"] == "paused"
    r = cli("stop", CLICKS, "--checkpoint", "--wait", *WAIT, sub=True)
    assert r.stdout.startswith("stopped with checkpoint "), r.stdout
    final = r.stdout.split()[3]
    assert cli.json("pipelines", "get", CLICKS)["state"] == "stopped"
    assert final in {c["uuid"] for c in cli.json("checkpoints", "ls", CLICKS)}

    # Restore on a stopped pipeline: the next start resumes from it.
    r = cli("checkpoints", "restore", CLICKS, first, "--wait", *WAIT)
    assert r.stdout.startswith(f"restored checkpoint {first} at step ")
    assert cli.json("pipelines", "get", CLICKS)["restore_point"] == first
    missing = "00000000-0000-0000-0000-000000000000"
    r = cli("checkpoints", "restore", CLICKS, missing, code=1)
    assert f"has no checkpoint {missing}" in r.stderr

    r = cli("pipelines", "rm", CLICKS)
    cli("pipelines", "get", CLICKS, code=1)


def test_views_of_the_log_pipeline(
    cli: Cli, bids: tuple[Path, dict[int, tuple[float, int]]]
) -> None:
    _, expect = bids
    cli("wait", BIDS, "--step", "1", *WAIT)
    op = cli.json("checkpoints", "commit", BIDS, "--wait", *WAIT)
    assert op["status"] == "succeeded"

    page = cli.json("views", "get", BIDS, "latest", "--key", "3")
    assert page["live"] and page["step"] >= op["result"]["step"]  # the running driver's
    assert page["rows"] == [{"auction": 3, "max_price": expect[3][0], "bids": expect[3][1]}]
    stored = cli.json("views", "get", BIDS, "latest", "--key", "3", "--as-of", "latest")
    assert stored["checkpoint"] == op["result"]["checkpoint"] and stored["rows"] == page["rows"]
    ranged = cli.json("views", "get", BIDS, "latest", "--ge", "2", "--lt", "5")["rows"]
    assert [r["auction"] for r in ranged] == [a for a in sorted(expect) if 2 <= a < 5]
    every = cli.json("views", "get", BIDS, "latest", "--limit", "100")["rows"]
    assert {r["auction"]: (r["max_price"], r["bids"]) for r in every} == expect
    paged = cli.json("views", "get", BIDS, "latest", "--page", "2", "--limit", "3")["rows"]
    assert paged == every[3:6]
    text = cli("views", "get", BIDS, "latest", "--key", "3").stdout
    assert "max_price" in text and str(expect[3][1]) in text and "(live)" in text
    r = cli("views", "get", BIDS, "nope", code=1)
    assert "has no view 'nope'" in r.stderr

    assert cli.json("pause", BIDS, "--wait", *WAIT)["state"] == "paused"
    # Not waited for: a resume right after a pause can end the run (see cli/README.md).
    assert cli.json("resume", BIDS)["desired_state"] == "running"
    r = cli("stop", BIDS, "--wait", *WAIT)
    assert r.stdout.startswith("stopped")
    assert cli.json("pipelines", "get", BIDS)["state"] == "stopped"
