"""Every setting of the control plane, in one pydantic-settings class (env prefix SPINDLE_).

Defaults are the embedded mode (DESIGN.md §7): everything under `data_dir`, SQLite for the
metadata database, Celery over kombu's SQLAlchemy transport on another SQLite file, no
servers. Deployment sets `SPINDLE_DATABASE_URL` (PostgreSQL) and `SPINDLE_BROKER_URL`
(Redis); `docs/configuration.md` lists every variable.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pipeline_spec.spark_conf import parse_spark_conf

ObjectRoot = Annotated[str, Field(pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,62}(/[^\s]*)?$")]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPINDLE_", extra="ignore")

    data_dir: Path = Field(
        Path(".spindle-data"),
        description="pipelines' storage locations, run logs, and the embedded databases",
    )
    database_url: str | None = Field(
        None, description="SQLAlchemy URL; default sqlite:///<data_dir>/spindle.db"
    )
    broker_url: str | None = Field(
        None,
        description="Celery broker; default kombu's SQLAlchemy transport on <data_dir>/broker.db",
    )
    result_backend: str | None = Field(
        None, description="Celery result backend (tasks report through the database anyway)"
    )
    queue_prefix: str = Field(
        "spindle", description="Celery queue / Redis key prefix, so deployments can share"
    )
    admin_token: SecretStr | None = Field(
        None, description="bootstrap admin token; default: generated into <data_dir>/admin-token"
    )
    api_url: str | None = Field(
        None,
        description="the API's base URL as pipeline drivers reach it (`serve` sets it to its "
        "own): drivers then report to the control plane over the REST API, each with a token "
        "of its run's; unset: over the database",
    )
    api_workers: int = Field(1, ge=1, le=64, description="API server processes started by `serve`")
    token_cache_s: float = Field(
        5.0, ge=0, description="how long an API process trusts a token lookup (0: off)"
    )
    read_cache_s: float = Field(
        1.0,
        ge=0,
        description="how long an API process reuses the answer of a polled read (pipeline list,"
        " one pipeline, its checkpoints) for changes made outside it; its own writes show at "
        "once (0: off)",
    )
    driver_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="niceness of pipeline drivers (Spark) started by the worker, so the API "
        "and the worker stay responsive while pipelines use every core (0: same as the worker)",
    )
    driver_host: str = Field(
        "127.0.0.1",
        max_length=255,
        description="the address pipeline drivers serve their views' live rows on, for the "
        "API (workers/runtime/view_server.py reads it from the environment); 0.0.0.0 where "
        "the API runs on other machines than the workers: drivers then advertise their "
        "host name",
    )
    spare_driver: bool = Field(
        True,
        description="keep one spare driver per worker while it runs pipelines (Spark started "
        "and warmed up on a built-in pipeline, waiting): any pipeline's next run (a start, a "
        "crash's restart, a restore) takes it over instead of starting Spark; costs one idle "
        "driver's memory (a JVM) per worker",
    )
    cors_origins: list[str] = Field(default_factory=list)
    max_body_bytes: int = Field(1 << 20, gt=0, description="request bodies, except ingest")
    max_ingest_bytes: int = Field(16 << 20, gt=0, description="one ingest request")
    file_roots: list[Path] = Field(
        default_factory=list,
        description="directories files sources and sinks may use; default <data_dir>/files. "
        "Relative spec paths resolve against the first",
    )
    object_roots: list[ObjectRoot] = Field(
        default_factory=list,
        description="object-store locations (s3://bucket/prefix) that delta sinks may write, "
        "with the endpoint and credentials of SPINDLE_S3_*; none by default",
    )
    object_store_url: str | None = Field(
        None,
        description="where checkpoints are mirrored: file:///dir or s3://bucket/prefix "
        "(endpoint and keys from SPINDLE_S3_*); default file://<data_dir>/objects; none: off",
    )
    spark_master: str = Field("local[2]", description="passed to the Spark driver")
    spark_conf: dict[str, str] = Field(
        default_factory=dict,
        description="Spark configuration passed to every pipeline driver: a JSON object of "
        "spark.* keys and their values (strings, numbers, booleans), applied over Spindle's "
        "defaults; the master, the application's name, the time zone and the driver's JVM "
        "options are refused (pipeline_spec/spark_conf.py)",
    )
    spark_cds: bool = Field(
        True,
        description="drivers' JVMs map the class-data archive of Spark's classes when one is "
        "built (python -m workers.runtime.spark_cds build; make bootstrap does): seconds off "
        "each start",
    )
    spark_cds_dir: Path | None = Field(
        None, description="where that archive is kept; default <python prefix>/share/spindle"
    )
    operation_poll_s: float = Field(0.2, gt=0, description="how often a job polls commands")
    heartbeat_s: float = Field(1.0, gt=0)
    heartbeat_timeout_s: float = Field(
        30.0, gt=0, description="a run without a heartbeat this long is dead"
    )
    hang_timeout_s: float = Field(
        600.0,
        ge=0,
        description="a run that takes no step this long while its input waits is ended and "
        "restarted under the restart policy (0: never)",
    )
    reap_interval_s: float = Field(5.0, gt=0)
    retention_interval_s: float = Field(60.0, gt=0)
    max_restarts: int = Field(
        5,
        ge=0,
        description="crashes within restart_window_s that are restarted; one more fails the "
        "pipeline",
    )
    restart_window_s: float = Field(
        3600.0, gt=0, description="the window in which max_restarts crashes are counted"
    )
    restart_backoff_s: float = Field(
        1.0,
        ge=0,
        description="delay before the second consecutive restart, doubling (the first is at once)",
    )
    restart_backoff_max_s: float = Field(60.0, ge=0)
    restart_reset_s: float = Field(
        600.0, gt=0, description="a run healthy this long starts the restart backoff over"
    )
    metrics_raw_s: float = Field(
        3600.0, gt=0, description="per-step samples kept this long, then one per minute"
    )
    metrics_keep_s: float = Field(7 * 86400.0, gt=0, description="history kept this long")

    @field_validator("spark_conf", mode="before")
    @classmethod
    def _spark_conf(cls, value: object) -> dict[str, str]:
        return parse_spark_conf(value)

    @cached_property
    def data_path(self) -> Path:
        return self.data_dir.resolve()

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_path / 'spindle.db'}"

    @property
    def celery_broker(self) -> str:
        return self.broker_url or f"sqla+sqlite:///{self.data_path / 'broker.db'}"

    @property
    def roots(self) -> list[Path]:
        return [Path(os.path.realpath(r)) for r in self.file_roots] or [self.data_path / "files"]

    def pipeline_store_url(self, name: str) -> str | None:
        """The object-store prefix of a pipeline's checkpoints, or None if mirroring is off."""
        base = self.object_store_url or f"file://{self.data_path / 'objects'}"
        if base.strip().lower() == "none":
            return None
        return f"{base.rstrip('/')}/pipelines/{name}"

    def pipeline_dir(self, name: str) -> Path:
        return self.data_path / "pipelines" / name

    def storage_dir(self, name: str) -> Path:
        return self.pipeline_dir(name) / "storage"


__all__ = ["Settings"]
