"""The integrations tick, a daemon thread in every API process (like the requeue sweep): every
ICLAUDIT_WEBHOOK_TICK_SECONDS it writes the events of audits and sweeps that finished, fires due
schedules, and hands each due webhook delivery to the executor's kind of worker — a thread pool here in
the embedded default, a Celery task (`iclaudit.deliver_webhook`, queue `webhooks`) on the real stack.
Several API processes may tick at once: every step claims its rows with a conditional write first.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Protocol

from sqlalchemy import exists, or_, select
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.db import idempotency as idempotency_rows
from app.db import responses
from app.db import webhooks as webhook_rows
from app.db.models import Audit, Schedule, ScheduleRun, Sweep, WebhookDelivery, utcnow
from app.integrations import webhooks
from app.jobs.executors import Executor

log = logging.getLogger(__name__)

WEBHOOK_TASK = "iclaudit.deliver_webhook"
WEBHOOK_QUEUE = "webhooks"
_PURGE_EVERY_SECONDS = 600.0
WEBHOOK_THREADS = 4
"""Delivery threads of the embedded default (each delivery waits at most ICLAUDIT_WEBHOOK_TIMEOUT_SECONDS)."""


class Sender(Protocol):
    lease_seconds: float

    def send(self, delivery_id: str, attempt: int) -> None: ...

    def close(self) -> None: ...


class InlineSender:
    """Deliveries on WEBHOOK_THREADS threads of this process, at most ICLAUDIT_WEBHOOK_TENANT_CONCURRENCY of
    them for one tenant: the tick claims only what can start now (`room`, `claim_due_fairly`), round robin
    over tenants, so one tenant's slow receivers cannot hold up another tenant's deliveries."""

    def __init__(self, *, sessions: sessionmaker[Session], settings: Settings) -> None:
        self._sessions, self._settings = sessions, settings
        self._pool = ThreadPoolExecutor(max_workers=WEBHOOK_THREADS, thread_name_prefix="webhook")
        self.lease_seconds = 2 * settings.webhook_timeout_seconds + 10
        self.per_tenant = min(settings.webhook_tenant_concurrency, WEBHOOK_THREADS)
        self._busy: dict[str, int] = {}
        self._lock = threading.Lock()

    def room(self) -> tuple[int, dict[str, int]]:
        """(threads free now, deliveries in flight per tenant)."""
        with self._lock:
            return WEBHOOK_THREADS - sum(self._busy.values()), dict(self._busy)

    def send(self, delivery_id: str, attempt: int, tenant_id: str = "") -> None:
        with self._lock:
            self._busy[tenant_id] = self._busy.get(tenant_id, 0) + 1
        self._pool.submit(self._deliver, delivery_id, attempt, tenant_id)

    def _deliver(self, delivery_id: str, attempt: int, tenant_id: str = "") -> None:
        try:
            webhooks.deliver(delivery_id, attempt, sessions=self._sessions, settings=self._settings)
        except Exception:  # the lease expires and the tick hands it out again
            log.exception("webhook %s attempt %d crashed", delivery_id, attempt)
        finally:
            with self._lock:
                self._busy[tenant_id] -= 1
                if not self._busy[tenant_id]:
                    del self._busy[tenant_id]

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class CelerySender:
    """One Celery message per attempt, on the `webhooks` queue (`iclaudit worker` consumes it)."""

    def __init__(self, *, settings: Settings) -> None:
        from app.jobs.broker import create_celery

        self._celery = create_celery(settings)
        self.lease_seconds = 300.0  # a busy worker may take a while to pick the message up

    def send(self, delivery_id: str, attempt: int) -> None:
        self._celery.send_task(WEBHOOK_TASK, args=[delivery_id, attempt], queue=WEBHOOK_QUEUE)

    def close(self) -> None:
        self._celery.close()


def make_sender(*, sessions: sessionmaker[Session], settings: Settings) -> Sender:
    if settings.executor == "celery":
        return CelerySender(settings=settings)
    return InlineSender(sessions=sessions, settings=settings)


def _idle(sessions: sessionmaker[Session]) -> bool:
    """Nothing to do: one SELECT of five EXISTS (the usual tick costs one query)."""
    now = utcnow()
    work = or_(
        exists().where(Audit.events_at.is_(None), Audit.finished_at.is_not(None)),
        exists().where(
            ScheduleRun.alarms_at.is_(None), ScheduleRun.audit_id == Audit.id, Audit.events_at.is_not(None)
        ),
        exists().where(Sweep.completed_at.is_(None)),
        exists().where(Schedule.next_fire_at <= now),
        exists().where(WebhookDelivery.state == "PENDING", WebhookDelivery.next_attempt_at <= now),
    )
    with sessions() as session:
        return not session.scalar(select(work))


def tick(*, sessions: sessionmaker[Session], settings: Settings, sender: Sender, executor: Executor) -> int:
    """One pass: write due events, fire due schedules, send due deliveries. Returns deliveries sent."""
    from app.integrations import schedules

    if _idle(sessions):
        return 0
    webhooks.write_due_events(sessions)
    schedules.fire_due(sessions=sessions, settings=settings, executor=executor)
    if isinstance(sender, InlineSender):  # only what can start now, fairly over tenants
        free, busy = sender.room()
        now = utcnow()
        with sessions.begin() as session:
            fair = webhook_rows.claim_due_fairly(
                session,
                now=now,
                lease_until=now + timedelta(seconds=sender.lease_seconds),
                room=free,
                per_tenant=sender.per_tenant,
                busy=busy,
            )
        for delivery_id, attempt, tenant_id in fair:
            sender.send(delivery_id, attempt, tenant_id)
        return len(fair)
    claimed = webhooks.claim_due(sessions, lease_seconds=sender.lease_seconds)
    for delivery_id, attempt in claimed:
        sender.send(delivery_id, attempt)
    return len(claimed)


class IntegrationsTicker:
    def __init__(self, *, sessions: sessionmaker[Session], settings: Settings, executor: Executor) -> None:
        self._sessions, self._settings = sessions, settings
        self._executor = executor
        self.sender = make_sender(sessions=sessions, settings=settings)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="integrations", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self.sender.close()

    def _loop(self) -> None:
        last_purge = float("-inf")
        while not self._done.wait(self._settings.webhook_tick_seconds):
            try:
                tick(
                    sessions=self._sessions,
                    settings=self._settings,
                    sender=self.sender,
                    executor=self._executor,
                )
                if time.monotonic() - last_purge > _PURGE_EVERY_SECONDS:
                    with self._sessions.begin() as session:
                        idempotency_rows.purge_expired_keys(session, now=utcnow())
                    with self._sessions.begin() as session:
                        retained = timedelta(seconds=self._settings.response_retention_seconds)
                        responses.purge_older_than(session, before=utcnow() - retained)
                    last_purge = time.monotonic()
            except Exception:
                log.exception(
                    "integrations tick failed; retrying in %.1f s", self._settings.webhook_tick_seconds
                )
