"""The files of a `files` source: a local directory or an object-store prefix
(`s3://bucket/prefix`).

Either way a source's offset counts the files consumed, in name order, so the files are
immutable and new ones must sort after the old (as Spark's own file source expects). Only
the directory's (the prefix's) own files count, not those of subdirectories; names starting
with `.` or `_` and ending in `.tmp`, `.part` or `.crc` are skipped (files being written).
Spark reads a step's files from the local disk: an object store's are downloaded first
(`fetch`), into a scratch directory holding only the step's files; dead letters name the
object (`url`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from pipeline_spec.model import is_object_path
from storage_engine.errors import StorageError
from storage_engine.objstore import ObjectStore, RemoteUnavailableError, open_object_store


class InputFilesError(RuntimeError):
    """The files' bucket does not exist, or the object store cannot be reached, refuses a
    request or lost a file listed before."""


def _visible(name: str) -> bool:
    return (
        bool(name)
        and not name.startswith((".", "_"))
        and not name.endswith((".tmp", ".part", ".crc"))
    )


def list_input_files(path: str, roots: str = "") -> list[str]:
    """The files of an input directory in offset order. With `roots` (directories joined
    by os.pathsep: the control plane's file roots), a symbolic link that leads out of every
    root is skipped too: a run never reads outside them."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return []
    inside = [os.path.realpath(r) for r in roots.split(os.pathsep) if r]
    return sorted(
        n
        for n in names
        if _visible(n)
        and os.path.isfile(os.path.join(path, n))
        and (not inside or _within(os.path.realpath(os.path.join(path, n)), inside))
    )


def _within(real: str, roots: list[str]) -> bool:
    return any(os.path.commonpath([real, r]) == r for r in roots)


class InputFiles:
    """A local directory's files (`path`, inside `roots`, see `list_input_files`)."""

    def __init__(self, path: str, roots: str = "") -> None:
        self.path, self.roots = path, roots

    def names(self) -> list[str]:
        """The files now, in offset order."""
        return list_input_files(self.path, self.roots)

    def url(self, name: str) -> str:
        """Where file `name` is, as a dead letter names it."""
        return os.path.join(self.path, name)

    def fetch(self, names: list[str]) -> list[str]:
        """Local paths of files `names` (of one step), for Spark to read."""
        return [self.url(n) for n in names]

    def close(self) -> None:
        pass


class ObjectFiles(InputFiles):
    """The objects directly under `s3://bucket/prefix`, through the object store's client
    and `SPINDLE_S3_*` settings (endpoint, credentials), as the checkpoint tier's."""

    def __init__(self, url: str, table: str) -> None:
        super().__init__(url.rstrip("/"))
        self.table = table
        try:
            store = open_object_store(url)
        except ValueError as e:  # names the SPINDLE_S3_* setting missing or wrong
            raise InputFilesError(f"table {table!r}: {e}") from None
        assert isinstance(store, ObjectStore)
        self.store, settings, bucket = store, store.settings, store.bucket
        try:
            exists = self.store.bucket_exists()
        except RemoteUnavailableError as e:
            raise InputFilesError(f"table {table!r}: {e}") from None
        if not exists:
            raise InputFilesError(
                f"table {table!r}: bucket {bucket!r} does not exist at {settings.endpoint}"
            )
        self._scratch = tempfile.mkdtemp(prefix="spindle-input-files-")

    def names(self) -> list[str]:
        with self._errors():
            listed = self.store.list(recursive=False)
        return sorted(o.key for o in listed if "/" not in o.key and _visible(o.key))

    def url(self, name: str) -> str:
        return self.store.url(name)

    def fetch(self, names: list[str]) -> list[str]:
        """Downloads the files (several at once), replacing the previous step's."""
        for old in os.listdir(self._scratch):
            os.remove(os.path.join(self._scratch, old))
        with self._errors():
            return fetch_files(self.store, names, self._scratch)

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except StorageError as e:  # unreachable, refused, or a file gone: named for the table
            raise InputFilesError(f"table {self.table!r}: {e}") from None

    def close(self) -> None:
        shutil.rmtree(self._scratch, ignore_errors=True)


def fetch_files(store: ObjectStore, names: list[str], directory: str) -> list[str]:
    """Downloads objects `names` into `directory` (several at once), as `0`, `1`, ...;
    their local paths, in order."""
    local = [os.path.join(directory, str(i)) for i in range(len(names))]
    with ThreadPoolExecutor(max_workers=store.settings.upload_concurrency) as pool:
        list(pool.map(store.get_file, names, local))
    return local


def open_input_files(path: str, table: str, roots: str = "") -> InputFiles:
    """A files source's files: `ObjectFiles` for an `s3://` path, else a directory's."""
    if is_object_path(path):
        return ObjectFiles(path, table)
    return InputFiles(path, roots)


__all__ = [
    "InputFiles",
    "InputFilesError",
    "ObjectFiles",
    "fetch_files",
    "list_input_files",
    "open_input_files",
]
