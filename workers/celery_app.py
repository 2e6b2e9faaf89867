"""The Celery app. Postgres (the audit row) is the record, so results are ignored; a task carries only
the audit id. Delivery is at-least-once (acks late, requeue when the worker is lost, one message at a
time) and the runner's conditional claim makes a redelivered audit run at most once at a time.

The visibility timeout (how long Redis waits for an ack before redelivering) must outlast the longest
audit, or a healthy long audit would be handed to a second worker: it is max_audit_seconds + 1 h, set
for the broker, the result backend and the top-level setting, the three places Celery reads it.
"""

from __future__ import annotations

import logging

from celery import Celery
from celery.signals import worker_init, worker_process_init

from app.config import Settings, get_settings

log = logging.getLogger(__name__)


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


celery_app = create_celery(get_settings())


def _preload_models(**_: object) -> None:
    """Load the default model once per worker process, never inside a task or a request."""
    settings = get_settings()
    if not settings.preload_models:
        return
    from app.jobs.providers import RegistryEngines

    log.info("loading %s", settings.default_model)
    RegistryEngines().llm(settings.default_model)


@worker_process_init.connect
def _on_worker_process_init(**kwargs: object) -> None:  # prefork pool: each child process
    _preload_models()


@worker_init.connect
def _on_worker_init(sender: object = None, **kwargs: object) -> None:  # solo/threads pool: the worker itself
    pool = getattr(sender, "pool_cls", "")  # a name ("solo") or a class at this point
    name = pool if isinstance(pool, str) else getattr(pool, "__module__", "")
    if "prefork" not in name:
        _preload_models()
