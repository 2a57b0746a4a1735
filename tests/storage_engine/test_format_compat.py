"""The current engine reads storage locations written by earlier builds (golden copies).

tests/storage_engine/golden/v<N>/ is a small location written once by
tests/storage_engine/make_golden.py with the build of that time, and v<N>-expected.json
holds what it contains, computed when it was written. These tests copy each golden directory
to a temporary one, open it with the current engine (latest and older checkpoints), compare
with the expected contents, validate it, and commit on top of it. They never regenerate or
modify the golden files.

When the on-disk format changes: keep every existing golden directory — old locations in the
field must stay readable, or be migrated by the engine on open (then assert the migration
here) — and add a new golden/v<N+1>/ written by the new build. Never rewrite an old one to
make a test pass.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from storage_engine import Batch, StorageLocation, ZSetSchema
from storage_engine.location_view import inspect_location, list_checkpoints
from storage_engine.tools import dump_batch_file, validate_location

GOLDEN = Path(__file__).resolve().parent / "golden"
VERSIONS = sorted(p.name for p in GOLDEN.iterdir() if p.is_dir())

Contents = dict[tuple[Any, ...], int]


def test_golden_copies_exist() -> None:
    assert "v1" in VERSIONS
    for v in VERSIONS:
        assert (GOLDEN / f"{v}-expected.json").is_file(), v
        names = {p.name for p in (GOLDEN / v).iterdir()}
        assert "LOCK" not in names and not any(n.endswith(".mut") for n in names), names


@pytest.fixture(params=VERSIONS)
def golden(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    version: str = request.param
    expected = json.loads((GOLDEN / f"{version}-expected.json").read_text())
    copy = tmp_path / version
    shutil.copytree(GOLDEN / version, copy)
    return copy, expected


def _schemas(expected: dict[str, Any]) -> dict[str, ZSetSchema]:
    return {
        op: ZSetSchema.of(
            [(n, pa.type_for_alias(t)) for n, t in spec["keys"]],
            [(n, pa.type_for_alias(t)) for n, t in spec["values"]],
        )
        for op, spec in expected["spines"].items()
    }


def _json_value(v: Any) -> Any:
    return v.isoformat() if isinstance(v, dt.datetime) else v


def _as_json(rows: Contents) -> Contents:
    """Engine rows in the expected file's encoding (timestamps as ISO strings)."""
    return {tuple(_json_value(x) for x in r): w for r, w in rows.items()}


def _expected_rows(rows: list[list[Any]]) -> Contents:
    return {tuple(r[:-1]): r[-1] for r in rows}


def _check_checkpoint(
    loc: StorageLocation, cp: dict[str, Any], schemas: dict[str, ZSetSchema]
) -> None:
    assert loc.restored is not None and loc.restored.uuid == cp["uuid"]
    assert loc.restored.identifier == cp["identifier"]
    assert loc.step == cp["step"]
    assert loc.metadata == cp["metadata"]
    for op, schema in schemas.items():
        sp = loc.spine(op, schema)
        want = _expected_rows(cp["contents"][op])
        assert _as_json(sp.to_batch().to_dict()) == want, op
        bound = cp["lower_bounds"].get(op)
        assert (None if sp.lower_bound is None else [_json_value(x) for x in sp.lower_bound]) == (
            bound
        ), op
        # point lookups go through the block index and the bloom filters, whose hash rule
        # is part of the format: every key shape, composite keys included
        nk = len(schema.keys)
        keys = sorted({r[:nk] for r in sp.to_batch().to_dict()})
        probe = keys[::3]
        got = _as_json(sp.seek(probe if nk > 1 else [k[0] for k in probe]).to_dict())
        probe_json = {tuple(_json_value(x) for x in k) for k in probe}
        assert probe and got == {r: w for r, w in want.items() if r[:nk] in probe_json}, op


def test_reads_every_checkpoint(golden: tuple[Path, dict[str, Any]]) -> None:
    root, expected = golden
    schemas = _schemas(expected)
    cps = expected["checkpoints"]
    assert len(cps) >= 2
    with StorageLocation.open(
        str(root), fingerprint=expected["fingerprint"], read_only=True
    ) as loc:
        assert [c.uuid for c in loc.list_checkpoints()] == [c["uuid"] for c in cps]
        _check_checkpoint(loc, cps[-1], schemas)
    for cp in cps:
        for ref in (cp["uuid"], cp["identifier"]):
            with StorageLocation.open(
                str(root), fingerprint=expected["fingerprint"], checkpoint=ref, read_only=True
            ) as loc:
                _check_checkpoint(loc, cp, schemas)


def test_validates_clean_and_tools_read_it(golden: tuple[Path, dict[str, Any]]) -> None:
    root, expected = golden
    report = validate_location(root)
    assert report.problems == []
    assert report.checkpoints_checked == len(expected["checkpoints"])
    listing = list_checkpoints(root)
    assert [(c.uuid, c.identifier, c.step) for c in listing.checkpoints] == [
        (c["uuid"], c["identifier"], c["step"]) for c in expected["checkpoints"]
    ]
    inspected = inspect_location(root)
    assert inspected.problems == [] and inspected.unreferenced == [] and not inspected.missing
    for f in inspected.batch_files:
        dump = dump_batch_file(root / f.name, limit=5)
        assert dump.problems == [] and dump.header is not None
        assert dump.header.format_version <= int(root.name.lstrip("v"))


def test_commit_on_top(golden: tuple[Path, dict[str, Any]]) -> None:
    root, expected = golden
    schemas = _schemas(expected)
    fp = expected["fingerprint"]
    cps = expected["checkpoints"]
    counts = schemas["counts"]
    added = Batch.from_tuples(counts, [((100_000 + i,), (i % 3,), 1) for i in range(50)])
    with StorageLocation.open(str(root), fingerprint=fp) as loc:
        assert loc.restored is not None and loc.restored.uuid == cps[-1]["uuid"]
        spines = {op: loc.spine(op, s) for op, s in schemas.items()}
        spines["counts"].insert(added)
        new = loc.commit(identifier="on-top", step=cps[-1]["step"] + 1, metadata={"x": 1})
    with StorageLocation.open(str(root), fingerprint=fp, read_only=True) as loc:
        assert loc.restored is not None and loc.restored.uuid == new
        assert loc.restored.parent == cps[-1]["uuid"]
        for op, schema in schemas.items():
            want = _expected_rows(cps[-1]["contents"][op])
            if op == "counts":
                want |= _as_json(added.to_dict())
            assert _as_json(loc.spine(op, schema).to_batch().to_dict()) == want, op
    assert validate_location(root).problems == []
    # the older checkpoints are intact, and collecting the oldest one keeps the rest valid
    with StorageLocation.open(
        str(root), fingerprint=fp, checkpoint=cps[0]["uuid"], read_only=True
    ) as loc:
        _check_checkpoint(loc, cps[0], schemas)
    with StorageLocation.open(str(root), fingerprint=fp) as loc:
        assert loc.gc_checkpoint().deleted == [cps[0]["uuid"]]
    assert validate_location(root).problems == []
    with StorageLocation.open(
        str(root), fingerprint=fp, checkpoint=cps[-1]["uuid"], read_only=True
    ) as loc:
        _check_checkpoint(loc, cps[-1], schemas)


def _digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("version", VERSIONS)
def test_read_only_access_leaves_files_untouched(version: str) -> None:
    """Read-only opens and the offline tools never write, so they may run on the golden
    directory itself (and on a location a pipeline owns)."""
    root = GOLDEN / version
    expected = json.loads((GOLDEN / f"{version}-expected.json").read_text())
    before = _digest(root)
    with StorageLocation.open(
        str(root), fingerprint=expected["fingerprint"], read_only=True
    ) as loc:
        for op, schema in _schemas(expected).items():
            loc.spine(op, schema).to_batch()
    assert validate_location(root).problems == []
    inspect_location(root)
    list_checkpoints(root)
    dump_batch_file(next(root.glob("*.batch")), limit=3)
    assert _digest(root) == before
    assert not (root / "LOCK").exists()
