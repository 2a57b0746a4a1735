"""Every worked example of the docs runs, against one live platform.

The pages are `README.md` and `docs/*.md`; their ```console blocks follow the format in
`tests/docs/console.py`. One `python -m backend serve` (embedded: SQLite, Celery over SQLite,
a real worker and Spark drivers) serves the whole module. Each page is one test: its commands
run in order in one bash session started in the repository root, with

- `SPINDLE_URL` (the platform's base URL) and `SPINDLE_TOKEN` (its admin token) exported,
- `SPINDLE_DATA_DIR` (and `TMPDIR`, so `mktemp` files stay with the run) exported as the
  platform's data directory (so a page may name a pipeline's storage location
  `${SPINDLE_DATA_DIR:-.spindle-data}/pipelines/<name>/storage`),
- `STORAGE` exported, when a page uses it, as the storage location of a stopped pipeline
  `clicks-offline` (docs/examples/clicks-per-user.yaml, renamed) that took two checkpoints
  identified `first` and `second` (the offline tools' examples read it),
- `KAFKA_BOOTSTRAP` exported, when a page uses it, as the address of a Kafka-protocol
  broker of the test session (`local_servers/kafka.py`),
- `CDC_DSN` exported, when a page uses it, as the libpq connection string of a fresh
  database on a PostgreSQL server of the session with `wal_level=logical`,
- the virtualenv's bin directory first on PATH (`spindle`, `python`).

A failing command fails its page's test with the file and line, the command, its output and
the tails of the platform's logs.
"""

from __future__ import annotations

import os
import re
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.backend.live_platform import ROOT, Platform

from .console import Block, FormatError, Session, difference, matches, parse

COMMAND_TIMEOUT_S = 400.0
STORAGE_PIPELINE = "clicks-offline"
VENV_BIN = ROOT / ".venv" / "bin"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def pages_with_examples() -> list[str]:
    """Pages with at least one console block (a page without any is not a test)."""
    out = []
    for p in pages():
        text = p.read_text(encoding="utf-8")
        if re.search(r"^```console\s*$", text, re.MULTILINE):
            out.append(str(p.relative_to(ROOT)))
    return out


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    p = Platform(tmp_path_factory.mktemp("docs-platform"), None, None)
    try:
        yield p.start()
    finally:
        p.stop()


class StorageLocation:
    """The stopped pipeline whose storage `$STORAGE` names, made on first use."""

    def __init__(self, platform: Platform) -> None:
        self.platform = platform
        self.path: Path | None = None

    def get(self) -> Path:
        if self.path is None:
            self.path = self._make()
        return self.path

    def _make(self) -> Path:
        p, name = self.platform, STORAGE_PIPELINE
        spec: dict[str, Any] = yaml.safe_load(
            (ROOT / "docs" / "examples" / "clicks-per-user.yaml").read_text()
        )
        spec["name"] = name
        spec["checkpoint"] = {"every_steps": 1_000_000}  # only the two checkpoints below
        p.ok("POST", "/api/v1/pipelines", json={"spec": spec})
        p.ok("POST", f"/api/v1/pipelines/{name}/start")
        step = p.wait_step(name, 2, timeout=180)
        for ident in ("first", "second"):
            op = p.ok(
                "POST",
                f"/api/v1/pipelines/{name}/checkpoints?wait=true",
                json={"identifier": ident},
            )
            assert op["status"] == "succeeded", op
            step = p.wait_step(name, step + 2, timeout=120)
        stop = p.ok("POST", f"/api/v1/pipelines/{name}/stop")
        p.wait_operation(stop["id"], timeout=120)
        p.wait_state(name, "stopped", timeout=120)
        return p.settings.storage_dir(name)


@pytest.fixture(scope="module")
def storage(platform: Platform) -> StorageLocation:
    return StorageLocation(platform)


def run_logs(platform: Platform) -> str:
    """The platform's logs and the newest driver logs."""
    runs = sorted(
        (platform.data_dir / "pipelines").glob("*/runs/*.log"), key=lambda f: f.stat().st_mtime
    )
    parts = [platform.logs()]
    for f in runs[-3:]:
        parts.append(
            f"--- {f.relative_to(platform.data_dir)}\n" + f.read_text(errors="replace")[-3000:]
        )
    return "\n".join(parts)


def session_env(
    platform: Platform, storage: Path | None, kafka: str | None = None, cdc: str | None = None
) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SPINDLE_") and k not in ("PYTHONPATH", "STORAGE")
    }
    bin_dir = VENV_BIN if VENV_BIN.is_dir() else Path(sys.executable).parent
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        SPINDLE_URL=f"http://127.0.0.1:{platform.port}",
        SPINDLE_TOKEN=platform.token,
        SPINDLE_DATA_DIR=str(platform.data_dir),
        # The examples' scratch files (mktemp) stay with this run's platform.
        TMPDIR=str(platform.data_dir),
        PYTHONPATH=str(ROOT),
        TERM="dumb",
        COLUMNS="200",
    )
    if storage is not None:
        env["STORAGE"] = str(storage)
    if kafka is not None:
        env["KAFKA_BOOTSTRAP"] = kafka
    if cdc is not None:
        env["CDC_DSN"] = cdc
    return env


def uses(variable: str, blocks: list[Block]) -> bool:
    return any(
        re.search(rf"\$\{{?{variable}\b", c.text)
        for b in blocks
        if b.skip_reason is None
        for c in b.commands
    )


@pytest.mark.parametrize("doc", pages_with_examples())
def test_worked_examples(
    doc: str, platform: Platform, storage: StorageLocation, request: pytest.FixtureRequest
) -> None:
    try:
        blocks = parse((ROOT / doc).read_text(encoding="utf-8"), doc)
    except FormatError as e:
        pytest.fail(str(e))
    runnable = [b for b in blocks if b.skip_reason is None]
    if not any(b.commands for b in runnable):
        pytest.skip(f"every console block of {doc} is marked skip")
    kafka = (
        request.getfixturevalue("kafka_broker").bootstrap
        if uses("KAFKA_BOOTSTRAP", blocks)
        else None
    )
    cdc = None
    if uses("CDC_DSN", blocks):
        pg = request.getfixturevalue("logical_pg")
        database = f"docs_{uuid.uuid4().hex[:8]}"
        pg.create_database(database)
        cdc = f"host=127.0.0.1 port={pg.port} user=postgres dbname={database}"
    stored = storage.get() if uses("STORAGE", blocks) else None
    shell = Session(ROOT, session_env(platform, stored, kafka, cdc))
    try:
        for block in runnable:
            for cmd in block.commands:
                t0 = time.monotonic()
                try:
                    code, out = shell.run(cmd.text, COMMAND_TIMEOUT_S)
                except (TimeoutError, RuntimeError) as e:
                    pytest.fail(f"{cmd.where}: $ {cmd.text}\n{e}\n\n{run_logs(platform)}")
                took = time.monotonic() - t0
                problem = None
                if code != cmd.exit_code:
                    problem = f"exit status {code}, expected {cmd.exit_code}"
                elif not matches(cmd.expected, out):
                    problem = "unexpected output:\n" + difference(cmd.expected, out)
                if problem:
                    pytest.fail(
                        f"{cmd.where}: $ {cmd.text}\n({took:.1f}s) {problem}\n"
                        f"--- output\n{out}\n{run_logs(platform)}"
                    )
    finally:
        shell.close()


def test_pages_use_the_format() -> None:
    """Every page parses (a skip needs a reason), and the pages that must have worked
    examples do."""
    for p in pages():
        parse(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))
    have = set(pages_with_examples())
    for page in ("docs/api.md", "docs/operations.md", "README.md"):
        assert page in have, f"{page} has no ```console examples"
