"""The Spark session of a test module: one per module (a session is expensive to start, and
modules run on different pytest workers), named after it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from workers.session import spark_session


@pytest.fixture(scope="module")
def spark(request: pytest.FixtureRequest) -> Iterator[SparkSession]:
    s = spark_session(f"spindle-tests-{request.module.__name__.rsplit('.', 1)[-1]}")
    yield s
    s.stop()
