"""Storage locations: checkpoints, restore, gc/delete, fingerprints, locking, cleanup."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from storage_engine import (
    Batch,
    CheckpointNotFoundError,
    EngineSettings,
    FingerprintMismatchError,
    LockedError,
    ManifestMissingError,
    SchemaMismatchError,
    StorageError,
    StorageLocation,
    ZSetSchema,
)
from storage_engine.manifest import MANIFEST, decode, encode

from .strategies import CASES, batch_files

INT = CASES["int64"].schema
STR = CASES["string"].schema
ROOT = Path(__file__).resolve().parents[2]
SETTINGS = EngineSettings(block_rows=16, merge_base_rows=16, merge_fanout=4)


def open_loc(path: Path, fp: str = "fp", **kw: Any) -> StorageLocation:
    kw.setdefault("settings", SETTINGS)
    return StorageLocation.open(str(path), fingerprint=fp, **kw)


def rows(lo: int, hi: int, w: int = 1) -> Batch:
    return Batch.from_tuples(INT, [((k,), (k % 3,), w) for k in range(lo, hi)])


def state(loc: StorageLocation, op: str = "op", schema: ZSetSchema = INT) -> dict[Any, int]:
    return loc.spine(op, schema).to_batch().to_dict()


def referenced(loc: StorageLocation) -> set[str]:
    out: set[str] = set()
    for c in loc.list_checkpoints():
        for meta in loc.checkpoint_spines(c.uuid).values():
            out |= set(meta.batches)
    return out


def three_checkpoints(path: Path) -> tuple[list[str], list[dict[Any, int]]]:
    """Three checkpoints of one spine with different contents; returns uuids and states."""
    uids, states = [], []
    with open_loc(path) as loc:
        sp = loc.spine("op", INT)
        for i in range(3):
            sp.insert(rows(i * 100, i * 100 + 50))
            if i:
                sp.insert(rows(0, 10 * i, -1))
            loc.wait_idle()
            uids.append(loc.commit(identifier=f"c{i}", step=i + 1))
            states.append(sp.to_batch().to_dict())
    return uids, states


# -- commit and the manifest -----------------------------------------------------------------


def test_commit_lists_checkpoints_with_metadata(tmp_path: Path) -> None:
    with open_loc(tmp_path, fp="fp-A", clock=lambda: 1234.0) as loc:
        assert loc.list_checkpoints() == []
        sp = loc.spine("op", INT)
        sp.insert(rows(0, 40))
        a = loc.commit(identifier="first", step=7, metadata={"offset": 40})
        b = loc.commit()  # nothing changed
        sp.insert(rows(40, 60))
        c = loc.commit(identifier="third", step=9)
        cps = loc.list_checkpoints()
        assert [x.uuid for x in cps] == [a, b, c]
        for x in cps:
            assert str(uuidlib.UUID(x.uuid)) == x.uuid
            assert x.fingerprint == "fp-A"
            assert x.created_at == 1234.0
        assert [x.identifier for x in cps] == ["first", None, "third"]
        assert [x.step for x in cps] == [7, 7, 9]  # step defaults to the last one
        assert [x.parent for x in cps] == [None, a, b]
        for x in cps:
            metas = loc.checkpoint_spines(x.uuid)
            names = metas["op"].batches
            sizes = sum(os.path.getsize(tmp_path / n) for n in names)
            assert x.files == len(names) and x.total_bytes == sizes == metas["op"].bytes
            assert x.rows == metas["op"].rows
        assert cps[0].new_bytes == cps[0].total_bytes > 0
        assert cps[1].new_bytes == 0 and cps[1].total_bytes == cps[0].total_bytes
        assert 0 < cps[2].new_bytes < cps[2].total_bytes or cps[2].new_bytes == cps[2].total_bytes
        assert cps[2].rows == 60
        assert loc.step == 9
        assert os.path.isdir(tmp_path / a) and os.path.isdir(tmp_path / c)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".mut")]
    with open_loc(tmp_path, fp="fp-A") as loc:
        assert [x.uuid for x in loc.list_checkpoints()] == [a, b, c]
        assert loc.list_checkpoints()[0].created_at == 1234.0


def test_reopen_latest_by_uuid_by_identifier_and_none(tmp_path: Path) -> None:
    uids, states = three_checkpoints(tmp_path)
    with open_loc(tmp_path) as loc:
        assert loc.restored is not None and loc.restored.uuid == uids[2]
        assert loc.step == 3
        assert state(loc) == states[2]
    for i, uid in enumerate(uids):
        with open_loc(tmp_path, checkpoint=uid) as loc:
            assert state(loc) == states[i] and loc.step == i + 1
        with open_loc(tmp_path, checkpoint=f"c{i}") as loc:
            assert loc.restored is not None and loc.restored.uuid == uid
            assert state(loc) == states[i]
    for ref in ("none", None):
        with open_loc(tmp_path, checkpoint=ref) as loc:
            assert loc.restored is None and state(loc) == {}
            assert len(loc.list_checkpoints()) == 3


def test_identifier_names_the_newest_checkpoint_with_it(tmp_path: Path) -> None:
    with open_loc(tmp_path) as loc:
        sp = loc.spine("op", INT)
        sp.insert(rows(0, 5))
        loc.commit(identifier="x")
        sp.insert(rows(5, 10))
        second = loc.commit(identifier="x")
    with open_loc(tmp_path, checkpoint="x") as loc:
        assert loc.restored is not None and loc.restored.uuid == second
        assert len(state(loc)) == 10


def test_metadata_round_trip(tmp_path: Path) -> None:
    with open_loc(tmp_path) as loc:
        loc.spine("op", INT).insert(rows(0, 3))
        loc.commit(step=4, metadata={"sources": {"a": [1, 2]}, "note": "hi"})
    with open_loc(tmp_path) as loc:
        assert loc.metadata == {"sources": {"a": [1, 2]}, "note": "hi"}
        assert loc.step == 4


def test_parent_chain_follows_the_restored_checkpoint(tmp_path: Path) -> None:
    uids, _ = three_checkpoints(tmp_path)
    with open_loc(tmp_path, checkpoint=uids[0]) as loc:
        d = loc.commit()
        e = loc.commit()
        info = {c.uuid: c for c in loc.list_checkpoints()}
        assert info[d].parent == uids[0] and info[e].parent == d
        assert info[uids[1]].parent == uids[0] and info[uids[2]].parent == uids[1]
    with open_loc(tmp_path, checkpoint="none") as loc:
        f = loc.commit()
        assert loc.list_checkpoints()[-1].uuid == f
        assert loc.list_checkpoints()[-1].parent is None


def test_latest_is_the_head_of_the_timeline_a_restore_left(tmp_path: Path) -> None:
    """A restore to an older checkpoint moves "latest" to it before anything else happens:
    a run that then dies before its first commit resumes there, not at the newest
    checkpoint of the abandoned timeline (which stays restorable by name)."""
    uids, states = three_checkpoints(tmp_path)
    with open_loc(tmp_path, checkpoint=uids[0]) as loc:
        assert loc.head == uids[0]
        loc.spine("op", INT).insert(rows(1000, 1010))  # a step whose commit never happens
    with open_loc(tmp_path) as loc:
        assert loc.restored is not None and loc.restored.uuid == uids[0]
        assert state(loc) == states[0]
        loc.spine("op", INT).insert(rows(2000, 2005))
        d = loc.commit(step=2)
        assert loc.head == d
    with open_loc(tmp_path) as loc:
        assert loc.restored is not None and loc.restored.uuid == d
        assert [c.uuid for c in loc.list_checkpoints()] == [*uids, d]
    with open_loc(tmp_path, checkpoint=uids[2]) as loc:  # the other branch, by name
        assert state(loc) == states[2]
    with open_loc(tmp_path) as loc:
        assert loc.restored is not None and loc.restored.uuid == uids[2]


def test_starting_from_none_or_dropping_state_leaves_latest_empty(tmp_path: Path) -> None:
    uids, _ = three_checkpoints(tmp_path)
    with open_loc(tmp_path, checkpoint="none") as loc:
        assert loc.head is None
    with open_loc(tmp_path) as loc:
        assert loc.restored is None and state(loc) == {} and loc.step == 0
    with open_loc(tmp_path, checkpoint=uids[1]):
        pass
    with open_loc(tmp_path, fp="other", allow_state_drop=True) as loc:
        assert loc.restored is None and loc.head is None
    with open_loc(tmp_path, fp="other") as loc:
        assert loc.restored is None


def test_a_manifest_without_a_head_resumes_its_newest(tmp_path: Path) -> None:
    """Locations written before heads existed: "latest" is still their newest checkpoint."""
    uids, states = three_checkpoints(tmp_path)
    path = tmp_path / MANIFEST
    doc = decode(path.read_bytes(), str(path))
    assert doc.pop("head") == uids[2]
    path.write_bytes(encode(doc))
    with open_loc(tmp_path) as loc:
        assert loc.restored is not None and loc.restored.uuid == uids[2]
        assert loc.head == uids[2] and state(loc) == states[2]


def test_gc_keeps_the_head_and_deleting_it_passes_latest_to_its_ancestor(
    tmp_path: Path,
) -> None:
    uids, _ = three_checkpoints(tmp_path)
    with open_loc(tmp_path, checkpoint=uids[1]) as loc:
        assert loc.gc_checkpoint().deleted == [uids[0]]
        assert loc.gc_checkpoint().deleted == []  # uids[1] is the head, uids[2] the newest
        loc.delete_checkpoint(uids[1])
        assert loc.head is None  # no ancestor survives
    with open_loc(tmp_path) as loc:
        assert loc.restored is None
    uids2, states2 = three_checkpoints(tmp_path / "b")
    with open_loc(tmp_path / "b") as loc:
        loc.delete_checkpoints([uids2[2], uids2[1]])
        assert loc.head == uids2[0]
    with open_loc(tmp_path / "b") as loc:
        assert loc.restored is not None and loc.restored.uuid == uids2[0]
        assert state(loc) == states2[0]


def test_unknown_checkpoint(tmp_path: Path) -> None:
    three_checkpoints(tmp_path)
    for ref in (str(uuidlib.uuid4()), "no-such-identifier"):
        with pytest.raises(CheckpointNotFoundError):
            open_loc(tmp_path, checkpoint=ref)
    with open_loc(tmp_path) as loc:
        with pytest.raises(CheckpointNotFoundError):
            loc.delete_checkpoint(str(uuidlib.uuid4()))
        with pytest.raises(CheckpointNotFoundError):
            loc.delete_checkpoint("c0")  # identifiers do not name a checkpoint to delete
        with pytest.raises(CheckpointNotFoundError):
            loc.checkpoint_spines(str(uuidlib.uuid4()))
    # the failed opens released the lock
    open_loc(tmp_path).close()


# -- gc and delete ---------------------------------------------------------------------------


def test_gc_deletes_the_oldest_and_exactly_its_unshared_files(tmp_path: Path) -> None:
    uids, states = three_checkpoints(tmp_path)
    with open_loc(tmp_path) as loc:
        refs = {u: set(loc.checkpoint_spines(u)["op"].batches) for u in uids}
        before = batch_files(str(tmp_path))
        assert before == set().union(*refs.values())
        doomed = refs[uids[0]] - refs[uids[1]] - refs[uids[2]] - loc.spine("op", INT).live_files()
        sizes = {n: os.path.getsize(tmp_path / n) for n in before}
        res = loc.gc_checkpoint()
        assert res.deleted == [uids[0]]
        assert res.files_removed == len(doomed)
        assert res.bytes_freed == sum(sizes[n] for n in doomed)
        assert batch_files(str(tmp_path)) == before - doomed
        assert [c.uuid for c in loc.list_checkpoints()] == uids[1:]
        assert not os.path.exists(tmp_path / uids[0])
        assert state(loc) == states[2]  # live state still readable
    with open_loc(tmp_path, checkpoint=uids[1]) as loc:
        assert state(loc) == states[1]
    with pytest.raises(CheckpointNotFoundError):
        open_loc(tmp_path, checkpoint=uids[0])


def test_gc_never_deletes_the_newest_and_honours_protect(tmp_path: Path) -> None:
    uids, states = three_checkpoints(tmp_path)
    with open_loc(tmp_path) as loc:
        res = loc.gc_checkpoint(protect=[uids[0]])
        assert res.deleted == [uids[1]]
        res = loc.gc_checkpoint(protect=[uids[0]])
        assert res.deleted == [] and res.files_removed == 0 and res.bytes_freed == 0
        assert [c.uuid for c in loc.list_checkpoints()] == [uids[0], uids[2]]
        assert loc.gc_checkpoint().deleted == [uids[0]]
        for _ in range(3):
            assert loc.gc_checkpoint().deleted == []
        assert [c.uuid for c in loc.list_checkpoints()] == [uids[2]]
        assert batch_files(str(tmp_path)) == referenced(loc)
    for uid, st_ in ((uids[2], states[2]), ("latest", states[2])):
        with open_loc(tmp_path, checkpoint=uid) as loc:
            assert state(loc) == st_


def test_gc_keeps_files_of_the_live_spine(tmp_path: Path) -> None:
    """Files referenced only by a deleted checkpoint survive while a live spine uses them."""
    uids, states = three_checkpoints(tmp_path)
    with open_loc(tmp_path, checkpoint=uids[0]) as loc:
        sp = loc.spine("op", INT)
        live = sp.live_files()
        assert live
        loc.delete_checkpoint(uids[2])
        loc.delete_checkpoint(uids[1])
        res = loc.gc_checkpoint()  # uids[0] is the newest now: nothing to do
        assert res.deleted == []
        loc.delete_checkpoint(uids[0])
        assert loc.list_checkpoints() == []
        assert live <= batch_files(str(tmp_path))
        assert sp.to_batch().to_dict() == states[0]
        sp.insert(rows(1000, 1010))
        loc.wait_idle()
        uid = loc.commit()
        expected = sp.to_batch().to_dict()
    with open_loc(tmp_path) as loc:
        assert loc.restored is not None and loc.restored.uuid == uid
        assert state(loc) == expected
        assert batch_files(str(tmp_path)) == referenced(loc)


def test_delete_checkpoint_middle_and_newest(tmp_path: Path) -> None:
    uids, states = three_checkpoints(tmp_path)
    with open_loc(tmp_path) as loc:
        res = loc.delete_checkpoint(uids[1])
        assert res.deleted == [uids[1]]
        assert [c.uuid for c in loc.list_checkpoints()] == [uids[0], uids[2]]
        assert not os.path.exists(tmp_path / uids[1])
        assert batch_files(str(tmp_path)) == referenced(loc) | loc.spine("op", INT).live_files()
        loc.delete_checkpoint(uids[2])
        assert state(loc) == states[2]
        nxt = loc.commit()
        # Its parent is gone: the state grew from the nearest surviving ancestor.
        assert loc.list_checkpoints()[-1].parent == uids[0]
    with open_loc(tmp_path) as loc:
        assert loc.restored is not None and loc.restored.uuid == nxt
        assert state(loc) == states[2]
    with open_loc(tmp_path, checkpoint=uids[0]) as loc:
        assert state(loc) == states[0]


# -- fingerprints ----------------------------------------------------------------------------


def test_fingerprint_mismatch(tmp_path: Path) -> None:
    uids, states = three_checkpoints(tmp_path)
    with pytest.raises(FingerprintMismatchError):
        open_loc(tmp_path, fp="other")
    with pytest.raises(FingerprintMismatchError):
        open_loc(tmp_path, fp="other", checkpoint=uids[0])
    with open_loc(tmp_path, fp="other", allow_state_drop=True) as loc:
        assert loc.restored is None and state(loc) == {}
        loc.spine("op", INT).insert(rows(0, 2))
        new = loc.commit()
        assert loc.list_checkpoints()[-1].fingerprint == "other"
    with open_loc(tmp_path, fp="other") as loc:
        assert loc.restored is not None and loc.restored.uuid == new
        assert len(state(loc)) == 2
    with open_loc(tmp_path, checkpoint=uids[1]) as loc:  # the old ones are still there
        assert state(loc) == states[1]


# -- locking ---------------------------------------------------------------------------------

_HOLDER = textwrap.dedent(
    """
    import sys
    from storage_engine import StorageLocation
    loc = StorageLocation.open(sys.argv[1], fingerprint="fp")
    print("ready", flush=True)
    sys.stdin.readline()
    loc.close()
    """
)

_OPENER = textwrap.dedent(
    """
    import sys
    from storage_engine import LockedError, StorageLocation
    try:
        StorageLocation.open(sys.argv[1], fingerprint="fp").close()
    except LockedError as e:
        print("locked:", e)
        sys.exit(3)
    print("opened")
    """
)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the location's lock."""
    p = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    yield p
    if p.poll() is None:
        assert p.stdin is not None
        p.stdin.write("\n")
        p.stdin.flush()
        p.wait(timeout=30)


def test_second_process_gets_locked_error(tmp_path: Path) -> None:
    three_checkpoints(tmp_path)
    with open_loc(tmp_path):
        r = subprocess.run(
            [sys.executable, "-c", _OPENER, str(tmp_path)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        assert r.returncode == 3, r.stdout + r.stderr
        assert str(os.getpid()) in r.stdout  # names the holder
    r = subprocess.run(
        [sys.executable, "-c", _OPENER, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert r.returncode == 0 and "opened" in r.stdout, r.stdout + r.stderr


def test_locked_by_another_process(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    with pytest.raises(LockedError):
        open_loc(tmp_path)


def test_second_open_in_the_same_process_is_locked(tmp_path: Path) -> None:
    with open_loc(tmp_path), pytest.raises(LockedError):
        open_loc(tmp_path)
    open_loc(tmp_path).close()  # released on close


def test_read_only_while_another_process_holds_the_lock(tmp_path: Path) -> None:
    uids, states = three_checkpoints(tmp_path)
    p = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        with open_loc(tmp_path, read_only=True) as ro:
            assert [c.uuid for c in ro.list_checkpoints()] == uids
            assert state(ro) == states[2]
            with pytest.raises(StorageError):
                ro.commit()
            with pytest.raises(StorageError):
                ro.gc_checkpoint()
            with pytest.raises(StorageError):
                ro.delete_checkpoint(uids[0])
        with open_loc(tmp_path, read_only=True, checkpoint=uids[0]) as ro:
            assert state(ro) == states[0]
    finally:
        assert p.stdin is not None
        p.stdin.write("\n")
        p.stdin.flush()
        p.wait(timeout=30)
    with open_loc(tmp_path) as loc:
        assert [c.uuid for c in loc.list_checkpoints()] == uids


def test_read_only_of_missing_location(tmp_path: Path) -> None:
    with pytest.raises(StorageError):
        open_loc(tmp_path / "nope", read_only=True)
    assert not os.path.exists(tmp_path / "nope")


# -- startup and cleanup ---------------------------------------------------------------------


def test_manifest_missing(tmp_path: Path) -> None:
    three_checkpoints(tmp_path)
    os.remove(tmp_path / "checkpoints.manifest")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(ManifestMissingError):
        open_loc(tmp_path)
    assert sorted(os.listdir(tmp_path)) == before  # refused without deleting anything


def test_fresh_location_without_checkpoint_dirs_opens(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with open_loc(tmp_path) as loc:
        assert loc.list_checkpoints() == [] and loc.restored is None
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_startup_cleanup(tmp_path: Path) -> None:
    uids, states = three_checkpoints(tmp_path)
    keep = set(os.listdir(tmp_path))
    some_batch = sorted(batch_files(str(tmp_path)))[0]
    stray = uuidlib.uuid4().hex + ".batch"
    shutil.copy(tmp_path / some_batch, tmp_path / stray)  # unreferenced, engine-named
    (tmp_path / (uuidlib.uuid4().hex + ".batch.mut")).write_bytes(b"partial")
    (tmp_path / "checkpoints.manifest.mut").write_bytes(b"partial")
    orphan = tmp_path / str(uuidlib.uuid4())
    orphan.mkdir()
    (orphan / "checkpoint.json").write_text("{}")
    (tmp_path / uids[1] / "spine-op.json.mut").write_bytes(b"partial")
    foreign = {
        "notes.txt": b"keep me",
        "foo.batch": b"not an engine name",
        "ABCDEF0123456789ABCDEF0123456789.batch": b"upper case: not an engine name",
        "README": b"x",
    }
    for n, data in foreign.items():
        (tmp_path / n).write_bytes(data)
    (tmp_path / "my-dir").mkdir()
    (tmp_path / "my-dir" / "x.batch").write_bytes(b"x")
    with open_loc(tmp_path) as loc:
        assert state(loc) == states[2]
        names = set(os.listdir(tmp_path))
        assert names == keep | set(foreign) | {"my-dir"}
        assert not (tmp_path / uids[1] / "spine-op.json.mut").exists()
        for n, data in foreign.items():
            assert (tmp_path / n).read_bytes() == data
        assert (tmp_path / "my-dir" / "x.batch").exists()
    for i, uid in enumerate(uids):
        with open_loc(tmp_path, checkpoint=uid) as loc:
            assert state(loc) == states[i]


def test_uncommitted_spills_are_removed_at_next_open(tmp_path: Path) -> None:
    s = EngineSettings(memory_budget_bytes=2048, max_memory_batch_bytes=1024, block_rows=16)
    with open_loc(tmp_path, settings=s) as loc:
        sp = loc.spine("op", INT)
        sp.insert(rows(0, 100))
        uid = loc.commit()
        # The checkpoint's own list: a merge finishing after the commit may add a file here
        # that no checkpoint references.
        committed = referenced(loc)
        for i in range(10):
            sp.insert(rows(100 + i * 100, 200 + i * 100))
        loc.wait_idle()
        spilled = batch_files(str(tmp_path)) - committed
        assert spilled  # spilled, never committed
    with open_loc(tmp_path, settings=s) as loc:
        files = batch_files(str(tmp_path))
        assert committed <= files and not files & spilled
        assert loc.restored is not None and loc.restored.uuid == uid
        assert state(loc) == rows(0, 100).to_dict()


# -- several spines, schemas -----------------------------------------------------------------


def test_multiple_spines_in_one_location(tmp_path: Path) -> None:
    with open_loc(tmp_path) as loc:
        a, b = loc.spine("a", INT), loc.spine("b.2", STR)
        a.insert(rows(0, 30))
        b.insert(Batch.from_tuples(STR, [((f"k{i}",), ("x",), i + 1) for i in range(20)]))
        uid = loc.commit()
        sa, sb = a.to_batch().to_dict(), b.to_batch().to_dict()
        assert set(loc.checkpoint_spines(uid)) == {"a", "b.2"}
        a.insert(rows(0, 30, -1))
        loc.commit()
    with open_loc(tmp_path) as loc:
        assert state(loc, "a") == {}
        assert state(loc, "b.2", STR) == sb
        assert state(loc, "c") == {}  # a spine the checkpoint does not have starts empty
    with open_loc(tmp_path, checkpoint=uid) as loc:
        assert state(loc, "a") == sa and state(loc, "b.2", STR) == sb


def test_restoring_a_spine_with_another_schema(tmp_path: Path) -> None:
    three_checkpoints(tmp_path)
    other = ZSetSchema.of([("k", pa.int64())], [("v", pa.string())])
    with open_loc(tmp_path) as loc:
        with pytest.raises(SchemaMismatchError):
            loc.spine("op", other)
        assert len(state(loc)) > 0
