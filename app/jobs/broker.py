"""The Celery app factory, shared by the API's CeleryExecutor (which sends) and `workers/` (which
consumes). Postgres (the audit row) is the record, so results are ignored; a task carries only the audit
id. Delivery is at-least-once (acks late, requeue when the worker is lost, one message at a time) and the
runner's conditional claim makes a redelivered audit run at most once at a time.

The visibility timeout (how long Redis waits for an ack before redelivering) must outlast the longest
audit, or a healthy long audit would be handed to a second worker: it is max_audit_seconds + 1 h, set
for the broker, the result backend and the top-level setting, the three places Celery reads it.
"""

from __future__ import annotations

from celery import Celery

from app.config import Settings

TASK_NAME = "iclaudit.run_audit"


def create_celery(settings: Settings) -> Celery:
    visibility_timeout = settings.max_audit_seconds + 3600
    celery = Celery("iclaudit", broker=settings.broker_url, include=["workers.tasks"])
    celery.conf.update(
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue="audits",
        broker_transport_options={"visibility_timeout": visibility_timeout},
        result_backend_transport_options={"visibility_timeout": visibility_timeout},
        visibility_timeout=visibility_timeout,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        task_serializer="json",
        accept_content=["json"],
    )
    return celery
