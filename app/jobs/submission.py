"""Submitting an audit: check the request, store it, enqueue it; resume and cancel. The routes, sweeps and
schedules call these, which hold the logic (the routes only parse and answer)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from app import observability
from app.audit.kinds.base import AuditRequestBase
from app.config import Settings
from app.db import audits, labels
from app.db.models import Audit, AuditState
from app.jobs.checks import Rejected, check_request, reserve_active, with_default_budget
from app.jobs.executors import Executor, enqueue

log = logging.getLogger(__name__)


class Conflict(Exception):
    """The operation does not apply to the resource in its current state."""


def submit_audit(
    *,
    session: Session,
    tenant_id: str,
    request: AuditRequestBase,
    settings: Settings,
    executor: Executor,
    on_stored: Callable[[Session, Audit], None] | None = None,
) -> Audit:
    """Check, store (PENDING, with its labels; counted under the tenant's lock: `reserve_active`), commit,
    enqueue. If the broker is down the audit stays PENDING and the sweep enqueues it later. `on_stored` writes in the same transaction (an idempotency
    key, a schedule's run) and may raise to store nothing."""
    check_request(session, tenant_id=tenant_id, request=request, settings=settings)
    request = with_default_budget(request, settings)
    body: dict[str, Any] = request.model_dump(mode="json")
    reserve_active(session, tenant_id=tenant_id, settings=settings)
    audit = audits.add_audit(
        session,
        tenant_id=tenant_id,
        kind=body["kind"],
        request=body,
        request_id=observability.request_id.get(),
    )
    labels.add_labels(session, audit_id=audit.id, labels=request.labels)
    if on_stored is not None:
        on_stored(session, audit)
    session.commit()
    if enqueue(session, executor, [audit.id]):
        session.commit()
        session.refresh(audit)
    return audit


def resume_audit(
    *,
    session: Session,
    tenant_id: str,
    audit_id: str,
    settings: Settings,
    executor: Executor,
    changes: dict[str, Any] | None = None,
) -> Audit | None:
    """A new audit that resumes a FAILED or budget-stopped one (None if not found; Conflict otherwise): the
    same request and seed (`changes` may replace its budget), linked to the first audit's lineage, so its
    endpoint calls already answered are replayed from the store and only the missing ones are issued."""
    from app.audit.kinds.registry import kind_module
    from app.db import responses

    old = audits.get_audit(session, tenant_id=tenant_id, audit_id=audit_id)
    if old is None:
        return None
    stopped = old.state == AuditState.SUCCEEDED and bool((old.result or {}).get("stopped"))
    if old.state != AuditState.FAILED and not stopped:
        raise Conflict(
            f"audit {audit_id} is {old.state}; only a FAILED audit or one a budget stopped can be resumed"
        )
    body = dict(old.request) | (changes or {})
    try:
        request = kind_module(old.kind).Request.model_validate(body)
    except ValueError as exc:
        raise Rejected("$.budget", f"budget: {exc}") from None
    check_request(session, tenant_id=tenant_id, request=request, settings=settings)
    request = with_default_budget(request, settings)
    reserve_active(session, tenant_id=tenant_id, settings=settings)
    audit = audits.add_audit(
        session,
        tenant_id=tenant_id,
        kind=old.kind,
        request=request.model_dump(mode="json"),
        request_id=observability.request_id.get(),
    )
    labels.add_labels(session, audit_id=audit.id, labels=request.labels)
    responses.link_resume(session, audit_id=audit.id, resumed_from=old.id)
    session.commit()
    if enqueue(session, executor, [audit.id]):
        session.commit()
        session.refresh(audit)
    return audit


def cancel_audit(*, session: Session, tenant_id: str, audit_id: str) -> Audit | None:
    """Cooperative cancel (None if not found). Conflict for an audit that already SUCCEEDED or FAILED."""
    audit = audits.get_audit(session, tenant_id=tenant_id, audit_id=audit_id)
    if audit is None:
        return None
    if audit.state in (AuditState.SUCCEEDED, AuditState.FAILED):
        raise Conflict(f"audit {audit_id} already {audit.state}; there is nothing to cancel")
    audit = audits.request_cancel(session, tenant_id=tenant_id, audit_id=audit_id)
    session.commit()
    return audit
