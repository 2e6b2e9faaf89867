"""Tasks are doorways: the id in, app.jobs.runner.run_audit does the rest.

The worker's engine is its own (a runner and its heartbeat thread: a pool of 2 + 2) and retries opening
connections through a database restart. If the database stays away longer than ICLAUDIT_DB_RETRY_SECONDS
before the audit could even be claimed, the message is sent again with a delay (Celery's retry), so the
audit is neither lost nor failed.
"""

from __future__ import annotations

import logging
from functools import cache

from celery import Task
from sqlalchemy.orm import Session, sessionmaker

from app.config import get_settings
from app.db.engine import make_engine, make_session_factory
from app.db.retry import is_transient, short_reason
from app.integrations.dispatch import WEBHOOK_TASK
from app.integrations.webhooks import deliver
from app.jobs.broker import TASK_NAME
from app.jobs.plans import PLAN_TASK, answer_plan
from app.jobs.runner import run_audit as run_audit_by_id
from app.observability import bind
from workers.celery_app import celery_app

log = logging.getLogger(__name__)


@cache
def _session_factory() -> sessionmaker[Session]:
    settings = get_settings()
    engine = make_engine(
        settings.sqlalchemy_url, pool_size=2, max_overflow=2, connect_retry_seconds=5, name="iclaudit-worker"
    )
    return make_session_factory(engine)


@celery_app.task(name=TASK_NAME, bind=True, max_retries=None)
def run_audit(self: Task, audit_id: str, request_id: str | None = None) -> None:
    """`request_id`: the submitting request's X-Request-ID, for the audit's log lines."""
    try:
        with bind(request_id=request_id):
            run_audit_by_id(audit_id, session_factory=_session_factory(), settings=get_settings())
    except Exception as exc:
        if not is_transient(exc):
            raise
        log.warning("audit %s: database unavailable (%s); sent again in 5 s", audit_id, short_reason(exc))
        raise self.retry(countdown=5) from exc


@celery_app.task(name=WEBHOOK_TASK)
def deliver_webhook(delivery_id: str, attempt: int) -> None:
    """One attempt of one webhook delivery (app.integrations.webhooks.deliver records the outcome; a
    crash here leaves the delivery leased, and the API's tick hands it out again when the lease ends)."""
    deliver(delivery_id, attempt, sessions=_session_factory(), settings=get_settings())


@celery_app.task(name=PLAN_TASK)
def plan_audit(plan_id: str, tenant_id: str, body: dict, request_id: str | None = None) -> None:
    """A plan of a checked request (app/jobs/plans.py), stopped at its timeout or when its caller goes away;
    its answer pushed to Redis for the API process."""
    with bind(request_id=request_id):
        answer_plan(plan_id, tenant_id, body, sessions=_session_factory(), settings=get_settings())
