"""`spindle storage inspect|validate|checkpoints|dump` on real locations.

Exit codes: 0 clean, 1 corrupt (each problem printed with file and block), 2 bad usage or a
missing path; never a traceback. The commands are read-only, so they work while a pipeline
(here: another process) holds the location's lock.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner, Result

from spindle_cli.main import app
from storage_engine import Batch, EngineSettings, LockedError, StorageLocation, ZSetSchema
from storage_engine.tools import dump_batch_file

REPO = Path(__file__).resolve().parents[2]
FP = "cli-test"
NUM = ZSetSchema.of([("k", pa.int64())], [("v", pa.int64())])
TXT = ZSetSchema.of([("word", pa.string())])

runner = CliRunner()


def run(*args: str) -> Result:
    res = runner.invoke(app, ["storage", *args])
    assert "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res


def spindle(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("spindle")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "spindle_cli.main"]
    return subprocess.run(
        [*cmd, "storage", *args], capture_output=True, text=True, cwd=REPO, timeout=120, **kw
    )


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli") / "loc"
    rng = np.random.default_rng(3)
    settings = EngineSettings(block_rows=20, compression="zstd", merge_fanout=8)
    with StorageLocation.open(str(root), fingerprint=FP, settings=settings) as loc:
        num, txt = loc.spine("num", NUM), loc.spine("txt", TXT)
        for step in range(1, 3):
            for _ in range(2):
                num.insert(
                    Batch.from_columns(
                        NUM, {"k": rng.integers(0, 300, 100), "v": rng.integers(0, 2, 100)}
                    )
                )
                words = [f"w{x}" for x in rng.integers(0, 50, 30)]
                txt.insert(Batch.from_columns(TXT, {"word": words}))
                num.wait_idle()
                txt.wait_idle()
            loc.commit(identifier=f"cp-{step}", step=step)
    return root


@pytest.fixture
def loc(pristine: Path, tmp_path: Path) -> Path:
    root = tmp_path / "loc"
    shutil.copytree(pristine, root)
    return root


def checkpoint_uuids(root: Path) -> list[str]:
    with StorageLocation.open(str(root), checkpoint="none", read_only=True) as s:
        return [c.uuid for c in s.list_checkpoints()]


def batch_names(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob("*.batch"))


def flip_block(path: Path, block: int) -> None:
    """Flip one byte in the middle of a block's Arrow message."""
    b = dump_batch_file(path).blocks[block]
    data = bytearray(path.read_bytes())
    data[b.offset + b.length // 2] ^= 0x5A
    path.write_bytes(bytes(data))


# -- inspect --------------------------------------------------------------------------------


def test_inspect_human_and_json(loc: Path) -> None:
    uids = checkpoint_uuids(loc)
    res = run("inspect", str(loc))
    assert res.exit_code == 0, res.output
    for u in uids:
        assert u in res.stdout
    assert "cp-1" in res.stdout and "cp-2" in res.stdout
    for n in batch_names(loc):
        assert n in res.stdout
    res = run("inspect", str(loc), "--json")
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert [c["uuid"] for c in doc["checkpoints"]] == uids
    assert [c["identifier"] for c in doc["checkpoints"]] == ["cp-1", "cp-2"]
    latest = doc["checkpoints"][-1]
    assert {s["op_id"] for s in latest["spines"]} == {"num", "txt"}
    for s in latest["spines"]:
        assert s["batch_count"] == len(s["batches"]) > 0 and s["rows"] > 0 and s["bytes"] > 0
    files = {f["name"]: f for f in doc["batch_files"]}
    assert set(files) == set(batch_names(loc))
    assert all(f["referenced_by"] for f in files.values())
    assert doc["unreferenced"] == [] and doc["mut_files"] == [] and doc["problems"] == []
    shared = [f for f in files.values() if len(f["referenced_by"]) == 2]
    assert shared, "the second checkpoint shares files with the first"
    assert doc["total_bytes"] >= doc["batch_bytes"] == sum(f["size"] for f in files.values())


def test_inspect_lists_leftovers_without_removing_them(loc: Path) -> None:
    src = loc / batch_names(loc)[0]
    stray = loc / ("ab" * 16 + ".batch")
    shutil.copy(src, stray)
    (loc / ("cd" * 16 + ".batch.mut")).write_bytes(b"partial")
    orphan = loc / "00000000-0000-4000-8000-000000000000"
    orphan.mkdir()
    res = run("inspect", str(loc), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["unreferenced"] == [stray.name]
    assert doc["mut_files"] == ["cd" * 16 + ".batch.mut"]
    assert doc["orphan_dirs"] == [orphan.name]
    human = run("inspect", str(loc))
    assert stray.name in human.stdout and ".batch.mut" in human.stdout
    # an intact unreferenced file is not corruption; a damaged one is reported
    assert run("validate", str(loc)).exit_code == 0
    flip_block(stray, 0)
    res = run("validate", str(loc))
    assert res.exit_code == 1
    assert f"{stray.name} block 0" in res.stdout and "unreferenced" in res.stdout
    assert stray.exists() and orphan.exists()  # read-only: nothing cleaned up


# -- validate -------------------------------------------------------------------------------


def test_validate_clean(loc: Path) -> None:
    res = run("validate", str(loc))
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("OK ")
    res = run("validate", str(loc), "--json")
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert doc["ok"] is True and doc["problems"] == []
    assert doc["checkpoints_checked"] == 2
    assert doc["files_checked"] == len(batch_names(loc))
    assert doc["blocks_checked"] > doc["files_checked"]


def test_validate_reports_every_problem_with_file_and_block(loc: Path) -> None:
    names = batch_names(loc)
    many = max(names, key=lambda n: len(dump_batch_file(loc / n).blocks))
    nblocks = len(dump_batch_file(loc / many).blocks)
    assert nblocks >= 3
    flip_block(loc / many, 0)
    flip_block(loc / many, nblocks - 1)
    other = next(n for n in names if n != many)
    data = bytearray((loc / other).read_bytes())
    data[-20] ^= 1  # the footer
    (loc / other).write_bytes(bytes(data))
    res = run("validate", str(loc))
    assert res.exit_code == 1
    out = res.stdout
    assert f"CORRUPT {many} block 0:" in out
    assert f"CORRUPT {many} block {nblocks - 1}:" in out
    assert f"CORRUPT {other}:" in out and "footer" in out
    assert "FAILED" in out
    res = run("validate", str(loc), "--json")
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert doc["ok"] is False
    got = {(os.path.basename(p["path"]), p["block"]) for p in doc["problems"]}
    assert {(many, 0), (many, nblocks - 1), (other, None)} <= got


def test_validate_corrupt_manifest_and_metadata(loc: Path) -> None:
    uid = checkpoint_uuids(loc)[0]
    spine_doc = loc / uid / "spine-txt.json"
    spine_doc.write_bytes(spine_doc.read_bytes()[:-5])
    res = run("validate", str(loc))
    assert res.exit_code == 1
    assert f"CORRUPT {uid}/spine-txt.json:" in res.stdout
    manifest = loc / "checkpoints.manifest"
    data = bytearray(manifest.read_bytes())
    data[10] ^= 0x20
    manifest.write_bytes(bytes(data))
    for cmd in ("validate", "inspect", "checkpoints"):
        res = run(cmd, str(loc))
        assert res.exit_code == 1, (cmd, res.output)
        assert "checkpoints.manifest" in res.stdout, cmd
        assert "checksum mismatch" in res.stdout, cmd


def test_validate_missing_batch_file(loc: Path) -> None:
    victim = batch_names(loc)[0]
    (loc / victim).unlink()
    res = run("validate", str(loc), "--json")
    assert res.exit_code == 1
    probs = json.loads(res.stdout)["problems"]
    assert any(os.path.basename(p["path"]) == victim and "missing" in p["message"] for p in probs)


# -- checkpoints ----------------------------------------------------------------------------


def test_checkpoints_human_and_json(loc: Path) -> None:
    uids = checkpoint_uuids(loc)
    res = run("checkpoints", str(loc))
    assert res.exit_code == 0, res.output
    lines = res.stdout
    assert lines.index(uids[0]) < lines.index(uids[1])
    assert "cp-1" in lines and "cp-2" in lines
    res = run("checkpoints", str(loc), "--json")
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert [c["uuid"] for c in doc["checkpoints"]] == uids
    assert [c["step"] for c in doc["checkpoints"]] == [1, 2]
    assert doc["checkpoints"][1]["parent"] == uids[0]
    assert doc["problems"] == []


def test_empty_directory(tmp_path: Path) -> None:
    res = run("checkpoints", str(tmp_path))
    assert res.exit_code == 0 and "no checkpoints" in res.stdout
    assert run("validate", str(tmp_path)).exit_code == 0
    doc = json.loads(run("inspect", str(tmp_path), "--json").stdout)
    assert doc["checkpoints"] == [] and doc["manifest_present"] is False


# -- dump -----------------------------------------------------------------------------------


def test_dump_human_and_json(loc: Path) -> None:
    with StorageLocation.open(str(loc), fingerprint=FP, read_only=True) as s:
        files = {op: m.batches for op, m in s.checkpoint_spines(checkpoint_uuids(loc)[-1]).items()}
        expected = s.spine("num", NUM).to_batch()
    path = loc / files["num"][0]
    res = run("dump", str(path), "--limit", "3")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "compression zstd" in out and "bloom yes" in out
    assert "k int64" in out and "v int64" in out and "__weight" in out
    res = run("dump", str(path), "--json", "--limit", "7")
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert doc["header"]["compression"] == "zstd" and doc["header"]["format_version"] >= 1
    assert [c["name"] for c in doc["schema"]["keys"]] == ["k"]
    assert len(doc["rows"]) == 7
    assert sum(b["rows"] for b in doc["blocks"]) == doc["header"]["rows"]
    assert doc["blocks"][0]["offset"] == 64
    # the file's first rows, in order; they are the first rows of a batch file, which alone
    # need not match the spine's state (later batches may retract them)
    keys = [(r["k"], r["v"]) for r in doc["rows"]]
    assert keys == sorted(keys) and all(r["__weight"] != 0 for r in doc["rows"])
    assert len(expected) > 0
    txt = loc / files["txt"][0]
    doc = json.loads(run("dump", str(txt), "--json", "--limit", "1000").stdout)
    assert len(doc["rows"]) == doc["header"]["rows"] and doc["schema"]["values"] == []


def test_dump_shows_every_digit_of_a_decimal(tmp_path: Path) -> None:
    """A decimal is shown with all its digits at its scale, as the API gives it (Python's
    own text would be 0E-8)."""
    schema = ZSetSchema.of([("d", pa.decimal128(20, 8))])
    with StorageLocation.open(str(tmp_path), fingerprint=FP) as s:
        rows = pa.table({"d": [Decimal(0), Decimal("-12.5")], "__weight": [1, 1]})
        s.spine("dec", schema).insert(Batch.from_arrow(schema, rows.cast(schema.arrow)))
        s.commit()
        (name,) = s.checkpoint_spines(checkpoint_uuids(tmp_path)[-1])["dec"].batches
    out = run("dump", str(tmp_path / name)).stdout
    assert "0.00000000" in out and "-12.50000000" in out and "E-8" not in out
    doc = json.loads(run("dump", str(tmp_path / name), "--json").stdout)
    assert [r["d"] for r in doc["rows"]] == ["-12.50000000", "0.00000000"]


def test_dump_corrupt_file(loc: Path) -> None:
    path = loc / batch_names(loc)[0]
    flip_block(path, 0)
    res = run("dump", str(path))
    assert res.exit_code == 1
    assert "block 0" in res.stdout and "checksum" in res.stdout
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    res = run("dump", str(path), "--json")
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert doc["header"] is None and doc["problems"]


# -- usage ----------------------------------------------------------------------------------


@pytest.mark.parametrize("cmd", ["inspect", "validate", "checkpoints", "dump"])
def test_missing_path_exits_2(tmp_path: Path, cmd: str) -> None:
    missing = tmp_path / "nope"
    res = run(cmd, str(missing))
    assert res.exit_code == 2
    assert "error:" in res.stderr and "nope" in res.stderr
    assert res.stdout == ""
    res = run(cmd, str(missing), "--json")
    assert res.exit_code == 2


def test_wrong_kind_of_path_and_usage_errors(loc: Path) -> None:
    a_file = loc / batch_names(loc)[0]
    assert run("validate", str(a_file)).exit_code == 2
    assert "not a directory" in run("inspect", str(a_file)).stderr
    assert run("dump", str(loc)).exit_code == 2
    assert run("dump", str(a_file), "--limit", "-1").exit_code == 2
    assert run("validate").exit_code == 2
    assert run("frobnicate", str(loc)).exit_code == 2


# -- concurrency ----------------------------------------------------------------------------

_HOLDER = """
import sys
from storage_engine import StorageLocation
loc = StorageLocation.open(sys.argv[1], fingerprint=sys.argv[2])
print("ready", flush=True)
sys.stdin.read()  # hold the lock until the test closes our stdin
loc.close()
"""


def test_tools_work_while_another_process_holds_the_lock(loc: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(loc), FP],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(LockedError):
            StorageLocation.open(str(loc), fingerprint=FP)
        lock_before = (loc / "LOCK").read_bytes()
        names = sorted(os.listdir(loc))
        proc = spindle("validate", str(loc), "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert json.loads(proc.stdout)["ok"] is True
        proc = spindle("inspect", str(loc))
        assert proc.returncode == 0, proc.stderr
        assert "cp-2" in proc.stdout
        for cmd in ("checkpoints", "inspect", "validate"):
            assert run(cmd, str(loc), "--json").exit_code == 0, cmd
        assert run("dump", str(loc / batch_names(loc)[0])).exit_code == 0
        assert (loc / "LOCK").read_bytes() == lock_before == str(holder.pid).encode()
        assert sorted(os.listdir(loc)) == names
        with pytest.raises(LockedError):  # still held: the tools never took or broke it
            StorageLocation.open(str(loc), fingerprint=FP)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
    assert holder.returncode == 0


def test_subprocess_exit_codes(loc: Path) -> None:
    proc = spindle("validate", str(loc))
    assert proc.returncode == 0 and proc.stdout.startswith("OK "), proc.stdout + proc.stderr
    flip_block(loc / batch_names(loc)[0], 0)
    proc = spindle("validate", str(loc))
    assert proc.returncode == 1
    assert f"CORRUPT {batch_names(loc)[0]} block 0:" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    proc = spindle("checkpoints", str(loc / "missing"))
    assert proc.returncode == 2 and "no such directory" in proc.stderr
    assert "Traceback" not in proc.stderr
