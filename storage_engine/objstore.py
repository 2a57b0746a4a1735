"""The object store: an S3 bucket prefix through the `minio` client (MinIO, SeaweedFS, S3).

`ObjectStore` is the engine's only path to S3. It knows keys relative to its prefix and
turns the client's errors into two engine errors: `ObjectMissingError` (the key is not
there: a restore must not guess) and `RemoteUnavailableError` (network, server, credentials:
the caller retries). Retrying is the caller's business (the uploader retries for as long as
it runs); the HTTP client itself gives up quickly so a stopped server is noticed fast.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import urllib3
from minio import Minio
from minio.datatypes import Object
from minio.deleteobjects import DeleteObject
from minio.error import MinioException, S3Error
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import StorageError


class ObjectMissingError(StorageError):
    """An object a manifest references is not in the store."""

    def __init__(self, url: str) -> None:
        self.url = url
        super().__init__(f"object {url} is missing from the object store")


class RemoteUnavailableError(StorageError):
    """The object store could not be reached or refused the request (retryable)."""


class ObjectStoreSettings(BaseSettings):
    """Where the object-store tier lives; read from `SPINDLE_S3_*` environment variables."""

    model_config = SettingsConfigDict(env_prefix="SPINDLE_S3_", extra="ignore")

    endpoint: str = Field(description="host:port of the S3 API, e.g. minio:9000")
    bucket: str
    prefix: str = Field("", description="key prefix of this storage location, e.g. pipelines/x")
    access_key: str = ""
    secret_key: SecretStr = SecretStr("")
    secure: bool = Field(False, description="https")
    region: str | None = None
    timeout_s: float = Field(30.0, gt=0, description="per-request read timeout")
    upload_concurrency: int = Field(4, ge=1, description="parallel uploads of one checkpoint")
    cache_bytes: int = Field(
        4 << 30, gt=0, description="local disk cache of lazily fetched batch files"
    )
    retry_max_wait_s: float = Field(5.0, gt=0, description="longest pause between retries")


@dataclass(frozen=True)
class ObjectInfo:
    key: str  # relative to the store's prefix
    size: int


class ObjectStore:
    """One bucket prefix. Thread-safe (the minio client is)."""

    def __init__(self, settings: ObjectStoreSettings, client: Minio | None = None) -> None:
        self.settings = settings
        self.bucket = settings.bucket
        self.prefix = settings.prefix.strip("/")
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

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def ensure_bucket(self) -> None:
        with self._errors(""):
            if not self._client.bucket_exists(self.bucket):
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
                st: Object = self._client.stat_object(self.bucket, self._key(key))
        except ObjectMissingError:
            return None
        return int(st.size or 0)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        cut = len(self._key(""))
        with self._errors(prefix):
            return [
                ObjectInfo(str(o.object_name)[cut:], int(o.size or 0))
                for o in self._client.list_objects(
                    self.bucket, prefix=self._key(prefix), recursive=True
                )
            ]

    def remove(self, keys: Iterable[str]) -> None:
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
        try:
            yield
        except (StorageError, FileNotFoundError):
            raise  # a missing local file is the caller's business, not the store's
        except S3Error as e:
            if e.code in ("NoSuchKey", "NoSuchObject"):
                raise ObjectMissingError(self.url(key)) from e
            raise RemoteUnavailableError(f"{self.url(key)}: {_describe(e)}") from e
        except (MinioException, urllib3.exceptions.HTTPError, OSError) as e:
            raise RemoteUnavailableError(f"{self.url(key)}: {_describe(e)}") from e


def _describe(exc: BaseException) -> str:
    if isinstance(exc, S3Error):
        return f"{exc.code}: {exc.message}"
    return f"{type(exc).__name__}: {exc}".replace(os.linesep, " ")
