"""Fair turns on Celery: the broker's queue is one FIFO, so a tenant that sends hundreds of
audits would put every other tenant's audit behind them. Instead the database holds the backlog and the
broker holds at most ICLAUDIT_CELERY_TENANT_AUDITS audits per tenant (PENDING in the current queue epoch,
or RUNNING): `admit` lets a submit or a sweep send only what fits, and `Releaser` (a thread of each API
process) sends a tenant's oldest held audits as its audits finish. Another tenant's audit therefore waits
for at most that many of a flood's messages, never for the flood.

A held audit is an ordinary PENDING audit with no message in the current queue (`queue_epoch` unset or
another one): the sweep's rules are unchanged, and two API processes releasing the same audit send it
twice at worst, which the runner's claim makes harmless.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import timedelta

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import audits
from app.db.models import Audit, AuditState, utcnow
from app.db.retry import in_transaction, short_reason

log = logging.getLogger(__name__)

SENDING = threading.Lock()
"""Held by the sweep (app.jobs.executors.requeue) and the releaser from choosing the audits to send until
they are marked sent: both pick PENDING audits with no message in the current queue (after a broker
restarted empty, the same ones), so in one API process each sees the other's marks and none is sent twice."""


def _in_flight(session: Session, tenant_ids: Sequence[str], epoch: str) -> dict[str, int]:
    """Per tenant, its audits in the broker now: PENDING with a message in `epoch`, or RUNNING."""
    rows = session.execute(
        select(Audit.tenant_id, func.count())
        .where(
            Audit.tenant_id.in_(list(tenant_ids)),
            or_(
                Audit.state == AuditState.RUNNING,
                and_(Audit.state == AuditState.PENDING, Audit.queue_epoch == epoch),
            ),
        )
        .group_by(Audit.tenant_id)
    )
    return {tenant: int(count) for tenant, count in rows}


def admit(session: Session, audit_ids: Sequence[str], *, epoch: str, per_tenant: int) -> list[str]:
    """The audits among `audit_ids` that may be sent now: every RUNNING one (a re-run of a dead attempt
    already counts), and of the PENDING ones, oldest first, as many as each tenant has room for."""
    if not audit_ids:
        return []
    rows = session.execute(
        select(Audit.id, Audit.tenant_id, Audit.state)
        .where(Audit.id.in_(list(audit_ids)))
        .order_by(Audit.created_at, Audit.id)
    ).all()
    room = {
        tenant: per_tenant - count
        for tenant, count in _in_flight(session, sorted({r.tenant_id for r in rows}), epoch).items()
    }
    admitted = []
    for audit_id, tenant_id, state in rows:
        if state == AuditState.PENDING:
            if room.get(tenant_id, per_tenant) <= 0:
                continue
            room[tenant_id] = room.get(tenant_id, per_tenant) - 1
        admitted.append(audit_id)
    return admitted


GRACE_SECONDS = 3.0
"""A new audit is left to its submitter this long (stored, then sent and marked in a second transaction)."""


def held(session: Session, *, epoch: str, per_tenant: int) -> list[str]:
    """Each tenant's `per_tenant` oldest PENDING audits with no message in the current queue (oldest
    first; not those created in the last GRACE_SECONDS, which their submitter may be sending): a tenant's
    backlog of thousands never hides another tenant's one audit."""
    ranked = (
        select(
            Audit.id,
            Audit.created_at,
            func.row_number()
            .over(partition_by=Audit.tenant_id, order_by=(Audit.created_at, Audit.id))
            .label("turn"),
        )
        .where(
            Audit.state == AuditState.PENDING,
            Audit.cancel_requested.is_(False),
            or_(Audit.queue_epoch.is_(None), Audit.queue_epoch != epoch),
            Audit.created_at < utcnow() - timedelta(seconds=GRACE_SECONDS),
        )
        .subquery()
    )
    query = select(ranked.c.id).where(ranked.c.turn <= per_tenant).order_by(ranked.c.created_at, ranked.c.id)
    return list(session.scalars(query))


def by_tenant_turns(session: Session, audit_ids: Sequence[str]) -> list[str]:
    """`audit_ids` (oldest first) interleaved round robin over their tenants."""
    tenant_of = dict(
        session.execute(select(Audit.id, Audit.tenant_id).where(Audit.id.in_(list(audit_ids)))).all()
    )
    queues: dict[str, list[str]] = defaultdict(list)
    for audit_id in audit_ids:
        queues[tenant_of.get(audit_id, "")].append(audit_id)
    out: list[str] = []
    while queues:
        for tenant in list(queues):
            out.append(queues[tenant].pop(0))
            if not queues[tenant]:
                del queues[tenant]
    return out


class Releaser:
    """A daemon thread: every `interval` seconds, send each tenant's oldest held audits that fit."""

    def __init__(
        self,
        *,
        session_factory: sessionmaker[Session],
        epoch: Callable[[], str],
        send: Callable[[Sequence[str]], list[str]],
        per_tenant: int,
        interval: float = 1.0,
    ) -> None:
        self._sessions = session_factory
        self._epoch = epoch
        self._send = send
        self._per_tenant = per_tenant
        self._interval = interval
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="releaser", daemon=True)
        self._failing = False

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()

    def release(self) -> list[str]:
        """One round; the ids sent."""
        with SENDING:
            return self._release()

    def _release(self) -> list[str]:
        epoch = self._epoch()

        def pick(session: Session) -> list[str]:
            waiting = held(session, epoch=epoch, per_tenant=self._per_tenant)
            return by_tenant_turns(session, admit(session, waiting, epoch=epoch, per_tenant=self._per_tenant))

        ids = in_transaction(self._sessions, pick, max_seconds=5, what="release held audits")
        if not ids:
            return []
        sent_at = utcnow()
        sent = self._send(ids)
        in_transaction(
            self._sessions,
            lambda session: audits.mark_enqueued(session, sent, queue_epoch=epoch, sent_at=sent_at),
            max_seconds=5,
            what="release: mark enqueued",
        )
        log.info("released %d held audit(s) to the broker", len(sent))
        return sent

    def _loop(self) -> None:
        while not self._done.wait(self._interval):
            try:
                self.release()
                self._failing = False
            except Exception as exc:
                if not self._failing:
                    log.warning("releasing held audits failed (%s); retrying", short_reason(exc))
                self._failing = True
