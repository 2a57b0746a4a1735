"""Upgrades keep data (issue 51): the data directories that earlier releases left
(`upgrade/<alembic head>-<commit>/`, made by those releases' own code: `upgrade_fixture.py`)
open on this release. Its platform migrates the database from the release's revision with
the rows in it; every pipeline, checkpoint and run is still listed; each pipeline resumes
from the release's last checkpoint (one process, and two shards where the release had
partitioned pipelines) and its view ends equal to the batch aggregate over all of its input.

The same rows, copied into PostgreSQL at the release's revision, migrate there too.

Revisions before the oldest release kept in git (0001 to 0008: their code went with the
history squashed at 1fbc1a4) are reached by downgrading the oldest fixture's database, rows
and all, with those revisions' own downgrades, and upgrading it again.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa

from backend import migrate
from workers.runtime.sources import clicks

from ..polling import wait_until
from .live_platform import Platform
from .upgrade_fixture import FIXTURES, KEEP_LAST

RELEASES = sorted(d for d in FIXTURES.iterdir() if (d / "release.json").is_file())


def _expected(limit: int) -> dict[str, tuple[int, float, float]]:
    """Per user: count, sum and max of the amounts of the generator's first `limit` rows."""
    t = pa.Table.from_batches([clicks(11, 400.0, 30, 0, limit, 0)])
    g = t.group_by("user").aggregate([("amount", "count"), ("amount", "sum"), ("amount", "max")])
    return {r["user"]: (r["amount_count"], r["amount_sum"], r["amount_max"]) for r in g.to_pylist()}


def _equal(rows: list[dict[str, Any]], want: dict[str, tuple[int, float, float]]) -> bool:
    got = {r["user"]: (r["n"], r["total"], r["top"]) for r in rows}
    return got.keys() == want.keys() and all(
        got[u][0] == want[u][0]
        and math.isclose(got[u][1], want[u][1], rel_tol=1e-9, abs_tol=1e-6)
        and got[u][2] == want[u][2]
        for u in want
    )


@pytest.mark.parametrize("fixture", RELEASES, ids=[d.name for d in RELEASES])
def test_an_earlier_releases_data_resumes_on_this_release(fixture: Path, tmp_path: Path) -> None:
    release = json.loads((fixture / "release.json").read_text())
    data = tmp_path / "data"
    shutil.copytree(fixture, data)
    p = Platform(data, None, None)
    p.start()
    try:
        want = _expected(release["limit"])
        for name, made in release["pipelines"].items():
            assert p.pipeline(name)["state"] == "stopped"
            listed = p.ok("GET", f"/api/v1/pipelines/{name}/checkpoints")
            assert made["checkpoint"] in {c["uuid"] for c in listed}
            # The release may not yet have applied its retention (keep_last 3) to the last
            # ones; this release's retention job may already have.
            assert min(made["checkpoints"], KEEP_LAST) <= len(listed) <= made["checkpoints"]
            assert len(p.runs(name)) == made["runs"]
            assert p.ok("GET", f"/api/v1/pipelines/{name}/metrics"), "the steps' history"

            p.ok("POST", f"/api/v1/pipelines/{name}/start")
            p.wait_state(name, "running", timeout=120)

            def caught_up(name: str = name) -> bool:
                r = p.client.post(f"/api/v1/pipelines/{name}/checkpoints?wait=true")
                assert r.status_code == 200, (r.text, p.runs(name))
                view = p.ok("GET", f"/api/v1/pipelines/{name}/views/v?limit=1000")
                return _equal(view["rows"], want)

            wait_until(caught_up, 180, f"{name}'s view to equal the batch aggregate", every=2)
            run = p.runs(name)[0]  # it opened (it stepped): it says where it started
            assert run["restored_checkpoint"] == made["checkpoint"]
            assert run["first_step"] == made["step"]
            p.ok("POST", f"/api/v1/pipelines/{name}/stop")
            p.wait_state(name, "stopped")
    finally:
        p.stop()


def test_the_oldest_releases_rows_go_down_to_the_first_revision_and_back(tmp_path: Path) -> None:
    oldest = RELEASES[0]
    db = tmp_path / "spindle.db"
    for part in oldest.glob("spindle.db*"):  # with its write-ahead log, as the release left it
        shutil.copy(part, tmp_path / part.name)
    url = f"sqlite:///{db}"
    engine = sa.create_engine(url)

    def counts() -> dict[str, int]:
        with engine.connect() as c:
            return {
                t: int(c.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one())
                for t in ("pipelines", "runs", "checkpoints", "metric_samples")
            }

    before = counts()
    assert all(before.values()), before
    for target in ("0008", "0005", "0001"):
        migrate.downgrade(url, target)
        assert migrate.current(url) == target and counts() == before, target
        migrate.upgrade(url)
        assert migrate.current(url) == migrate.head() and counts() == before, target
    engine.dispose()


@pytest.mark.parametrize("fixture", RELEASES, ids=[d.name for d in RELEASES])
def test_a_releases_rows_migrate_on_postgresql(fixture: Path, tmp_path: Path, pg_url: str) -> None:
    """The deployed mode's database: the release's rows, copied into a PostgreSQL database
    at the release's revision, migrate to this release's head with every row kept."""
    release = json.loads((fixture / "release.json").read_text())
    for part in fixture.glob("spindle.db*"):
        shutil.copy(part, tmp_path / part.name)
    source = sa.create_engine(f"sqlite:///{tmp_path / 'spindle.db'}")
    migrate.upgrade(pg_url, release["alembic_head"])
    target = sa.create_engine(pg_url)
    old, new = sa.MetaData(), sa.MetaData()
    old.reflect(source)
    new.reflect(target)
    counts = {}
    with source.connect() as src, target.begin() as dst:
        for table in new.sorted_tables:  # parents before children
            if table.name == "alembic_version" or table.name not in old.tables:
                continue
            rows = [dict(r._mapping) for r in src.execute(sa.select(old.tables[table.name]))]
            if rows:
                dst.execute(table.insert(), rows)
            counts[table.name] = len(rows)
    assert counts["pipelines"] and counts["runs"] and counts["checkpoints"], counts
    migrate.upgrade(pg_url)
    assert migrate.current(pg_url) == migrate.head()
    with target.connect() as c:
        for name, n in counts.items():
            if name in sa.inspect(target).get_table_names():
                got = c.execute(sa.text(f'SELECT count(*) FROM "{name}"')).scalar_one()
                assert got == n, name
    source.dispose()
    target.dispose()
