"""Corruption of every kind of file in a storage location is detected, never read as data.

A real location (four checkpoints sharing files, three spines, 32-row blocks so files have
many blocks; built once with compression and once without) is copied afresh for each trial,
one file is damaged — random bytes flipped, or the file cut short at a random length inside
a chosen region — and then:

(a) `validate_location` reports a problem naming exactly that file (and the block, for a
    data block or its bloom filter);
(b) `spindle storage validate` exits 1 (as a subprocess for the first trial of some cases,
    through typer's CliRunner otherwise);
(c) reading every checkpoint through the engine (open, spine, seek, to_batch) either raises
    CorruptionError naming the file, or returns exactly the original state. A read must
    raise when the damage is in checksummed bytes it depends on; it may succeed only when
    the damage is in bytes no checksum covers (padding, or a checksum trailer spelled
    differently with the same value) — and then its answer must be the original one.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from spindle_cli.main import app
from storage_engine import (
    Batch,
    CorruptionError,
    EngineSettings,
    StorageError,
    StorageLocation,
    ZSetSchema,
)
from storage_engine.cache import BufferCache
from storage_engine.file_format import BatchFile
from storage_engine.fileio import PosixFileLayer
from storage_engine.tools import validate_location
from tests.conftest import QUICK, trials

REPO = Path(__file__).resolve().parents[2]
FINGERPRINT = "corruption-test"
SCHEMAS = {
    "a": ZSetSchema.of([("k", pa.int64())], [("v", pa.int64())]),
    "s": ZSetSchema.of([("name", pa.string())], [("tag", pa.string())]),
    "t": ZSetSchema.of([("ts", pa.timestamp("us"))], [("n", pa.int64())]),
}
EPOCH = dt.datetime(2024, 1, 1)
HEADER, FOOTER = 64, 72

BATCH_KINDS = ["header", "block", "bloom", "schema", "index", "footer", "padding"]
DOC_KINDS = ["manifest", "checkpoint", "spine"]
SUBPROCESS_KINDS = {"block"} if QUICK else {"block", "footer", "manifest", "spine"}

Row = tuple[Any, ...]


# -- the location ---------------------------------------------------------------------------


@dataclass
class Layout:
    """Regions of one pristine batch file: (start, end) byte ranges."""

    size: int
    blocks: list[tuple[int, int, int]]  # (offset, message length, bloom length)
    schema: tuple[int, int]
    index: tuple[int, int]
    gaps: list[tuple[int, int, int | None]]  # unchecksummed padding, block it follows or None


@dataclass
class Built:
    root: Path
    compression: str | None
    checkpoints: list[str]
    spines: dict[str, dict[str, list[str]]]  # uuid -> op -> batch names
    expected: dict[str, dict[str, dict[Row, int]]]  # uuid -> op -> rows
    probes: dict[str, list[Any]]
    layouts: dict[str, Layout] = field(default_factory=dict)


def _key_value(op: str, rng: np.random.Generator, n: int) -> dict[str, Any]:
    if op == "a":
        return {"k": rng.integers(0, 400, n), "v": rng.integers(0, 3, n)}
    if op == "s":
        return {
            "name": [f"user-{x:04d}" for x in rng.integers(0, 300, n)],
            "tag": [["red", "green", "blue"][x] for x in rng.integers(0, 3, n)],
        }
    minutes = rng.integers(0, 600, n)
    return {"ts": [EPOCH + dt.timedelta(minutes=int(m)) for m in minutes], "n": minutes % 4}


def _build(root: Path, compression: str | None) -> Built:
    settings = EngineSettings(block_rows=32, compression=compression, merge_fanout=6)
    rng = np.random.default_rng(20240601)
    ref: dict[str, dict[Row, int]] = {op: {} for op in SCHEMAS}
    bound: dict[str, Row] = {}
    built = Built(root, compression, [], {}, {}, {})
    inserts_per_step = [2, 2, 2, 1]  # with fanout 6: shared files, a merge, then sharing again
    with StorageLocation.open(str(root), fingerprint=FINGERPRINT, settings=settings) as loc:
        spines = {op: loc.spine(op, s) for op, s in SCHEMAS.items()}
        for step, inserts in enumerate(inserts_per_step):
            for _ in range(inserts):
                for op, sp in spines.items():
                    n = 120 if op != "s" else 90
                    w = rng.choice([1, 1, 1, -1], n)
                    b = Batch.from_columns(SCHEMAS[op], _key_value(op, rng, n), w)
                    for r, wt in b.to_dict().items():
                        ref[op][r] = ref[op].get(r, 0) + wt
                    sp.insert(b)
                    sp.wait_idle()
            bound["t"] = (EPOCH + dt.timedelta(minutes=40 * (step + 1)),)
            spines["t"].truncate_below(bound["t"])
            uid = loc.commit(identifier=f"step-{step}", step=step, metadata={"offset": step * 7})
            built.checkpoints.append(uid)
            built.expected[uid] = {
                op: {
                    r: w
                    for r, w in rows.items()
                    if w != 0 and (op not in bound or r[: len(bound[op])] >= bound[op])
                }
                for op, rows in ref.items()
            }
    with StorageLocation.open(str(root), fingerprint=FINGERPRINT) as loc:
        pass  # a normal open cleans up; every batch file left is referenced
    (root / "LOCK").unlink()
    with StorageLocation.open(str(root), checkpoint="none", read_only=True) as loc:
        for uid in built.checkpoints:
            built.spines[uid] = {op: m.batches for op, m in loc.checkpoint_spines(uid).items()}
    names = sorted(n for n in os.listdir(root) if n.endswith(".batch"))
    built.layouts = {n: _layout(root / n) for n in names}
    prng = np.random.default_rng(7)
    for op in SCHEMAS:
        keys = sorted({r[0] for rows in built.expected.values() for r in rows[op]})
        some = [keys[i] for i in prng.choice(len(keys), 40, replace=False)]
        absent: list[Any] = {
            "a": [1000, -5],
            "s": ["nobody", "user-9999"],
            "t": [EPOCH - dt.timedelta(days=1), EPOCH + dt.timedelta(days=30)],
        }[op]
        built.probes[op] = some + absent
    return built


def _layout(path: Path) -> Layout:
    data = path.read_bytes()
    size = len(data)
    s_off, s_len, i_off, i_len = struct.unpack_from("<QQQQ", data, size - FOOTER)
    cache = BufferCache(1 << 20)
    try:
        bf = BatchFile(PosixFileLayer(), str(path), cache)
        blocks = [
            (int(o), int(n), int(b))
            for o, n, b in zip(bf._offsets, bf._lengths, bf._bloom_lengths, strict=True)
        ]
    finally:
        cache.close()
    regions: list[tuple[int, int, int | None]] = [(0, HEADER, None)]
    regions += [(o, o + n + b, i) for i, (o, n, b) in enumerate(blocks)]
    regions += [(s_off, s_off + s_len, None), (i_off, i_off + i_len, None)]
    regions += [(size - FOOTER, size, None)]
    regions.sort()
    gaps = [(a[1], b[0], a[2]) for a, b in itertools.pairwise(regions) if b[0] > a[1]]
    return Layout(size, blocks, (s_off, s_off + s_len), (i_off, i_off + i_len), gaps)


@pytest.fixture(scope="module", params=[None, "lz4"], ids=["plain", "lz4"])
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp(f"pristine-{request.param}") / "loc"
    b = _build(root, request.param)
    assert validate_location(root).problems == []
    # the pristine copy reads back exactly as the reference model says
    for uid in b.checkpoints:
        assert _read_checkpoint(b, root, uid) == {op: b.expected[uid][op] for op in SCHEMAS}
    assert len(b.layouts) >= 10
    assert any(len(users) > 1 for users in _users(b).values()), "no file shared by checkpoints"
    return b


def _users(b: Built) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for uid, ops in b.spines.items():
        for names in ops.values():
            for n in names:
                out.setdefault(n, set()).add(uid)
    return out


def _read_checkpoint(b: Built, root: Path, uid: str) -> dict[str, dict[Row, int]]:
    with StorageLocation.open(
        str(root), fingerprint=FINGERPRINT, checkpoint=uid, read_only=True
    ) as loc:
        return {op: loc.spine(op, s).to_batch().to_dict() for op, s in SCHEMAS.items()}


# -- damage ---------------------------------------------------------------------------------


@dataclass
class Damage:
    target: Path
    block: int | None  # the block validate must name, when the damage is in one
    uncovered: bool  # only bytes no checksum covers were touched
    in_doc_trailer: bool = False  # JSON docs: only the checksum trailer was touched


def _region(
    b: Built, name: str, kind: str, rng: np.random.Generator
) -> tuple[int, int, int | None]:
    lay = b.layouts[name]
    if kind == "header":
        return 0, HEADER, None
    if kind == "footer":
        return lay.size - FOOTER, lay.size, None
    if kind == "schema":
        return lay.schema[0], lay.schema[1], None
    if kind == "index":
        return lay.index[0], lay.index[1], None
    if kind == "padding":
        gap = lay.gaps[int(rng.integers(len(lay.gaps)))]
        return gap
    i = int(rng.integers(len(lay.blocks)))
    off, n, nb = lay.blocks[i]
    if kind == "block":
        return off, off + n, i
    assert kind == "bloom" and nb > 0
    return off + n, off + n + nb, i


def _doc_target(b: Built, root: Path, kind: str, rng: np.random.Generator) -> tuple[Path, str]:
    """A metadata document and the checkpoint it belongs to ("" for the manifest)."""
    if kind == "manifest":
        return root / "checkpoints.manifest", ""
    uid = b.checkpoints[int(rng.integers(len(b.checkpoints)))]
    if kind == "checkpoint":
        return root / uid / "checkpoint.json", uid
    op = sorted(SCHEMAS)[int(rng.integers(len(SCHEMAS)))]
    return root / uid / f"spine-{op}.json", uid


def _damage(b: Built, root: Path, kind: str, mode: str, rng: np.random.Generator) -> Damage:
    if kind in DOC_KINDS:
        target, _ = _doc_target(b, root, kind, rng)
        data = bytearray(target.read_bytes())
        trailer = data.rfind(b"\ncrc32 ")
        if mode == "truncate":
            target.write_bytes(bytes(data[: int(rng.integers(0, len(data)))]))
            return Damage(target, None, uncovered=False)
        pos = _flip(data, 0, len(data), rng)
        target.write_bytes(bytes(data))
        return Damage(target, None, uncovered=False, in_doc_trailer=min(pos) > trailer)
    names = sorted(n for n, lay in b.layouts.items() if kind != "padding" or lay.gaps)
    name = names[int(rng.integers(len(names)))]
    target = root / name
    lo, hi, block = _region(b, name, kind, rng)
    data = bytearray(target.read_bytes())
    if mode == "truncate":
        target.write_bytes(bytes(data[: int(rng.integers(lo, hi))]))
        return Damage(target, None, uncovered=False)
    _flip(data, lo, hi, rng)
    target.write_bytes(bytes(data))
    return Damage(target, block, uncovered=kind == "padding")


def _flip(data: bytearray, lo: int, hi: int, rng: np.random.Generator) -> list[int]:
    n = min(int(rng.integers(1, 4)), hi - lo)
    positions = [int(p) for p in rng.choice(np.arange(lo, hi), n, replace=False)]
    for p in positions:
        data[p] ^= int(rng.integers(1, 256))
    return positions


# -- checks ---------------------------------------------------------------------------------


def _same(a: str | Path, b: str | Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _check_validate(root: Path, d: Damage) -> None:
    report = validate_location(root)
    named = [p for p in report.problems if _same(p.path, d.target)]
    assert named, f"validate missed damage to {d.target.name}: {report.problems}"
    if d.block is not None:
        assert any(p.block == d.block for p in named), (d.block, named)


_runner = CliRunner()


def _check_cli(root: Path, d: Damage, subprocess_run: bool) -> None:
    if subprocess_run:
        spindle = Path(sys.executable).with_name("spindle")
        cmd = [str(spindle)] if spindle.exists() else [sys.executable, "-m", "spindle_cli.main"]
        proc = subprocess.run(
            [*cmd, "storage", "validate", str(root)],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    else:
        res = _runner.invoke(app, ["storage", "validate", str(root)])
        code, out, err = res.exit_code, res.stdout, res.stderr
    assert code == 1, (code, out, err)
    assert d.target.name in out
    assert "Traceback" not in out + err


def _touches(b: Built, d: Damage, uid: str, op: str) -> bool:
    """Whether reading spine `op` of checkpoint `uid` depends on the damaged file."""
    name, parent = d.target.name, d.target.parent.name
    if name == "checkpoints.manifest":
        return True
    if name == "checkpoint.json" or name.startswith("spine-"):
        return parent == uid  # restoring a checkpoint reads its metadata and all its spines
    return name in b.spines[uid][op]


def _check_engine(b: Built, root: Path, d: Damage) -> None:
    for uid in b.checkpoints:
        try:
            loc = StorageLocation.open(
                str(root), fingerprint=FINGERPRINT, checkpoint=uid, read_only=True
            )
        except StorageError as e:
            _expect_named(e, d, f"open {uid}")
            # opening reads the manifest and the checkpoint's documents, never batch files
            assert d.target.suffix == ".json" or d.target.name == "checkpoints.manifest", e
            assert _touches(b, d, uid, "a"), f"open {uid} raised: {e}"
            continue
        with loc:
            for op, schema in SCHEMAS.items():
                _check_spine(b, d, loc, uid, op, schema)


def _check_spine(
    b: Built, d: Damage, loc: StorageLocation, uid: str, op: str, schema: ZSetSchema
) -> None:
    want = b.expected[uid][op]
    must_raise = _touches(b, d, uid, op) and not d.uncovered and not d.in_doc_trailer
    raised = False
    try:
        sp = loc.spine(op, schema)
        probes = b.probes[op]
        got = sp.seek(probes).to_dict()
        keys = set(probes)
        assert got == {r: w for r, w in want.items() if r[0] in keys}, f"wrong seek {uid}/{op}"
        assert sp.to_batch().to_dict() == want, f"wrong answer from {uid}/{op}"
    except StorageError as e:
        _expect_named(e, d, f"{uid}/{op}")
        raised = True
    if must_raise:
        assert raised, f"read of {uid}/{op} did not notice damage to {d.target.name}"
    if d.uncovered:
        assert not raised


def _expect_named(e: StorageError, d: Damage, what: str) -> None:
    assert isinstance(e, CorruptionError), f"{what}: {type(e).__name__}: {e}"
    assert _same(e.path, d.target), f"{what}: error names {e.path}, damage in {d.target}"
    if d.uncovered:
        raise AssertionError(f"{what}: damage no checksum covers raised {e}")


def _fresh(b: Built, tmp_path: Path, i: int) -> Path:
    root = tmp_path / f"t{i}"
    shutil.copytree(b.root, root)
    return root


def _run(b: Built, tmp_path: Path, kind: str, mode: str, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for i in range(n):
        root = _fresh(b, tmp_path, i)
        d = _damage(b, root, kind, mode, rng)
        _check_validate(root, d)
        # the real `spindle` command for the first trial of a few cases, CliRunner otherwise
        sub = i == 0 and b.compression is None and kind in SUBPROCESS_KINDS
        _check_cli(root, d, subprocess_run=sub)
        _check_engine(b, root, d)
        shutil.rmtree(root)


@pytest.mark.parametrize("kind", BATCH_KINDS + DOC_KINDS)
def test_flipped_bytes_are_detected(built: Built, tmp_path: Path, kind: str) -> None:
    seed = 1000 + (BATCH_KINDS + DOC_KINDS).index(kind) + (50 if built.compression else 0)
    _run(built, tmp_path, kind, "flip", trials(8, 2), seed)


@pytest.mark.parametrize("kind", [k for k in BATCH_KINDS if k != "padding"] + DOC_KINDS)
def test_truncation_is_detected(built: Built, tmp_path: Path, kind: str) -> None:
    seed = 2000 + (BATCH_KINDS + DOC_KINDS).index(kind) + (50 if built.compression else 0)
    _run(built, tmp_path, kind, "truncate", trials(6, 2), seed)


@pytest.mark.parametrize("kind", ["batch", "checkpoint", "spine", "checkpoint-dir", "manifest"])
def test_missing_files_are_reported_and_refused(built: Built, tmp_path: Path, kind: str) -> None:
    """A file a checkpoint needs is gone: validate names it; reading the checkpoint raises a
    StorageError (never a bare OSError, never a partial state)."""
    root = _fresh(built, tmp_path, 0)
    uid = built.checkpoints[-1]
    target = {
        "batch": root / built.spines[uid]["a"][0],
        "checkpoint": root / uid / "checkpoint.json",
        "spine": root / uid / "spine-s.json",
        "checkpoint-dir": root / uid / "checkpoint.json",
        "manifest": root / "checkpoints.manifest",
    }[kind]
    if kind == "checkpoint-dir":
        shutil.rmtree(target.parent)
    else:
        target.unlink()
    report = validate_location(root)
    assert any(_same(p.path, target) for p in report.problems), report.problems
    res = _runner.invoke(app, ["storage", "validate", str(root)])
    assert res.exit_code == 1, res.output
    try:
        with StorageLocation.open(
            str(root), fingerprint=FINGERPRINT, checkpoint=uid, read_only=True
        ) as loc:
            for op, schema in SCHEMAS.items():
                assert loc.spine(op, schema).to_batch().to_dict() == built.expected[uid][op]
    except StorageError:
        pass
    else:
        raise AssertionError(f"checkpoint {uid} opened although {target.name} is missing")
