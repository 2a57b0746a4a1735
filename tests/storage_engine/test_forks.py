"""Forks on one file system: a location forked at an older checkpoint shares its files by
hard link; gc and delete of either location leave the other readable and resumable."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from storage_engine import CheckpointNotFoundError, StorageLocation
from storage_engine.forks import ForkError, fork_location
from storage_engine.input_log import LOG_DIR, InputLog
from tests.storage_engine.test_location import INT, open_loc, referenced, rows, state

SCHEMA = pa.schema([("k", pa.int64())])


def model(hi: int) -> dict[Any, int]:
    return {(k, k % 3): 1 for k in range(hi)}


def origin_with_history(path: Path) -> tuple[list[str], InputLog]:
    """Three checkpoints: rows [0, 100), [0, 200), [0, 300); an input log of 3 segments."""
    log = InputLog(str(path / LOG_DIR / "s"), SCHEMA)
    uids = []
    with open_loc(path) as loc:
        sp = loc.spine("op", INT)
        for i in range(3):
            sp.insert(rows(i * 100, (i + 1) * 100))
            log.append(pa.table({"k": list(range(i * 10, (i + 1) * 10))}))
            uids.append(loc.commit(identifier=f"c{i}", step=i + 1, metadata={"offset": i}))
    return uids, log


def links(path: Path, names: set[str]) -> dict[str, int]:
    return {n: os.stat(path / n).st_nlink for n in names}


def test_fork_shares_files_and_survives_the_origins_gc_and_delete(tmp_path: Path) -> None:
    a, f = tmp_path / "a", tmp_path / "f"
    uids, _ = origin_with_history(a)
    with open_loc(a, read_only=True) as loc:
        files = set().union(*(m.batches for m in loc.checkpoint_spines(uids[0]).values()))
    assert files
    assert set(links(a, files).values()) == {1}

    res = fork_location(str(a), str(f), "c0")  # an identifier; a uuid works as well
    assert (res.checkpoint.uuid, res.checkpoint.step, res.checkpoint.parent) == (
        uids[0],
        1,
        None,
    )
    assert res.linked_files == len(files) + 3  # the batch files and the 3 log segments
    assert set(links(a, files).values()) == {2} == set(links(f, files).values())
    assert all(os.stat(a / n).st_ino == os.stat(f / n).st_ino for n in files)
    segs = sorted(os.listdir(f / LOG_DIR / "s"))
    assert len(segs) == 3 and all(os.stat(f / LOG_DIR / "s" / s).st_nlink == 2 for s in segs)

    with open_loc(f) as fork:
        assert [c.uuid for c in fork.list_checkpoints()] == [uids[0]]
        assert fork.metadata == {"offset": 0} and fork.step == 1
        assert state(fork) == model(100)
    # The origin collects the forked checkpoint, then goes altogether.
    with open_loc(a) as loc:
        loc.delete_checkpoint(uids[0])
        loc.gc_checkpoint()
        assert [c.uuid for c in loc.list_checkpoints()] == [uids[2]]
        assert state(loc) == model(300)
    shutil.rmtree(a)
    with open_loc(f) as fork:  # readable and resumable
        assert state(fork) == model(100)
        fork.spine("op", INT).insert(rows(100, 150))
        mine = fork.commit(step=2)
        assert set(links(f, referenced(fork)).values()) == {1}
    with open_loc(f, checkpoint=mine) as fork:
        assert state(fork) == model(150)
        assert [c.step for c in fork.list_checkpoints()] == [1, 2]
    log = InputLog(str(f / LOG_DIR / "s"), SCHEMA)
    assert [r["k"] for b in log.read(10, 30) for r in b.to_pylist()] == list(range(10, 30))
    assert log.append(pa.table({"k": [99]})) == (30, 31)  # the fork's own log from here


def test_the_origin_survives_the_forks_gc_and_delete(tmp_path: Path) -> None:
    a, f = tmp_path / "a", tmp_path / "f"
    uids, log = origin_with_history(a)
    fork_location(str(a), str(f), uids[1])
    with open_loc(f) as fork:
        assert state(fork) == model(200)
        fork.spine("op", INT).insert(rows(1000, 1010))
        fork.commit(step=3)
        fork.gc_checkpoint()  # the forked checkpoint goes
        assert [c.step for c in fork.list_checkpoints()] == [3]
    shutil.rmtree(f)
    with open_loc(a, checkpoint=uids[1]) as loc:
        assert state(loc) == model(200)
    with open_loc(a, checkpoint=uids[0]) as loc:
        assert state(loc) == model(100)
        files = set().union(*(m.batches for m in loc.checkpoint_spines(uids[1]).values()))
        assert set(links(a, files).values()) == {1}
    assert log.end() == 30


def test_fork_errors(tmp_path: Path) -> None:
    a, f = tmp_path / "a", tmp_path / "f"
    uids, _ = origin_with_history(a)
    with pytest.raises(CheckpointNotFoundError):
        fork_location(str(a), str(f), "nope")
    assert not f.exists()
    f.mkdir()
    (f / "x").write_text("")
    with pytest.raises(ForkError, match="not empty"):
        fork_location(str(a), str(f), uids[0])
    assert (f / "x").exists()
    with pytest.raises(CheckpointNotFoundError):
        fork_location(str(tmp_path / "none"), str(tmp_path / "g"), "latest")


def test_a_fork_of_a_running_origin(tmp_path: Path) -> None:
    """The origin stays open (locked, committing) while it is forked."""
    a, f = tmp_path / "a", tmp_path / "f"
    loc: StorageLocation = open_loc(a)
    try:
        sp = loc.spine("op", INT)
        sp.insert(rows(0, 100))
        first = loc.commit(step=1)
        sp.insert(rows(100, 200))
        loc.commit(step=2)
        fork_location(str(a), str(f), first)
        loc.delete_checkpoint(first)
    finally:
        loc.close()
    with open_loc(f) as fork:
        assert state(fork) == model(100)
