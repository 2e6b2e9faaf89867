"""Webhook endpoints, the tenant's notify secret, and the deliveries outbox (one row per event and
target; claimed by a conditional UPDATE whose `next_attempt_at` is the lease of the attempt in flight)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import delete, exists, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, aliased

from app.db.models import (
    TERMINAL_STATES,
    Audit,
    NotifySecret,
    ScheduleRun,
    WebhookDelivery,
    WebhookEndpoint,
    utcnow,
)
from app.db.scoping import Page, keyset_page, owned

PENDING, SUCCEEDED, FAILED = "PENDING", "SUCCEEDED", "FAILED"


# --- endpoints and secrets (tenant-facing) ------------------------------------------------------------


def add_endpoint(session: Session, **fields: Any) -> WebhookEndpoint:
    row = WebhookEndpoint(**fields)
    session.add(row)
    session.flush()
    return row


def get_endpoint(session: Session, *, tenant_id: str, endpoint_id: str) -> WebhookEndpoint | None:
    return session.scalar(owned(WebhookEndpoint, tenant_id).where(WebhookEndpoint.id == endpoint_id))


def list_endpoints(
    session: Session, *, tenant_id: str, page_size: int = 50, page_token: str | None = None
) -> Page:
    return keyset_page(session, owned(WebhookEndpoint, tenant_id), WebhookEndpoint, page_size, page_token)


def delete_endpoint(session: Session, *, tenant_id: str, endpoint_id: str) -> bool:
    result = session.execute(
        delete(WebhookEndpoint).where(
            WebhookEndpoint.tenant_id == tenant_id, WebhookEndpoint.id == endpoint_id
        )
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


def endpoints_for(session: Session, *, tenant_id: str, event_type: str) -> list[WebhookEndpoint]:
    rows = session.scalars(select(WebhookEndpoint).where(WebhookEndpoint.tenant_id == tenant_id))
    return [r for r in rows if not r.events or event_type in r.events]


def notify_secret(session: Session, *, tenant_id: str, make: Callable[[], str]) -> str:
    """The tenant's notify secret, created by `make()` on first use and committed at once (race-safe: the
    tenant id is the primary key; a second creator rolls back and reads the first one's)."""
    row = session.get(NotifySecret, tenant_id)
    if row is not None:
        return row.secret
    session.add(NotifySecret(tenant_id=tenant_id, secret=make()))
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
    return session.get(NotifySecret, tenant_id, populate_existing=True).secret  # type: ignore[union-attr]


# --- deliveries -------------------------------------------------------------------------------------


def add_delivery(session: Session, **fields: Any) -> None:
    session.add(WebhookDelivery(**fields))


def get_delivery(session: Session, *, tenant_id: str, delivery_id: str) -> WebhookDelivery | None:
    return session.scalar(owned(WebhookDelivery, tenant_id).where(WebhookDelivery.id == delivery_id))


def list_deliveries(
    session: Session, *, tenant_id: str, endpoint_id: str, page_size: int = 50, page_token: str | None = None
) -> Page:
    query = owned(WebhookDelivery, tenant_id).where(WebhookDelivery.endpoint_id == endpoint_id)
    return keyset_page(session, query, WebhookDelivery, page_size, page_token)


def claim_due(
    session: Session, *, now: datetime, lease_until: datetime, limit: int = 50
) -> list[tuple[str, int]]:
    """(id, attempt) of due PENDING deliveries this caller now holds until `lease_until`."""
    due = session.scalars(
        select(WebhookDelivery.id)
        .where(WebhookDelivery.state == PENDING, WebhookDelivery.next_attempt_at <= now)
        .order_by(WebhookDelivery.next_attempt_at)
        .limit(limit)
    ).all()
    claimed = []
    for delivery_id in due:
        if _take(session, delivery_id, now=now, lease_until=lease_until):
            claimed.append(delivery_id)
    if not claimed:
        return []
    rows = session.execute(
        select(WebhookDelivery.id, WebhookDelivery.attempts).where(WebhookDelivery.id.in_(claimed))
    )
    return [(delivery_id, attempts) for delivery_id, attempts in rows.tuples()]


def _take(session: Session, delivery_id: str, *, now: datetime, lease_until: datetime) -> bool:
    """Lease one due PENDING delivery until `lease_until` (its attempt counted) unless another sender
    took it first: a conditional UPDATE, so two senders never hold the same delivery."""
    result = session.execute(
        update(WebhookDelivery)
        .where(
            WebhookDelivery.id == delivery_id,
            WebhookDelivery.state == PENDING,
            WebhookDelivery.next_attempt_at <= now,
        )
        .values(attempts=WebhookDelivery.attempts + 1, next_attempt_at=lease_until)
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


def claim_due_fairly(
    session: Session,
    *,
    now: datetime,
    lease_until: datetime,
    room: int,
    per_tenant: int,
    busy: dict[str, int],
    scan: int = 500,
) -> list[tuple[str, int, str]]:
    """(id, attempt, tenant id) of at most `room` due PENDING deliveries this caller now holds until
    `lease_until`, taken round robin over tenants (oldest due first within each), none for a tenant that
    already has `per_tenant` in flight (`busy`, this sender's own count): one tenant's backlog of slow
    receivers cannot take every delivery thread, and what is claimed can start at once (no lease runs out
    while it waits)."""
    if room <= 0:
        return []
    due = session.execute(
        select(WebhookDelivery.id, WebhookDelivery.tenant_id)
        .where(WebhookDelivery.state == PENDING, WebhookDelivery.next_attempt_at <= now)
        .order_by(WebhookDelivery.next_attempt_at)
        .limit(scan)
    ).all()
    by_tenant: dict[str, list[str]] = {}
    for delivery_id, tenant_id in due:
        by_tenant.setdefault(tenant_id, []).append(delivery_id)
    counts = dict(busy)
    picked: list[tuple[str, str]] = []
    while len(picked) < room:
        progressed = False
        for tenant_id, waiting in by_tenant.items():
            if waiting and counts.get(tenant_id, 0) < per_tenant and len(picked) < room:
                picked.append((waiting.pop(0), tenant_id))
                counts[tenant_id] = counts.get(tenant_id, 0) + 1
                progressed = True
        if not progressed:
            break
    claimed = {}
    for delivery_id, tenant_id in picked:
        if _take(session, delivery_id, now=now, lease_until=lease_until):
            claimed[delivery_id] = tenant_id
    if not claimed:
        return []
    rows = session.execute(
        select(WebhookDelivery.id, WebhookDelivery.attempts).where(WebhookDelivery.id.in_(list(claimed)))
    )
    return [(delivery_id, attempts, claimed[delivery_id]) for delivery_id, attempts in rows.tuples()]


def record_attempt(
    session: Session,
    *,
    delivery_id: str,
    attempt: int,
    state: str,
    status: int | None,
    error: str,
    next_attempt_at: datetime | None,
) -> bool:
    """The outcome of attempt `attempt`; ignored if another attempt claimed the delivery since."""
    values: dict[str, Any] = {"state": state, "last_status": status, "last_error": error[:2000]}
    if state == SUCCEEDED:
        values["delivered_at"] = utcnow()
    if next_attempt_at is not None:
        values["next_attempt_at"] = next_attempt_at
    result = session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == delivery_id, WebhookDelivery.attempts == attempt)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


def redeliver(session: Session, *, delivery_id: str) -> None:
    """Back to PENDING, due now (the same webhook-id, so a receiver that got it can drop the repeat)."""
    session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == delivery_id)
        .values(state=PENDING, next_attempt_at=utcnow())
        .execution_options(synchronize_session=False)
    )


# --- terminal audits whose events are not written yet -------------------------------------------------


def audits_without_events(session: Session, *, limit: int = 100) -> list[str]:
    return list(
        session.scalars(
            select(Audit.id)
            .where(
                Audit.events_at.is_(None),
                Audit.finished_at.is_not(None),
                Audit.state.in_([str(s) for s in TERMINAL_STATES]),
            )
            .order_by(Audit.finished_at)
            .limit(limit)
        )
    )


def mark_events_written(session: Session, *, audit_id: str) -> bool:
    """Conditional: True for the one caller that set events_at (it writes the events, same transaction)."""
    result = session.execute(
        update(Audit)
        .where(Audit.id == audit_id, Audit.events_at.is_(None))
        .values(events_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


# --- scheduled runs whose alarms are not decided yet --------------------------------------------------


def runs_awaiting_alarms(session: Session, *, limit: int = 100) -> list[tuple[str, datetime]]:
    """(schedule_id, fire_time) of the scheduled runs whose audit's events are written and whose alarms
    are not, every earlier run of the schedule decided (or without an audit), in fire order."""
    earlier = aliased(ScheduleRun)
    undecided_before = exists().where(
        earlier.schedule_id == ScheduleRun.schedule_id,
        earlier.fire_time < ScheduleRun.fire_time,
        earlier.alarms_at.is_(None),
        earlier.audit_id.is_not(None),
    )
    rows = session.execute(
        select(ScheduleRun.schedule_id, ScheduleRun.fire_time)
        .join(Audit, Audit.id == ScheduleRun.audit_id)
        .where(ScheduleRun.alarms_at.is_(None), Audit.events_at.is_not(None), ~undecided_before)
        .order_by(ScheduleRun.fire_time)
        .limit(limit)
    )
    return [(schedule_id, fire_time) for schedule_id, fire_time in rows]


def mark_alarms_decided(session: Session, *, schedule_id: str, fire_time: datetime) -> bool:
    """Conditional: True for the one caller that set alarms_at (it writes the alarms, same transaction)."""
    result = session.execute(
        update(ScheduleRun)
        .where(
            ScheduleRun.schedule_id == schedule_id,
            ScheduleRun.fire_time == fire_time,
            ScheduleRun.alarms_at.is_(None),
        )
        .values(alarms_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1  # type: ignore[attr-defined]
