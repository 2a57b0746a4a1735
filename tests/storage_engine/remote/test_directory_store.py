"""`DirectoryObjectStore` (a local directory as the object store, for the embedded run mode):
its contract, the real tier over it (upload, lazy and eager restore, corruption), and
`open_object_store` URLs. No S3 server needed."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storage_engine import (
    CorruptionError,
    DirectoryObjectStore,
    EngineSettings,
    ObjectMissingError,
    ObjectStore,
    ObjectStoreLike,
    ObjectStoreSettings,
    RemoteUnavailableError,
    StorageLocation,
    TierSettings,
    open_object_store,
)
from storage_engine.fileio import PosixFileLayer
from storage_engine.remote import (
    BATCHES,
    MANIFESTS,
    _remote_batch_refs,
    read_remote_manifest,
)
from storage_engine.remote_pull import pull
from tests.storage_engine.test_location import INT, rows, state

SETTINGS = EngineSettings(block_rows=64, merge_base_rows=10**6, remote_close_timeout_s=2.0)
TMP = ".spindle-tmp-"


@pytest.fixture
def store(tmp_path: Path) -> DirectoryObjectStore:
    s = DirectoryObjectStore(
        tmp_path / "objects", TierSettings(retry_max_wait_s=0.3, upload_concurrency=3)
    )
    s.ensure_bucket()
    return s


def on_disk(root: Path) -> list[str]:
    """Every file under `root`, relative, '/'-separated (temporary files included)."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


# -- the store's contract ------------------------------------------------------------------


def test_put_and_get_whole_and_ranged(store: DirectoryObjectStore) -> None:
    data = bytes(range(256)) * 1000
    store.put_bytes("batches/x.batch", data)
    assert store.get_bytes("batches/x.batch") == data
    assert store.get_bytes("batches/x.batch", 1000, 300) == data[1000:1300]
    assert store.get_bytes("batches/x.batch", 5000) == data[5000:]  # length 0: to the end
    assert store.get_bytes("batches/x.batch", 0, 10) == data[:10]
    assert store.get_bytes("batches/x.batch", len(data) - 5, 100) == data[-5:]  # short
    store.put_bytes("batches/x.batch", b"replaced")  # objects are replaced whole
    assert store.get_bytes("batches/x.batch") == b"replaced"
    store.put_bytes("empty", b"")
    assert store.get_bytes("empty") == b"" and store.size("empty") == 0
    assert (Path(store.root) / "batches" / "x.batch").read_bytes() == b"replaced"


def test_put_file_get_file_and_get_into(store: DirectoryObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    payload = os.urandom(3 * (1 << 20) + 17)
    src.write_bytes(payload)
    store.put_file("checkpoints/u1/spine-op.json", str(src))
    chunks: list[bytes] = []
    assert store.get_into("checkpoints/u1/spine-op.json", chunks.append, chunk=1 << 20) == len(
        payload
    )
    assert b"".join(chunks) == payload and len(chunks) == 4
    dest = tmp_path / "out" / "deep" / "copy.bin"  # parent directories are created
    store.get_file("checkpoints/u1/spine-op.json", str(dest))
    assert dest.read_bytes() == payload
    assert not Path(str(dest) + ".part").exists()
    # A missing local source is the caller's business (the tier relies on it), not the store's.
    with pytest.raises(FileNotFoundError):
        store.put_file("k", str(tmp_path / "nope"))
    assert store.size("k") is None


def test_size(store: DirectoryObjectStore) -> None:
    store.put_bytes("a/b", b"12345")
    assert store.size("a/b") == 5
    assert store.size("a") is None  # a directory is not an object
    assert store.size("a/c") is None
    assert store.size("a/b/c") is None  # under an object: not there either


def test_list_is_recursive_sorted_relative_and_by_string_prefix(
    store: DirectoryObjectStore,
) -> None:
    keys = [
        "OWNER",
        "batches/ab.batch",
        "batches/aa.batch",
        "batches/b.batch",
        "checkpoints/u1/checkpoint.json",
        "checkpoints/u1/spine-op.json",
        "checkpoints/u2/checkpoint.json",
        "manifests/0000000001-000000000001.manifest",
    ]
    for i, k in enumerate(keys):
        store.put_bytes(k, b"x" * i)
    os.makedirs(os.path.join(store.root, "checkpoints", "empty-dir"))
    assert [o.key for o in store.list()] == sorted(keys)
    assert {o.key: o.size for o in store.list()} == {k: i for i, k in enumerate(keys)}
    assert [o.key for o in store.list("batches/")] == [
        "batches/aa.batch",
        "batches/ab.batch",
        "batches/b.batch",
    ]
    assert [o.key for o in store.list("batches/a")] == ["batches/aa.batch", "batches/ab.batch"]
    assert [o.key for o in store.list("checkpoints/u1/")] == [
        "checkpoints/u1/checkpoint.json",
        "checkpoints/u1/spine-op.json",
    ]
    assert [o.key for o in store.list("check")] == [k for k in sorted(keys) if "checkpoints" in k]
    assert store.list("nothing/") == [] and store.list("OWNER/") == []
    assert [o.key for o in store.list("OWNER")] == ["OWNER"]


def test_remove_ignores_missing_keys_and_drops_empty_directories(
    store: DirectoryObjectStore,
) -> None:
    for k in ("checkpoints/u1/a.json", "checkpoints/u1/b.json", "checkpoints/u2/a.json", "X"):
        store.put_bytes(k, b"1")
    store.remove([])
    store.remove(["checkpoints/u1/a.json", "checkpoints/u1/b.json", "missing", "no/such/key"])
    assert [o.key for o in store.list()] == ["X", "checkpoints/u2/a.json"]
    assert not (Path(store.root) / "checkpoints" / "u1").exists()
    store.remove(["checkpoints/u2/a.json", "X", "X"])
    assert store.list() == []
    assert os.listdir(store.root) == []  # the root itself stays
    store.put_bytes("checkpoints/u3/a.json", b"2")  # pruned directories come back
    assert store.get_bytes("checkpoints/u3/a.json") == b"2"


def test_a_missing_key_raises_object_missing_with_the_file_url(
    store: DirectoryObjectStore, tmp_path: Path
) -> None:
    url = f"file://{tmp_path / 'objects'}/batches/gone.batch"
    assert store.url("batches/gone.batch") == url
    store.put_bytes("batches/other", b"x")
    calls: list[Any] = [
        lambda: store.get_bytes("batches/gone.batch"),
        lambda: store.get_bytes("batches/gone.batch", 10, 10),
        lambda: store.get_into("batches/gone.batch", lambda b: None),
        lambda: store.get_file("batches/gone.batch", str(tmp_path / "dl")),
    ]
    for call in calls:
        with pytest.raises(ObjectMissingError) as e:
            call()
        assert e.value.url == url and url in str(e.value)
    assert not list(tmp_path.glob("dl*"))  # no partial download left
    with pytest.raises(ObjectMissingError):
        store.get_bytes("batches")  # a directory is not an object
    with pytest.raises(ObjectMissingError):
        store.get_bytes("batches/other/deeper")


BAD_KEYS = ["../x", "/abs", "a//b", "", "a/", "./a", "a/./b", "a/../../x", "a/../b", "a\0b"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_keys_never_escape_the_root(store: DirectoryObjectStore, tmp_path: Path, key: str) -> None:
    src = tmp_path / "src"
    src.write_bytes(b"data")
    ops: list[Any] = [
        lambda: store.put_bytes(key, b"data"),
        lambda: store.put_file(key, str(src)),
        lambda: store.get_bytes(key),
        lambda: store.get_into(key, lambda b: None),
        lambda: store.get_file(key, str(tmp_path / "dl")),
        lambda: store.size(key),
        lambda: store.remove(["fine", key]),
    ]
    for op in ops:
        with pytest.raises(ValueError, match="invalid object key"):
            op()
    assert on_disk(tmp_path) == ["src"]


def test_temp_file_names_are_reserved(store: DirectoryObjectStore) -> None:
    with pytest.raises(ValueError, match="reserved"):
        store.put_bytes(f"a/{TMP}1234", b"")


def test_no_temporary_files_are_visible_after_many_puts(store: DirectoryObjectStore) -> None:
    errors: list[BaseException] = []

    def writer(t: int) -> None:
        try:
            for i in range(40):
                store.put_bytes(f"batches/k{i % 5}", bytes([t]) * (1000 + i))
                store.put_bytes(f"checkpoints/t{t}/doc.json", b"{}")
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    expected = [f"batches/k{i}" for i in range(5)] + [
        f"checkpoints/t{t}/doc.json" for t in range(8)
    ]
    assert [o.key for o in store.list()] == expected
    assert on_disk(Path(store.root)) == expected  # and none left behind on disk


def test_a_stale_temporary_file_is_never_listed_or_read(store: DirectoryObjectStore) -> None:
    store.put_bytes("batches/a", b"a")
    (Path(store.root) / "batches" / f"{TMP}crashed").write_bytes(b"half an object")
    assert [o.key for o in store.list()] == ["batches/a"]
    assert [o.key for o in store.list("batches/")] == ["batches/a"]


def test_readers_never_see_a_partial_object(store: DirectoryObjectStore) -> None:
    one, two = b"1" * (3 << 20), b"2" * (5 << 20)
    store.put_bytes("obj", one)
    stop = threading.Event()
    seen: list[bytes] = []

    def reader() -> None:
        while not stop.is_set():
            data = store.get_bytes("obj")
            if data not in (one, two):
                seen.append(data[:16] + b"..." + str(len(data)).encode())

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(20):
            store.put_bytes("obj", two if i % 2 == 0 else one)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not seen


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_put_is_fsynced_renamed_and_its_directory_fsynced(
    store: DirectoryObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        events.append(("replace", f"{src} -> {dst}"))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    store.put_bytes("manifests/m1", b"manifest")
    d = os.path.join(store.root, "manifests")
    kinds = [(k, p.replace(d, "<d>").replace(store.root, "<root>")) for k, p in events]
    tmp = next(p for k, p in kinds if k == "fsync" and TMP in p)
    i_file = kinds.index(("fsync", tmp))
    i_rename = kinds.index(("replace", f"{tmp} -> <d>/m1"))
    i_dir = len(kinds) - 1 - kinds[::-1].index(("fsync", "<d>"))
    assert i_file < i_rename < i_dir  # bytes durable, then the name, then the name's entry
    assert ("fsync", "<root>") in kinds[:i_file]  # the new directory's entry, too


def test_other_os_errors_are_retryable_and_name_the_url(
    store: DirectoryObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = Path(store.root) / "loop"
    loop.symlink_to("loop")  # ELOOP: not "missing", a broken store
    with pytest.raises(RemoteUnavailableError, match=f"{store.url('loop')}.*symbolic links"):
        store.get_bytes("loop")
    with pytest.raises(RemoteUnavailableError, match=store.url("loop")):
        store.size("loop")

    def eio(*_: Any) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "replace", eio)
    with pytest.raises(RemoteUnavailableError, match=f"{store.url('batches/x')}.*Input/output"):
        store.put_bytes("batches/x", b"data")
    monkeypatch.undo()
    assert store.list("batches/") == []  # the failed put left no temporary file behind
    assert not [n for n in os.listdir(Path(store.root) / "batches") if n.startswith(TMP)]


def test_puts_need_the_root_to_exist(tmp_path: Path) -> None:
    s = DirectoryObjectStore(tmp_path / "a" / "b")
    with pytest.raises(RemoteUnavailableError, match="ensure_bucket"):
        s.put_bytes("k", b"")
    assert s.list() == [] and s.size("k") is None
    s.ensure_bucket()
    s.ensure_bucket()  # idempotent
    s.put_bytes("k", b"v")
    assert s.get_bytes("k") == b"v"


def test_tier_settings_have_the_s3_defaults(tmp_path: Path) -> None:
    s: ObjectStoreLike = DirectoryObjectStore(tmp_path)
    for name in ("cache_bytes", "upload_concurrency", "retry_max_wait_s", "timeout_s"):
        assert getattr(s.settings, name) == ObjectStoreSettings.model_fields[name].default
    assert issubclass(ObjectStoreSettings, TierSettings)


# -- the real tier over a directory --------------------------------------------------------


class Model:
    """The spine's expected contents: {(key, value): weight}, zero weights dropped."""

    def __init__(self) -> None:
        self.rows: dict[Any, int] = {}

    def insert(self, lo: int, hi: int, w: int = 1) -> None:
        for k in range(lo, hi):
            n = self.rows.get((k, k % 3), 0) + w
            if n:
                self.rows[(k, k % 3)] = n
            else:
                del self.rows[(k, k % 3)]


def open_remote(path: Path, store: ObjectStoreLike, **kw: Any) -> StorageLocation:
    kw.setdefault("settings", SETTINGS)
    return StorageLocation.open(str(path), fingerprint="fp", remote=store, **kw)


def batch_files(path: Path) -> set[str]:
    return {n.name for n in path.iterdir() if n.suffix == ".batch"}


@pytest.fixture
def uploaded(tmp_path: Path, store: DirectoryObjectStore) -> Iterator[tuple[Model, list[str]]]:
    """A location that committed four times, each commit remote-durable; closed."""
    m = Model()
    uids = []
    with open_remote(tmp_path / "a", store) as loc:
        sp = loc.spine("op", INT)
        for step, (lo, hi, w) in enumerate(
            [(0, 120_000, 1), (120_000, 121_000, 1), (500, 900, -1), (60_000, 60_500, 2)],
            start=1,
        ):
            sp.insert(rows(lo, hi, w))
            m.insert(lo, hi, w)
            h = loc.commit_async(identifier=f"s{step}", step=step)
            uids.append(h.wait_remote(timeout=60))
            assert h.state == "remote_durable"
        assert loc.remote is not None and loc.remote.wait_idle(timeout=60)
        assert loc.status()["remote"]["url"] == store.url("")
        assert state(loc) == m.rows
    yield m, uids


def test_tier_uploads_into_the_directory(
    tmp_path: Path, store: DirectoryObjectStore, uploaded: tuple[Model, list[str]]
) -> None:
    _, uids = uploaded
    objects = tmp_path / "objects"
    assert {o.key[len(BATCHES) :] for o in store.list(BATCHES)} >= batch_files(tmp_path / "a")
    assert (objects / "OWNER").is_file()
    assert [c.uuid for c in read_remote_manifest(store)[1].checkpoints] == uids
    assert {p.name for p in (objects / "checkpoints").iterdir()} == set(uids)
    assert len(store.list(MANIFESTS)) <= 2  # older manifests deleted
    assert not [p for p in on_disk(objects) if TMP in p]


@pytest.mark.parametrize("eager", [False, True], ids=["lazy", "eager"])
def test_an_empty_directory_restores_the_same_state(
    tmp_path: Path, store: DirectoryObjectStore, uploaded: tuple[Model, list[str]], eager: bool
) -> None:
    m, uids = uploaded
    empty = tmp_path / "restored"
    with StorageLocation.open(
        str(empty),
        fingerprint="fp",
        settings=SETTINGS,
        remote=store,
        from_remote=True,
        eager=eager,
    ) as b:
        assert b.restored is not None and b.restored.uuid == uids[-1] and b.step == 4
        if eager:
            assert batch_files(empty) == batch_files(tmp_path / "a")
        else:
            assert not batch_files(empty)  # read on demand through the cache
        assert state(b) == m.rows
        assert b.spine("op", INT).seek([5, 700, 60_100]).to_dict() == {
            (5, 2): 1,
            (60_100, 1): 3,
        }
        if not eager:
            assert b.remote is not None and b.remote.cache.fetched_bytes > 0
        # It is now the writer: its commit goes to the same directory.
        b.spine("op", INT).insert(rows(200_000, 200_010))
        mine = b.commit_async(step=5).wait_remote(timeout=60)
    assert [c.uuid for c in read_remote_manifest(store)[1].checkpoints] == [*uids, mine]


@pytest.mark.parametrize("eager", [True, False], ids=["eager", "lazy"])
def test_a_flipped_byte_in_an_uploaded_batch_file_is_named(
    tmp_path: Path, store: DirectoryObjectStore, uploaded: tuple[Model, list[str]], eager: bool
) -> None:
    victim = max(batch_files(tmp_path / "a"), key=lambda n: (tmp_path / "a" / n).stat().st_size)
    path = tmp_path / "objects" / "batches" / victim
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside the blocks, not the footer
    path.write_bytes(bytes(data))
    url = store.url(BATCHES + victim)
    assert url == f"file://{tmp_path}/objects/batches/{victim}"
    if eager:
        with pytest.raises(CorruptionError, match=r"block \d+") as e:
            pull(store, str(tmp_path / "b"), PosixFileLayer(), eager=True)
        assert url in str(e.value)
        assert not (tmp_path / "b" / "MANIFEST").exists()  # a failed pull leaves no location
    else:
        # Lazy: header, footer and index are intact, so the restore opens; the first read
        # of the damaged block fails, naming the object and the block.
        with open_remote(tmp_path / "b", store, from_remote=True) as b:
            with pytest.raises(CorruptionError, match=r"block \d+") as e:
                state(b)
            assert url in str(e.value)


def test_a_missing_object_is_named_and_fallback_restores_an_older_checkpoint(
    tmp_path: Path, store: DirectoryObjectStore, uploaded: tuple[Model, list[str]]
) -> None:
    _, uids = uploaded
    older = {BATCHES + n for n in _remote_batch_refs(store, uids[-2])}
    only_last = {BATCHES + n for n in _remote_batch_refs(store, uids[-1])} - older
    assert only_last
    victim = sorted(only_last)[0]
    os.remove(tmp_path / "objects" / victim)
    with pytest.raises(ObjectMissingError) as e:
        pull(store, str(tmp_path / "b"), PosixFileLayer())
    assert e.value.url == store.url(victim)
    res = pull(store, str(tmp_path / "c"), PosixFileLayer(), fallback=True)
    assert res.checkpoint.uuid == uids[-2] and uids[-1] in res.skipped


def test_remote_gc_deletes_from_the_directory(
    tmp_path: Path, store: DirectoryObjectStore, uploaded: tuple[Model, list[str]]
) -> None:
    m, uids = uploaded
    with open_remote(tmp_path / "a", store) as loc:
        loc.gc_checkpoint()
        assert loc.remote is not None and loc.remote.wait_idle(timeout=60)
        left = [c.uuid for c in read_remote_manifest(store)[1].checkpoints]
        assert left and uids[0] not in left
    assert not (tmp_path / "objects" / "checkpoints" / uids[0]).exists()  # pruned
    with open_remote(tmp_path / "b", store, from_remote=True) as b:
        assert state(b) == m.rows


# -- open_object_store ---------------------------------------------------------------------


def test_open_object_store_file_url(tmp_path: Path) -> None:
    s = open_object_store(f"file://{tmp_path}/objs")
    assert isinstance(s, DirectoryObjectStore) and s.root == str(tmp_path / "objs")
    assert s.url("OWNER") == f"file://{tmp_path}/objs/OWNER"
    s2 = open_object_store(f"file://localhost{tmp_path}/my%20objs/")
    assert isinstance(s2, DirectoryObjectStore) and s2.root == str(tmp_path / "my objs")


def test_open_object_store_s3_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPINDLE_S3_ENDPOINT", "minio.example:9000")
    monkeypatch.setenv("SPINDLE_S3_ACCESS_KEY", "ak")
    monkeypatch.setenv("SPINDLE_S3_SECRET_KEY", "sk")
    monkeypatch.setenv("SPINDLE_S3_BUCKET", "from-env")  # the URL wins
    monkeypatch.setenv("SPINDLE_S3_PREFIX", "env/prefix")
    monkeypatch.setenv("SPINDLE_S3_UPLOAD_CONCURRENCY", "7")
    s = open_object_store("s3://bucket/pre/fix")
    assert isinstance(s, ObjectStore)
    assert (s.bucket, s.prefix) == ("bucket", "pre/fix")
    assert s.settings.endpoint == "minio.example:9000" and s.settings.access_key == "ak"
    assert s.settings.upload_concurrency == 7
    assert s.url("OWNER") == "s3://bucket/pre/fix/OWNER"
    bare = open_object_store("s3://bucket")
    assert isinstance(bare, ObjectStore) and bare.prefix == "" and bare.url("k") == "s3://bucket/k"


def test_open_object_store_s3_needs_an_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPINDLE_S3_ENDPOINT", raising=False)
    with pytest.raises(ValueError, match="SPINDLE_S3_ENDPOINT"):
        open_object_store("s3://bucket/p")


@pytest.mark.parametrize(
    "url",
    [
        "ftp://x",
        "/abs/dir",
        "objects",
        "file://relative/dir",
        "file://",
        "s3://",
        "s3:///p",
        "file:///a?x=1",
        "http://host/bucket",
    ],
)
def test_open_object_store_rejects_other_urls(url: str) -> None:
    with pytest.raises(ValueError, match="object store URL"):
        open_object_store(url)
