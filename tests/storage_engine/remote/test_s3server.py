"""The SeaweedFS test server itself (local_servers/seaweedfs.py): round trips, ranges, multipart,
listing, credentials, and stop/start keeping the data."""

from __future__ import annotations

import io
import os
from typing import Any

import pytest
import urllib3
from minio import Minio
from minio.error import S3Error

from local_servers.seaweedfs import SeaweedS3


def put(server: SeaweedS3, bucket: str, key: str, data: bytes, **kw: Any) -> None:
    server.client().put_object(bucket, key, io.BytesIO(data), len(data), **kw)


def get(server: SeaweedS3, bucket: str, key: str, **kw: int) -> bytes:
    return get_with(server.client(), bucket, key, **kw)


def get_with(client: Minio, bucket: str, key: str, **kw: int) -> bytes:
    resp = client.get_object(bucket, key, **kw)
    try:
        return bytes(resp.read())
    finally:
        resp.close()
        resp.release_conn()


def test_put_get_round_trip(s3_server: SeaweedS3, s3_bucket: str) -> None:
    data = os.urandom(100_000)
    put(s3_server, s3_bucket, "a/b/object.bin", data)
    assert get(s3_server, s3_bucket, "a/b/object.bin") == data
    stat = s3_server.client().stat_object(s3_bucket, "a/b/object.bin")
    assert stat.size == len(data)
    with pytest.raises(S3Error) as e:
        get(s3_server, s3_bucket, "missing")
    assert e.value.code == "NoSuchKey"
    with pytest.raises(S3Error) as e:
        put(s3_server, "no-such-bucket", "k", b"x")
    assert e.value.code == "NoSuchBucket"


def test_ranged_get(s3_server: SeaweedS3, s3_bucket: str) -> None:
    data = bytes(range(256)) * 40
    put(s3_server, s3_bucket, "r", data)
    assert get(s3_server, s3_bucket, "r", offset=1000, length=17) == data[1000:1017]
    assert get(s3_server, s3_bucket, "r", offset=0, length=1) == data[:1]
    assert get(s3_server, s3_bucket, "r", offset=len(data) - 5) == data[-5:]  # to the end


def test_multipart_object_and_a_range_across_parts(s3_server: SeaweedS3, s3_bucket: str) -> None:
    part = 5 << 20  # the S3 minimum part size; the filer also chunks at 4 MiB
    data = os.urandom(2 * part + 12345)
    put(s3_server, s3_bucket, "big", data, part_size=part)
    stat = s3_server.client().stat_object(s3_bucket, "big")
    assert stat.size == len(data)
    assert stat.etag is not None and stat.etag.endswith("-3")  # really a 3-part upload
    assert (
        get(s3_server, s3_bucket, "big", offset=part - 100, length=200)
        == data[part - 100 : part + 100]
    )
    assert get(s3_server, s3_bucket, "big") == data


def test_listing_sees_writes_and_deletes_at_once(s3_server: SeaweedS3, s3_bucket: str) -> None:
    client = s3_server.client()
    keys = [f"p/{i:03d}" for i in range(30)]
    for k in keys:
        put(s3_server, s3_bucket, k, k.encode())
    put(s3_server, s3_bucket, "q/other", b"x")
    listed = [o.object_name for o in client.list_objects(s3_bucket, prefix="p/", recursive=True)]
    assert listed == keys
    top = {o.object_name for o in client.list_objects(s3_bucket)}
    assert top == {"p/", "q/"}
    client.remove_object(s3_bucket, "p/007")
    listed = [o.object_name for o in client.list_objects(s3_bucket, prefix="p/", recursive=True)]
    assert listed == [k for k in keys if k != "p/007"]


def refused_with(client: Minio, bucket: str) -> set[str]:
    """The S3 error codes a get, a put, a listing and list-buckets fail with."""
    codes: set[str] = set()
    for request in (
        lambda: client.get_object(bucket, "secret"),
        lambda: client.put_object(bucket, "x", io.BytesIO(b"x"), 1),
        lambda: list(client.list_objects(bucket)),
        client.list_buckets,
    ):
        with pytest.raises(S3Error) as e:
            request()
        codes.add(e.value.code)
    return codes


def test_bad_credentials_are_refused(s3_server: SeaweedS3, s3_bucket: str) -> None:
    put(s3_server, s3_bucket, "secret", b"data")
    wrong_secret = s3_server.fail_fast_client(secret_key="wrong-secret")
    assert refused_with(wrong_secret, s3_bucket) == {"SignatureDoesNotMatch"}
    unknown_user = s3_server.fail_fast_client(access_key="no-such-user", secret_key="whatever")
    assert refused_with(unknown_user, s3_bucket) == {"InvalidAccessKeyId"}
    anonymous = s3_server.fail_fast_client(access_key="", secret_key="")  # unsigned requests
    assert refused_with(anonymous, s3_bucket) == {"AccessDenied"}
    assert [o.object_name for o in s3_server.client().list_objects(s3_bucket)] == ["secret"]


def test_stop_refuses_connections_and_start_keeps_the_data(
    s3_server: SeaweedS3, s3_bucket: str
) -> None:
    data = os.urandom(50_000)
    put(s3_server, s3_bucket, "kept", data)
    endpoint = s3_server.endpoint
    fast = s3_server.fail_fast_client(timeout=2.0)  # the default client retries for ~6 s
    assert get_with(fast, s3_bucket, "kept") == data  # leaves a keep-alive connection pooled
    s3_server.stop()
    try:
        assert not s3_server.running
        with pytest.raises(urllib3.exceptions.MaxRetryError) as e:
            get_with(fast, s3_bucket, "kept")
        assert isinstance(e.value.reason, urllib3.exceptions.NewConnectionError)
        assert isinstance(e.value.reason.__context__, ConnectionRefusedError)
    finally:
        s3_server.start()
    assert s3_server.endpoint == endpoint
    assert get(s3_server, s3_bucket, "kept") == data
    assert s3_bucket in {b.name for b in s3_server.client().list_buckets()}
    put(s3_server, s3_bucket, "after", b"new")  # and it takes writes again
    assert get(s3_server, s3_bucket, "after") == b"new"
