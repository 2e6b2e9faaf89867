"""The worker's Celery app (`celery -A workers.celery_app`), built by app.jobs.broker.create_celery, and
the start-up hooks that load the default model once per worker process."""

from __future__ import annotations

import logging

from celery.signals import worker_init, worker_process_init

from app.config import get_settings
from app.jobs.broker import create_celery
from workers import liveness  # noqa: F401 - the healthcheck's heartbeat file (workers/liveness.py)

log = logging.getLogger(__name__)


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
