"""The upgrade fixtures (`test_upgrade.py`): what an earlier release left in its data
directory, made by that release's own code.

    python -m tests.backend.upgrade_fixture <commit>

checks the commit out in a temporary worktree, runs its platform (`python -m backend
serve`, embedded: SQLite, the embedded broker, the local object-store directory) on a new
data directory, creates the pipelines below through its API, runs each for a few steps,
commits a checkpoint, stops it with a final checkpoint, stops the platform, and copies the
data directory (less logs) to `tests/backend/upgrade/<alembic head>-<commit>/`, with a
`release.json` saying what it holds. A fixture is made once per release and never
regenerated: it is that release's data, not this one's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .live_platform import ROOT, Platform

FIXTURES = ROOT / "tests" / "backend" / "upgrade"
LIMIT = 4_000  # rows of the datagen source: the release runs part of them, the test the rest
KEEP_LAST = 3


def pipelines() -> list[dict[str, Any]]:
    """A SQL pipeline in one process and one partitioned in two shards, each over the
    deterministic clicks generator up to `LIMIT` rows."""
    out = []
    for name, parallelism in (("clicks-sql", 1), ("clicks-p2", 2)):
        out.append(
            {
                "name": name,
                "source": {
                    "kind": "datagen",
                    "generator": "clicks",
                    "seed": 11,
                    "rows_per_second": 400,
                    "max_rows_per_step": 100,
                    "users": 30,
                    "limit": LIMIT,
                },
                "sql": "CREATE VIEW per_user AS SELECT user, count(*) AS n, "
                "sum(amount) AS total, max(amount) AS top FROM input GROUP BY user",
                "sinks": [{"name": "v", "kind": "view", "from": "per_user"}],
                "checkpoint": {"every_steps": 3},
                "retention": {"keep_last": KEEP_LAST},
                "trigger": {"interval": "200ms"},
                # Releases before issue 50 know no `parallelism`: the field only when > 1.
                **({"parallelism": parallelism} if parallelism > 1 else {}),
            }
        )
    return out


def make(commit: str) -> Path:
    with tempfile.TemporaryDirectory(prefix="spindle-upgrade-") as tmp:
        code, data = Path(tmp) / "code", Path(tmp) / "data"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(code), commit],
            check=True,
        )
        try:
            data.mkdir()
            release = _run_release(code, data)
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(code)], check=True
            )
        head = release["alembic_head"]
        out = FIXTURES / f"{head}-{commit[:10]}"
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(data, out, ignore=shutil.ignore_patterns("*.log", "*.err"))
        (out / "release.json").write_text(json.dumps(release, indent=2) + "\n")
        return out


def _run_release(code: Path, data: Path) -> dict[str, Any]:
    p = Platform(data, None, None, root=code)
    p.start()
    try:
        made: dict[str, Any] = {}
        for spec in pipelines():
            name = spec["name"]
            created = p.client.post("/api/v1/pipelines", json={"spec": spec})
            if created.status_code == 422 and "parallelism" in spec:
                continue  # a release before partitioned pipelines
            assert created.status_code == 201, created.text
            p.ok("POST", f"/api/v1/pipelines/{name}/start")
            p.wait_step(name, 5, timeout=180)
            r = p.client.post(f"/api/v1/pipelines/{name}/checkpoints?wait=true")
            assert r.status_code == 200 and r.json()["status"] == "succeeded", r.text
            stop = p.ok("POST", f"/api/v1/pipelines/{name}/stop?checkpoint=true")
            done = p.wait_operation(stop["id"], timeout=120)
            assert done["status"] == "succeeded", done
            p.wait_state(name, "stopped")
            made[name] = {
                "checkpoint": done["result"]["checkpoint"],
                "step": done["result"]["step"],
                "checkpoints": len(p.ok("GET", f"/api/v1/pipelines/{name}/checkpoints")),
                "runs": len(p.runs(name)),
            }
        version = p.ok("GET", "/api/v1/version") if _has_version(p) else None
    finally:
        p.stop()
    head = subprocess.run(
        [sys.executable, "-c", "from backend.migrate import head; print(head())"],
        cwd=code,
        env={"PYTHONPATH": str(code), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return {"alembic_head": head, "version": version, "pipelines": made, "limit": LIMIT}


def _has_version(p: Platform) -> bool:
    return p.client.get("/api/v1/version").status_code == 200


if __name__ == "__main__":
    print(make(sys.argv[1]))
