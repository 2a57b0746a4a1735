"""The Spark configuration of pipeline drivers (SPINDLE_SPARK_CONF): a JSON object of spark.*
keys, its values the strings Spark takes; anything else is refused, naming the key."""

from __future__ import annotations

import pytest

from pipeline_spec.spark_conf import ENV, RESERVED, SparkConfError, parse_spark_conf


def test_values_become_the_strings_spark_takes() -> None:
    got = parse_spark_conf(
        '{"spark.executor.memory": "512m", "spark.cores.max": 2, "spark.memory.fraction": 0.5,'
        ' "spark.ui.enabled": true, "spark.executorEnv.TZ": "UTC"}'
    )
    assert got == {
        "spark.executor.memory": "512m",
        "spark.cores.max": "2",
        "spark.memory.fraction": "0.5",
        "spark.ui.enabled": "true",
        "spark.executorEnv.TZ": "UTC",
    }
    assert parse_spark_conf(None) == parse_spark_conf("") == parse_spark_conf(" ") == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"executor.memory": "1g"}', "'executor.memory' is not a Spark configuration key"),
        ('{"spark. x": "1"}', "'spark. x' is not a Spark configuration key"),
        ('{"spark.": "1"}', "'spark.' is not a Spark configuration key"),
        ('{"spark.x": null}', "spark.x: the value must be a string, a number or a boolean"),
        ('{"spark.x": {"y": 1}}', "spark.x: the value must be a string, a number or a boolean"),
        ('{"spark.x": NaN}', "spark.x: the value must be a string, a number or a boolean"),
        ('["spark.x"]', "a JSON object of spark.* keys and their values, not an array"),
        ("spark.x=1", "not JSON"),
        (
            '{"spark.master": "local[4]"}',
            "spark.master cannot be set here: set SPINDLE_SPARK_MASTER",
        ),
        ('{"spark.driver.memory": "4g"}', "read when the driver's JVM starts"),
        ('{"spark.sql.session.timeZone": "CET"}', "computed in UTC"),
    ],
)
def test_a_bad_configuration_is_refused_naming_the_key(text: str, message: str) -> None:
    with pytest.raises(SparkConfError) as e:
        parse_spark_conf(text)
    assert str(e.value).startswith(f"{ENV}: ")
    assert message in str(e.value)


def test_every_reserved_key_says_why() -> None:
    assert all(k.startswith("spark.") and why for k, why in RESERVED.items())
