"""Audits: the one home of job state. Every write of `state` happens here — created PENDING, claimed
RUNNING, released back to PENDING, cancelled, finished — so the model, the runner and the sweep never
set it themselves.

Tenant-facing functions take `tenant_id` and filter through `scoping.owned`. Runner-facing functions
(`claim_audit`, `record_progress`, `finish_audit`, …) address an audit by id and the `attempt` they
claimed; a write from an attempt that lost its claim changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, Text, and_, cast, func, or_, select, update
from sqlalchemy.orm import Session

from app.db.models import TERMINAL_STATES, Audit, AuditState, Tenant, utcnow
from app.db.scoping import Page, keyset_page, keyset_page_by_bytes, owned

# --- tenant-facing ----------------------------------------------------------------------------------


def get_audit(session: Session, *, tenant_id: str, audit_id: str) -> Audit | None:
    return session.scalar(owned(Audit, tenant_id).where(Audit.id == audit_id))


def add_audit(
    session: Session, *, tenant_id: str, kind: str, request: dict[str, Any], request_id: str | None = None
) -> Audit:
    audit = Audit(
        tenant_id=tenant_id, kind=kind, request=request, state=AuditState.PENDING, request_id=request_id
    )
    session.add(audit)
    session.flush()
    return audit


def lock_tenant(session: Session, *, tenant_id: str) -> None:
    """Hold the tenant's row until this transaction ends, so that a count of its audits and the inserts
    that count allows are one step (ICLAUDIT_MAX_ACTIVE_AUDITS is enforced, not raced). PostgreSQL: `SELECT
    … FOR NO KEY UPDATE` (a concurrent submit of the same tenant waits; other tenants, and inserts that
    only reference the tenant, do not). SQLite: a no-op UPDATE of the row takes the database's write lock
    now instead of at the first insert (pysqlite begins the transaction at the first write), so concurrent
    writers are serialised from before the count."""
    if session.get_bind().dialect.name == "sqlite":
        session.execute(
            update(Tenant)
            .where(Tenant.id == tenant_id)
            .values(name=Tenant.name)
            .execution_options(synchronize_session=False)
        )
    else:
        session.execute(select(Tenant.id).where(Tenant.id == tenant_id).with_for_update(key_share=True))


def tenant_of(session: Session, *, audit_id: str) -> str | None:
    """The tenant id of an audit (the inline executor's fair queue), or None."""
    return session.scalar(select(Audit.tenant_id).where(Audit.id == audit_id))


def count_active(session: Session, *, tenant_id: str) -> int:
    """The tenant's PENDING + RUNNING audits (ICLAUDIT_MAX_ACTIVE_AUDITS caps them)."""
    query = select(func.count()).where(
        Audit.tenant_id == tenant_id, Audit.state.in_([AuditState.PENDING, AuditState.RUNNING])
    )
    return int(session.scalar(query) or 0)


def filtered(query: Select[Any], *, state: str | None, kind: str | None, verdict: str | None) -> Select[Any]:
    """`query` kept to the audits in `state`, of `kind` and whose result has `verdict` (each where given):
    the filters every list of audits takes."""
    if state:
        query = query.where(Audit.state == state)
    if kind:
        query = query.where(Audit.kind == kind)
    if verdict:
        query = query.where(with_verdict(verdict))
    return query


def list_audits(
    session: Session,
    *,
    tenant_id: str,
    state: str | None = None,
    kind: str | None = None,
    page_size: int = 50,
    page_token: str | None = None,
    where: Sequence[Any] = (),
    verdict: str | None = None,
    max_bytes: int | None = None,
) -> Page:
    """`where`: further conditions on `Audit` (e.g. app.db.labels.having_labels); `verdict`: only audits
    whose stored result has this `verdict` (`with_verdict`); `max_bytes`: the page stops early once the
    audits' stored request and result add up past it (`stored_bytes`; the next page goes on from there)."""
    query = filtered(owned(Audit, tenant_id).where(*where), state=state, kind=kind, verdict=verdict)
    if max_bytes is not None:
        return keyset_page_by_bytes(
            session, query, Audit, page_size, page_token, size=stored_bytes(), max_bytes=max_bytes
        )
    return keyset_page(session, query, Audit, page_size, page_token)


ROW_BYTES = 1024
"""What an audit's answer holds besides its request and result (ids, states, progress, times, error)."""


def stored_bytes() -> Any:
    """An audit's size as the full view answers it, computed in the database without loading the row: the
    length of its stored request and result as JSON text, plus ROW_BYTES."""
    return (
        func.coalesce(func.length(cast(Audit.request, Text)), 0)
        + func.coalesce(func.length(cast(Audit.result, Text)), 0)
        + ROW_BYTES
    )


def stored_outcome() -> Any:
    """The verdict digest's `outcome` in SQL (app/audit/results/digest.py): the stored result's `verdict`
    field as text (`result ->> 'verdict'` on PostgreSQL, `json_extract` on SQLite); NULL without one."""
    return Audit.result["verdict"].as_string()


def with_verdict(verdict: str) -> Any:
    """The condition "a SUCCEEDED audit whose result's `verdict` is `verdict`" (violation, leak,
    inconclusive, consistent; app/audit/stats/verdict.py)."""
    return and_(Audit.state == AuditState.SUCCEEDED, stored_outcome() == verdict)


def request_cancel(session: Session, *, tenant_id: str, audit_id: str) -> Audit | None:
    """PENDING → CANCELLED at once; RUNNING → the flag the runner checks between batches. None if not found."""
    audit = get_audit(session, tenant_id=tenant_id, audit_id=audit_id)
    if audit is None:
        return None
    now = utcnow()
    session.execute(
        update(Audit)
        .where(Audit.id == audit_id, Audit.state == AuditState.PENDING)
        .values(
            state=AuditState.CANCELLED, cancel_requested=True, finished_at=now, progress_stage="cancelled"
        )
    )
    session.execute(
        update(Audit)
        .where(Audit.id == audit_id, Audit.state == AuditState.RUNNING)
        .values(cancel_requested=True)
    )
    session.refresh(audit)
    return audit


def purge_dataset_records(session: Session, *, tenant_id: str, dataset_id: str) -> list[str]:
    """The tenant's audits that read dataset `dataset_id`: a finished one keeps its figures with every record
    text removed (app.privacy.redact.strip_records; its progress message, part of its ETag, says so), an
    active one is cancelled. Returns their ids."""
    from app.privacy.redact import strip_records

    rows = session.execute(
        select(Audit.id, Audit.state, Audit.result).where(
            Audit.tenant_id == tenant_id, Audit.request["dataset"].as_string() == dataset_id
        )
    ).all()
    for audit_id, state, result in rows:
        if state in TERMINAL_STATES:
            session.execute(
                update(Audit)
                .where(Audit.id == audit_id)
                .values(
                    result=strip_records(result),
                    progress_message=f"record text purged with dataset {dataset_id}",
                )
            )
        else:
            request_cancel(session, tenant_id=tenant_id, audit_id=audit_id)
    return [audit_id for audit_id, _, _ in rows]


# --- runner side (by id and attempt) ------------------------------------------------------------------


def claim_audit(session: Session, *, audit_id: str, stale_before: datetime) -> int | None:
    """Conditional UPDATE: PENDING, or RUNNING with a heartbeat older than `stale_before`, → RUNNING with
    attempt+1. Returns the new attempt number, or None when another worker holds it or it is finished."""
    now = utcnow()
    result = session.execute(
        update(Audit)
        .where(
            Audit.id == audit_id,
            Audit.cancel_requested.is_(False),
            or_(
                Audit.state == AuditState.PENDING,
                and_(Audit.state == AuditState.RUNNING, Audit.heartbeat_at < stale_before),
            ),
        )
        .values(
            state=AuditState.RUNNING,
            attempt=Audit.attempt + 1,
            started_at=now,
            heartbeat_at=now,
            progress_stage="starting",
            progress_fraction=0.0,
            progress_eta_seconds=None,
            progress_message="",
        )
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return None
    return session.scalar(select(Audit.attempt).where(Audit.id == audit_id))


def _mine(audit_id: str, attempt: int) -> Any:
    return and_(Audit.id == audit_id, Audit.attempt == attempt, Audit.state == AuditState.RUNNING)


def record_progress(
    session: Session,
    *,
    audit_id: str,
    attempt: int,
    stage: str,
    fraction: float,
    eta_seconds: float | None,
    message: str,
) -> bool:
    """Write progress and the heartbeat; False when this attempt no longer holds the audit."""
    result = session.execute(
        update(Audit)
        .where(_mine(audit_id, attempt))
        .values(
            progress_stage=stage[:200],
            progress_fraction=fraction,
            progress_eta_seconds=eta_seconds,
            progress_message=message,
            heartbeat_at=utcnow(),
        )
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


def heartbeat(session: Session, *, audit_id: str, attempt: int) -> bool:
    result = session.execute(
        update(Audit)
        .where(_mine(audit_id, attempt))
        .values(heartbeat_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


def cancel_requested(session: Session, *, audit_id: str) -> bool:
    return bool(session.scalar(select(Audit.cancel_requested).where(Audit.id == audit_id)))


def finish_audit(
    session: Session,
    *,
    audit_id: str,
    attempt: int,
    state: AuditState,
    result: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    stage: str | None = None,
) -> bool:
    """RUNNING → a terminal state, only for the attempt that holds the claim (a re-run writes once)."""
    if state not in TERMINAL_STATES:
        raise ValueError(f"{state} is not terminal")
    values: dict[str, Any] = {"state": state, "result": result, "error": error, "finished_at": utcnow()}
    if state == AuditState.SUCCEEDED:
        values |= {"progress_fraction": 1.0, "progress_eta_seconds": 0.0}
    values["progress_stage"] = stage or state.lower()
    res = session.execute(
        update(Audit)
        .where(_mine(audit_id, attempt))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return res.rowcount == 1  # type: ignore[attr-defined]


def release_audit(session: Session, *, audit_id: str, attempt: int) -> bool:
    """RUNNING → PENDING for a re-run by the next process (the service stopped mid-audit; the sweep
    re-enqueues it). Only the attempt holding the claim may release it."""
    res = session.execute(
        update(Audit)
        .where(_mine(audit_id, attempt))
        .values(state=AuditState.PENDING, enqueued_at=None, queue_epoch=None, progress_stage="queued")
        .execution_options(synchronize_session=False)
    )
    return res.rowcount == 1  # type: ignore[attr-defined]


def record_model_load(session: Session, *, audit_id: str, seconds: float) -> None:
    """The seconds the audit waited for its model to load in its worker (with its outcome)."""
    session.execute(
        update(Audit)
        .where(Audit.id == audit_id)
        .values(model_load_seconds=round(seconds, 3))
        .execution_options(synchronize_session=False)
    )


def holds_outcome(session: Session, *, audit_id: str, attempt: int, state: AuditState) -> bool:
    """True when the row already shows this attempt's terminal `state`: a retried `finish_audit` whose
    first commit got through although its answer was lost."""
    query = select(func.count()).where(Audit.id == audit_id, Audit.attempt == attempt, Audit.state == state)
    return session.scalar(query) == 1


# --- the sweep ------------------------------------------------------------------------------------------


def cancel_stale_and_list_lost(
    session: Session, *, stale_before: datetime, queue_epoch: str, limit: int = 100
) -> list[str]:
    """The sweep's one query. Stale RUNNING audits whose cancel was asked end CANCELLED; returns the ids
    whose message is lost, to re-enqueue:

    - PENDING never enqueued (the broker was down at submit, or it was released at shutdown; not within
      the stale window of its creation, while its submitter may still be sending it), or enqueued into
      another incarnation of the queue (`queue_epoch`: a broker restarted empty, a new inline process);
      a PENDING audit waiting in the current queue is left alone however long it waits, so a backlog is
      never duplicated;
    - RUNNING with a heartbeat older than `stale_before` (its worker died) and not enqueued into the current
      queue since that attempt started: one new message per dead attempt.
    """
    now = utcnow()
    session.execute(
        update(Audit)
        .where(
            Audit.state == AuditState.RUNNING,
            Audit.cancel_requested.is_(True),
            Audit.heartbeat_at < stale_before,
        )
        .values(state=AuditState.CANCELLED, finished_at=now, progress_stage="cancelled")
        .execution_options(synchronize_session=False)
    )
    other_queue = or_(Audit.queue_epoch.is_(None), Audit.queue_epoch != queue_epoch)
    lost_pending = or_(
        Audit.queue_epoch != queue_epoch,
        # never marked: its submitter had the whole stale window to send and mark it
        and_(Audit.queue_epoch.is_(None), Audit.created_at < stale_before),
    )
    query = (
        select(Audit.id)
        .where(
            or_(
                and_(Audit.state == AuditState.PENDING, lost_pending),
                and_(
                    Audit.state == AuditState.RUNNING,
                    Audit.heartbeat_at < stale_before,
                    or_(other_queue, Audit.enqueued_at.is_(None), Audit.enqueued_at < Audit.started_at),
                ),
            ),
        )
        .order_by(Audit.created_at)
        .limit(limit)
    )
    return list(session.scalars(query))


def mark_enqueued(session: Session, audit_ids: Sequence[str], *, queue_epoch: str, sent_at: datetime) -> None:
    """The audits' messages were sent at `sent_at` (read *before* sending, so that it precedes any claim
    the message leads to) into the queue incarnation `queue_epoch`."""
    if audit_ids:
        session.execute(
            update(Audit)
            .where(Audit.id.in_(list(audit_ids)))
            .values(enqueued_at=sent_at, queue_epoch=queue_epoch)
            .execution_options(synchronize_session=False)
        )


def stale_cutoff(stale_after_seconds: float) -> datetime:
    return utcnow() - timedelta(seconds=stale_after_seconds)


# -- operator views (all tenants; never exposed per tenant) -----------------------------------------


def audit_counts(session: Session) -> list[tuple[str, str, int]]:
    """(kind, state, count) over every tenant, for the operator's /metrics."""
    rows = session.execute(select(Audit.kind, Audit.state, func.count()).group_by(Audit.kind, Audit.state))
    return [(kind, state, int(count)) for kind, state, count in rows]


def oldest_pending_created_at(session: Session) -> datetime | None:
    """When the longest-waiting PENDING audit was submitted (queue lag), or None."""
    return session.scalar(select(func.min(Audit.created_at)).where(Audit.state == AuditState.PENDING))
