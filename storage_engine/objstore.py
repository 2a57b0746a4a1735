"""The object store: an S3 bucket prefix through the `minio` client (MinIO, SeaweedFS, S3),
or a local directory.

The tier code (`remote.py`, `remote_cache.py`) talks to any `ObjectStoreLike`. There are two:

- `ObjectStore` is the engine's only path to S3. It knows keys relative to its prefix and
  turns the client's errors into two engine errors: `ObjectMissingError` (the key is not
  there: a restore must not guess) and `RemoteUnavailableError` (network, server,
  credentials: the caller retries). Retrying is the caller's business (the uploader retries
  for as long as it runs); the HTTP client itself gives up quickly so a stopped server is
  noticed fast.
- `DirectoryObjectStore` keeps each object as a file under a local directory (the embedded
  run mode), with the same keys, the same errors and atomic, durable writes.

`open_object_store(url)` opens either from a `file://` or `s3://` URL. A store's `sibling`
is the store at another prefix of the same bucket (a fork's origin, `forks.py`).

Why one long module: the protocol and its two implementations are read against each other
(every method's keys, errors and durability must agree), so they stay side by side.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import io
import os
import stat
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, Protocol
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import StorageError

if TYPE_CHECKING:
    from minio import Minio


class ObjectMissingError(StorageError):
    """An object a manifest references is not in the store."""

    def __init__(self, url: str) -> None:
        self.url = url
        super().__init__(f"object {url} is missing from the object store")


class RemoteUnavailableError(StorageError):
    """The object store could not be reached or refused the request (retryable)."""


class TierSettings(BaseModel):
    """How the tier uses a store, whatever the backend: `store.settings.<field>`.

    Design: these tuning fields are declared once, here. `ObjectStoreSettings` inherits them
    (so an S3 store keeps exactly the fields, defaults, validation and `SPINDLE_S3_*`
    variables it always had, plus its connection fields), and a `DirectoryObjectStore` takes
    a plain `TierSettings`. The tier code only reads these four fields, so
    `ObjectStoreLike.settings` is typed as `TierSettings` and both backends get the same
    defaults by construction. `timeout_s` is the S3 client's read timeout; a directory store
    accepts it for symmetry and does not use it.
    """

    timeout_s: float = Field(30.0, gt=0, description="per-request read timeout")
    upload_concurrency: int = Field(4, ge=1, description="parallel uploads of one checkpoint")
    cache_bytes: int = Field(
        4 << 30, gt=0, description="local disk cache of lazily fetched batch files"
    )
    retry_max_wait_s: float = Field(5.0, gt=0, description="longest pause between retries")


class ObjectStoreSettings(BaseSettings, TierSettings):
    """Where the object-store tier lives; read from `SPINDLE_S3_*` environment variables.

    The tuning fields (`timeout_s`, `upload_concurrency`, `cache_bytes`, `retry_max_wait_s`)
    come from `TierSettings` and are read from the environment like the others.
    """

    model_config = SettingsConfigDict(env_prefix="SPINDLE_S3_", extra="ignore")

    endpoint: str = Field(description="host:port of the S3 API, e.g. minio:9000")
    bucket: str
    prefix: str = Field("", description="key prefix of this storage location, e.g. pipelines/x")
    access_key: str = ""
    secret_key: SecretStr = SecretStr("")
    secure: bool = Field(False, description="https")
    region: str | None = None


@dataclass(frozen=True)
class ObjectInfo:
    key: str  # relative to the store's prefix
    size: int


class ObjectStoreLike(Protocol):
    """What the tier (`remote.RemoteTier`, `remote_pull.pull`, `remote_cache`) needs of a store.

    Keys are relative to the store's root ("OWNER", "batches/<name>.batch"), with `/`
    separators. A missing object raises `ObjectMissingError(store.url(key))`; a failure worth
    retrying (network, server, disk) raises `RemoteUnavailableError`. Implementations:
    `ObjectStore` (S3) and `DirectoryObjectStore` (a local directory).
    """

    @property
    def settings(self) -> TierSettings:
        """The tier's tuning: `cache_bytes`, `upload_concurrency`, `retry_max_wait_s`, ..."""
        ...

    def url(self, key: str) -> str:
        """Where `key` lives, for messages: `s3://bucket/prefix/key`, `file:///dir/key`."""
        ...

    def ensure_bucket(self) -> None:
        """Create the bucket (directory) if it does not exist."""
        ...

    def put_file(self, key: str, path: str) -> None:
        """Store the local file `path` as `key` (FileNotFoundError if `path` is missing)."""
        ...

    def put_bytes(self, key: str, data: bytes) -> None: ...

    def get_bytes(self, key: str, offset: int = 0, length: int = 0) -> bytes:
        """The object, or `length` bytes of it from `offset` (0: to the end)."""
        ...

    def get_into(self, key: str, write: Callable[[bytes], object], chunk: int = 1 << 20) -> int:
        """Stream the object into `write`, chunk by chunk; returns its size."""
        ...

    def get_file(self, key: str, path: str) -> None:
        """Download to `path` (written as `path.part`, then renamed)."""
        ...

    def size(self, key: str) -> int | None:
        """The object's size, or None if it does not exist."""
        ...

    def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        """Every object whose key starts with `prefix`, recursively."""
        ...

    def remove(self, keys: Iterable[str]) -> None:
        """Delete `keys`; missing ones are ignored."""
        ...

    @property
    def locator(self) -> str:
        """This root among its siblings (S3: the prefix; a directory store: its root)."""
        ...

    def sibling(self, locator: str) -> ObjectStoreLike:
        """The store of the same backend and bucket at `locator` (see `forks.py`)."""
        ...


class ObjectStore:
    """One bucket prefix. Thread-safe (the minio client is)."""

    def __init__(self, settings: ObjectStoreSettings, client: Minio | None = None) -> None:
        self.settings = settings
        self.bucket = settings.bucket
        self.prefix = settings.prefix.strip("/")
        # minio (and urllib3) load here, not with the module: a driver without an S3 tier
        # does not pay for their imports on its start-up, a restart's critical path.
        import urllib3
        from minio import Minio

        self._client = client or Minio(
            settings.endpoint,
            access_key=settings.access_key,
            secret_key=settings.secret_key.get_secret_value(),
            secure=settings.secure,
            region=settings.region,
            http_client=urllib3.PoolManager(
                timeout=urllib3.Timeout(connect=5.0, read=settings.timeout_s),
                retries=urllib3.Retry(total=1, backoff_factor=0.2, connect=1, read=1),
                maxsize=max(10, settings.upload_concurrency * 2),
            ),
        )

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._key(key)}"

    @property
    def locator(self) -> str:
        return self.prefix

    def sibling(self, locator: str) -> ObjectStore:
        return ObjectStore(self.settings.model_copy(update={"prefix": locator}), self._client)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def bucket_exists(self) -> bool:
        with self._errors(""):
            return bool(self._client.bucket_exists(self.bucket))

    def ensure_bucket(self) -> None:
        if not self.bucket_exists():
            with self._errors(""):
                self._client.make_bucket(self.bucket)

    def put_file(self, key: str, path: str) -> None:
        with self._errors(key):
            self._client.fput_object(self.bucket, self._key(key), path)

    def put_bytes(self, key: str, data: bytes) -> None:
        with self._errors(key):
            self._client.put_object(self.bucket, self._key(key), io.BytesIO(data), len(data))

    def get_bytes(self, key: str, offset: int = 0, length: int = 0) -> bytes:
        """The object, or `length` bytes of it from `offset` (a ranged GET)."""
        with self._errors(key):
            resp = self._client.get_object(self.bucket, self._key(key), offset, length)
            try:
                return bytes(resp.read())
            finally:
                resp.close()
                resp.release_conn()

    def get_into(self, key: str, write: Callable[[bytes], object], chunk: int = 1 << 20) -> int:
        """Stream the object into `write`, chunk by chunk; returns its size."""
        with self._errors(key):
            resp = self._client.get_object(self.bucket, self._key(key))
            try:
                n = 0
                for data in resp.stream(chunk):
                    write(data)
                    n += len(data)
                return n
            finally:
                resp.close()
                resp.release_conn()

    def get_file(self, key: str, path: str) -> None:
        """Download to `path` (written as `path.part`, then renamed)."""
        with self._errors(key):
            self._client.fget_object(
                self.bucket, self._key(key), path, tmp_file_path=path + ".part"
            )

    def size(self, key: str) -> int | None:
        try:
            with self._errors(key):
                st = self._client.stat_object(self.bucket, self._key(key))
        except ObjectMissingError:
            return None
        return int(st.size or 0)

    def list(self, prefix: str = "", recursive: bool = True) -> list[ObjectInfo]:
        """`recursive=False`: only the objects at `prefix`'s level, not under its "folders"."""
        cut = len(self._key(""))
        try:
            with self._errors(prefix):
                return [
                    ObjectInfo(str(o.object_name)[cut:], int(o.size or 0))
                    for o in self._client.list_objects(
                        self.bucket, prefix=self._key(prefix), recursive=recursive
                    )
                    if not o.is_dir
                ]
        except ObjectMissingError:
            return []  # no bucket yet: nothing in it (a writer's claim creates it)

    def remove(self, keys: Iterable[str]) -> None:
        from minio.deleteobjects import DeleteObject

        batch = [DeleteObject(self._key(k)) for k in keys]
        if not batch:
            return
        with self._errors(""):
            errors = list(self._client.remove_objects(self.bucket, batch))
        bad = [e for e in errors if getattr(e, "code", "") != "NoSuchKey"]
        if bad:
            raise RemoteUnavailableError(f"deleting from {self.url('')}: {bad[0]}")

    @contextlib.contextmanager
    def _errors(self, key: str) -> Iterator[None]:
        import urllib3
        from minio.error import MinioException, S3Error

        try:
            yield
        except (StorageError, FileNotFoundError):
            raise  # a missing local file is the caller's business, not the store's
        except S3Error as e:
            if e.code in ("NoSuchKey", "NoSuchObject", "NoSuchBucket"):
                raise ObjectMissingError(self.url(key)) from e
            raise RemoteUnavailableError(f"{self.url(key)}: {_describe(e)}") from e
        except (MinioException, urllib3.exceptions.HTTPError, OSError) as e:
            raise RemoteUnavailableError(f"{self.url(key)}: {_describe(e)}") from e


def _describe(exc: BaseException) -> str:
    from minio.error import S3Error

    if isinstance(exc, S3Error):
        return f"{exc.code}: {exc.message}"
    return f"{type(exc).__name__}: {exc}".replace(os.linesep, " ")


# -- a local directory as the object store -------------------------------------------------

_TMP = ".spindle-tmp-"  # in-flight writes: never an object, never listed
_MISSING = (errno.ENOENT, errno.ENOTDIR, errno.EISDIR)


def _check_key(key: str) -> None:
    """A key is a relative path of non-empty components, none of them `.` or `..`: it can
    never name anything outside the store's root."""
    if not key:
        raise ValueError("invalid object key '': empty")
    if key.startswith("/") or os.path.isabs(key):
        raise ValueError(f"invalid object key {key!r}: absolute")
    if "\0" in key:
        raise ValueError(f"invalid object key {key!r}: NUL byte")
    for part in key.split("/"):
        if part in ("", ".", ".."):
            raise ValueError(f"invalid object key {key!r}: empty, '.' or '..' component")
        if part.startswith(_TMP):
            raise ValueError(f"invalid object key {key!r}: {_TMP}* names are reserved")


def _sync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DirectoryObjectStore:
    """An object store in a local directory: the object `key` is the file `root/<key>`.

    Keys may contain `/` (subdirectories are created as needed and removed again when a
    `remove` empties them). Every write goes to a temporary file (`.spindle-tmp-*`) in the
    object's directory, is fsynced, renamed over the object's name, and the directory is
    fsynced: a reader sees the old object or the new one, never a partial one, and a returned
    put is durable. Temporary files of a crashed writer are never listed or read.

    Errors are those of `ObjectStore`: a missing key raises `ObjectMissingError(url)`, any
    other OS error on the store's side (permissions, EIO, a full disk) `RemoteUnavailableError`
    naming the url. Errors of the caller's local files (`put_file`'s source, `get_file`'s
    destination, `get_into`'s `write`) are raised as they are. Unlike S3, a key cannot be both
    an object and a prefix of another key's directory (`a` and `a/b`). Thread-safe.
    """

    def __init__(self, root: str | os.PathLike[str], settings: TierSettings | None = None) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.settings = settings or TierSettings()
        self._lock = threading.Lock()
        self._dirs: set[str] = set()  # directories known to exist durably

    def url(self, key: str) -> str:
        return f"file://{self.root.rstrip('/')}/{key}"

    @property
    def locator(self) -> str:
        return self.root

    def sibling(self, locator: str) -> DirectoryObjectStore:
        return DirectoryObjectStore(locator, self.settings)  # abspath'ed

    def _path(self, key: str) -> str:
        _check_key(key)
        path = os.path.join(self.root, *key.split("/"))
        assert os.path.dirname(path).startswith(self.root), key  # guaranteed by _check_key
        return path

    @contextlib.contextmanager
    def _errors(self, key: str, reading: bool) -> Iterator[None]:
        try:
            yield
        except OSError as e:
            if reading and e.errno in _MISSING:
                raise ObjectMissingError(self.url(key)) from e
            raise RemoteUnavailableError(f"{self.url(key)}: {_describe(e)}") from e

    # -- writes --

    def ensure_bucket(self) -> None:
        with self._errors("", reading=False):
            self._make_dirs(self.root)

    def _make_dirs(self, path: str) -> None:
        """Create `path` and its missing parents, durably (each new name's parent fsynced)."""
        with self._lock:
            if path in self._dirs:
                return
        chain = [path]  # path, its parents up to the root, and the root's missing parents
        while chain[-1] != self.root and os.path.dirname(chain[-1]) != chain[-1]:
            chain.append(os.path.dirname(chain[-1]))
        while not os.path.isdir(up := os.path.dirname(chain[-1])) and up != chain[-1]:
            chain.append(up)
        for d in reversed(chain):  # from the root down; existing ones may be another
            try:  # thread's, not yet synced: syncing their parents again is cheap
                os.mkdir(d)
            except FileExistsError:
                if not os.path.isdir(d):
                    raise StorageError(
                        f"{d} is an object, so it cannot hold other objects"
                    ) from None
            _sync_dir(os.path.dirname(d))
        with self._lock:
            self._dirs.update(chain)

    def _put(self, key: str, fill: Callable[[BinaryIO], object]) -> None:
        path = self._path(key)
        parent = os.path.dirname(path)
        with self._errors(key, reading=False):
            if not os.path.isdir(self.root):
                raise RemoteUnavailableError(
                    f"{self.url(key)}: the store directory {self.root} does not exist "
                    "(ensure_bucket() creates it)"
                )
            for attempt in range(2):
                self._make_dirs(parent)
                tmp = os.path.join(parent, f"{_TMP}{uuid.uuid4().hex}")
                try:
                    f = open(tmp, "xb")  # noqa: SIM115 (closed below)
                except FileNotFoundError:
                    with self._lock:  # a concurrent remove() pruned the directory
                        self._dirs.discard(parent)
                    if attempt:
                        raise
                    continue
                try:
                    with f:
                        fill(f)
                        f.flush()
                        os.fsync(f.fileno())
                    os.replace(tmp, path)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.remove(tmp)
                    raise
                _sync_dir(parent)
                return

    def put_file(self, key: str, path: str) -> None:
        with open(path, "rb") as src:  # a missing local file is the caller's business

            def copy(dst: BinaryIO) -> None:
                while data := src.read(1 << 20):
                    dst.write(data)

            self._put(key, copy)

    def put_bytes(self, key: str, data: bytes) -> None:
        self._put(key, lambda dst: dst.write(data))

    def remove(self, keys: Iterable[str]) -> None:
        paths = [(k, self._path(k)) for k in keys]  # every key checked before any deletion
        dirs: set[str] = set()
        for key, path in paths:
            with self._errors(key, reading=False):
                try:
                    os.unlink(path)
                except OSError as e:
                    if e.errno in _MISSING:
                        continue
                    raise
            dirs.add(os.path.dirname(path))
        for d in sorted(dirs, key=len, reverse=True):  # deepest first
            with self._errors(d[len(self.root) + 1 :], reading=False):
                if os.path.isdir(d):
                    _sync_dir(d)
                self._prune(d)

    def _prune(self, d: str) -> None:
        """Remove `d` and its parents below the root while they are empty."""
        while d != self.root and d.startswith(self.root + os.sep):
            with self._lock:
                self._dirs.discard(d)
            try:
                os.rmdir(d)
            except OSError:
                return  # not empty (or already gone)
            _sync_dir(os.path.dirname(d))
            d = os.path.dirname(d)

    # -- reads --

    def _open(self, key: str) -> BinaryIO:
        path = self._path(key)
        with self._errors(key, reading=True):
            return open(path, "rb")

    def get_bytes(self, key: str, offset: int = 0, length: int = 0) -> bytes:
        """The object, or `length` bytes of it from `offset` (0: to the end); fewer bytes if
        the object ends first."""
        if offset < 0 or length < 0:
            raise ValueError(f"bad range {offset}+{length} of {self.url(key)}")
        with self._open(key) as f, self._errors(key, reading=True):
            if offset:
                f.seek(offset)
            return f.read(length) if length else f.read()

    def get_into(self, key: str, write: Callable[[bytes], object], chunk: int = 1 << 20) -> int:
        """Stream the object into `write`, chunk by chunk; returns its size."""
        n = 0
        with self._open(key) as f:
            while True:
                with self._errors(key, reading=True):
                    data = f.read(chunk)
                if not data:
                    return n
                write(data)
                n += len(data)

    def get_file(self, key: str, path: str) -> None:
        """Download to `path` (written as `path.part`, then renamed)."""
        with self._open(key) as src:
            if os.path.dirname(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
            part = path + ".part"
            try:
                with open(part, "wb") as dst:
                    while True:
                        with self._errors(key, reading=True):
                            data = src.read(1 << 20)
                        if not data:
                            break
                        dst.write(data)
                os.replace(part, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.remove(part)
                raise

    def size(self, key: str) -> int | None:
        path = self._path(key)
        with self._errors(key, reading=True):
            try:
                st = os.stat(path)
            except OSError as e:
                if e.errno in _MISSING:
                    return None
                raise
        return st.st_size if stat.S_ISREG(st.st_mode) else None

    def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        """Every object whose key starts with `prefix` (a string prefix, as in S3), sorted."""
        if prefix.startswith("/"):
            raise ValueError(f"invalid key prefix {prefix!r}: absolute")
        top = prefix.rpartition("/")[0]  # only the directory the prefix is in is walked
        if top:
            _check_key(top)
        with self._errors(prefix, reading=False):
            found = [o for o in self._walk(top) if o.key.startswith(prefix)]
        return sorted(found, key=lambda o: o.key)

    def _walk(self, rel: str) -> Iterator[ObjectInfo]:
        try:
            entries = builtins.list(os.scandir(os.path.join(self.root, rel)))
        except OSError as e:
            if e.errno in _MISSING:
                return  # nothing under this prefix (or no store yet)
            raise
        for entry in entries:
            if entry.name.startswith(_TMP):
                continue
            key = f"{rel}/{entry.name}" if rel else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    yield from self._walk(key)
                elif entry.is_file(follow_symlinks=False):
                    yield ObjectInfo(key, entry.stat(follow_symlinks=False).st_size)
            except FileNotFoundError:
                continue  # removed while listing


def open_object_store(url: str) -> ObjectStoreLike:
    """The object store a URL names.

    - `file:///abs/dir`: a `DirectoryObjectStore` in `/abs/dir` (percent-escapes decoded;
      the host part must be empty or `localhost`).
    - `s3://bucket` or `s3://bucket/some/prefix`: an `ObjectStore` on that bucket and prefix;
      the endpoint, credentials and tuning come from the `SPINDLE_S3_*` environment, and the
      URL's bucket and prefix override `SPINDLE_S3_BUCKET` / `SPINDLE_S3_PREFIX`.

    >>> open_object_store("file:///var/lib/spindle/objects")      # doctest: +SKIP
    >>> open_object_store("s3://spindle/pipelines/clicks")        # doctest: +SKIP

    Anything else (another scheme, a relative path, a query) raises ValueError.
    """
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ValueError(f"object store URL {url!r}: no query or fragment allowed")
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(
                f"object store URL {url!r}: the path must be absolute, as in file:///abs/dir"
            )
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise ValueError(f"object store URL {url!r}: no directory given (file:///abs/dir)")
        return DirectoryObjectStore(path)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ValueError(f"object store URL {url!r}: no bucket given (s3://bucket/prefix)")
        try:
            settings = ObjectStoreSettings(
                bucket=parts.netloc, prefix=unquote(parts.path).strip("/")
            )
        except ValidationError as e:
            bad = "; ".join(
                f"SPINDLE_S3_{str(err['loc'][0]).upper()}: {err['msg']}" for err in e.errors()
            )
            raise ValueError(f"object store URL {url!r}: bad S3 settings: {bad}") from None
        return ObjectStore(settings)
    raise ValueError(
        f"object store URL {url!r}: unsupported; use file:///abs/dir or s3://bucket/prefix"
    )
