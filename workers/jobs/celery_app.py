"""The Celery application: broker and beat schedule from `backend.settings.Settings`.

    celery -A workers.jobs.celery_app worker --beat --pool threads --loglevel INFO

Threads, not processes: a launch task supervises its driver subprocess for the run's whole
life, mostly waiting, and the driver is tied to that thread (it dies with the worker)."""

from __future__ import annotations

import os
import signal

from celery import Celery
from celery.signals import beat_embedded_init

from backend.child_processes import die_with_parent
from backend.settings import Settings


def _transport_options(settings: Settings) -> dict[str, object]:
    if settings.celery_broker.startswith(("redis://", "rediss://")):
        # Keys of a shared Redis stay apart per deployment (and per test run).
        return {"global_keyprefix": f"{settings.queue_prefix}:"}
    return {}  # the SQLAlchemy transport passes its options to create_engine


def make_celery(settings: Settings) -> Celery:
    app = Celery("spindle", include=["workers.jobs.tasks"])
    queue = settings.queue_prefix
    app.conf.update(
        broker_url=settings.celery_broker,
        result_backend=settings.result_backend,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        task_default_queue=queue,
        task_default_exchange=queue,
        task_default_routing_key=queue,
        broker_transport_options=_transport_options(settings),
        broker_connection_retry_on_startup=True,
        # A launch task runs as long as its pipeline: never let a lost ack re-deliver it
        # (the reaper replaces dead runs instead).
        task_acks_late=False,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        beat_schedule={
            "reap": {"task": "spindle.reap", "schedule": settings.reap_interval_s},
            "retention": {
                "task": "spindle.enforce_retention",
                "schedule": settings.retention_interval_s,
            },
            "metrics": {"task": "spindle.downsample_metrics", "schedule": 300.0},
        },
    )
    return app


def _beat_ends_with_its_worker(**_: object) -> None:
    """An embedded beat (`worker --beat`) is a child process of the worker, and one forked
    just as the worker began shutting down is never told to stop: an orphan scheduling
    tasks for good. The kernel ends it with the worker; if the worker is already gone, it
    ends now."""
    worker = os.getppid()
    die_with_parent(signal.SIGTERM)
    if os.getppid() != worker:
        os._exit(0)


beat_embedded_init.connect(_beat_ends_with_its_worker)


def declare_queues(app: Celery) -> None:
    """Create the broker's queues now. kombu's SQLAlchemy transport (the embedded broker)
    creates a queue's row on first use, and two first uses at once (the API publishing, the
    worker consuming, beat publishing) can both insert it: the loser's IntegrityError has
    killed the worker. `serve` calls this before it starts the worker."""
    with app.connection_for_write() as conn:
        for queue in app.amqp.queues.values():
            queue.bind(conn.default_channel).declare()


app = make_celery(Settings())


__all__ = ["app", "declare_queues", "make_celery"]
