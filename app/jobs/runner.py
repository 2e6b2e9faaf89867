"""The one function every executor calls: audit id → claimed → kind.run(request, ctx) → result on the row
(and, for a request with `until_answer` that ended inconclusive, its next step as a new audit: follow_up.py).

Claiming is a conditional UPDATE (PENDING, or RUNNING with a stale heartbeat → RUNNING, attempt+1), so a
redelivered or re-enqueued audit never runs twice at once; only the attempt holding the claim may write
the outcome. Kinds are seeded, so a re-run after a dead worker gives the same result.
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from app import observability, secrets
from app.audit.kinds.registry import kind_module, result_model
from app.audit.runtime import AuditCancelled, AuditError, EngineProvider, RunContext
from app.config import Settings
from app.db import audits
from app.db.models import Audit, AuditState
from app.db.responses import DbResponses
from app.db.retry import in_transaction, is_transient, short_reason
from app.jobs.follow_up import take_next_step
from app.jobs.progress import (
    ClaimLost,
    DbProgress,
    DeadlineExceeded,
    Heartbeat,
    ServiceStopping,
    lease_seconds,
)
from app.jobs.providers import RegistryEngines, TenantDatasets, tenant_secrets

log = logging.getLogger(__name__)


def _logged(fn: Callable[..., AuditState | None]) -> Callable[..., AuditState | None]:
    """Every log line of the run carries its audit_id (and tenant once claimed; request_id when the
    executor brought the submitting request's: app/observability.py)."""

    @functools.wraps(fn)
    def run(audit_id: str, **kwargs: Any) -> AuditState | None:
        tenant = observability.tenant.set(None)
        request_id = observability.request_id.set(observability.request_id.get())
        try:
            with observability.bind(audit_id=audit_id):
                return fn(audit_id, **kwargs)
        finally:
            observability.request_id.reset(request_id)
            observability.tenant.reset(tenant)

    return run


@_logged
def run_audit(
    audit_id: str,
    *,
    session_factory: sessionmaker[Session],
    settings: Settings,
    engines: EngineProvider | None = None,
    stopping: threading.Event | None = None,
) -> AuditState | None:
    """Run one audit to a terminal state. Returns that state, or None when it was not ours to run
    (already finished, cancelled, or held by a live attempt), or the service stopped or the database went
    away mid-way (the audit is back to PENDING, or its stale heartbeat gets it re-run). Raises a transient
    database error only when the claim itself failed for ICLAUDIT_DB_RETRY_SECONDS (the executor retries)."""

    def claim(session: Session) -> tuple[int, str, str, dict[str, Any], str | None] | None:
        stale_before = audits.stale_cutoff(settings.stale_after_seconds)
        attempt = audits.claim_audit(session, audit_id=audit_id, stale_before=stale_before)
        audit = session.get(Audit, audit_id) if attempt is not None else None
        return (
            None
            if audit is None or attempt is None
            else (attempt, audit.kind, audit.tenant_id, audit.request, audit.request_id)
        )

    claimed = in_transaction(
        session_factory, claim, max_seconds=settings.db_retry_seconds, what=f"audit {audit_id}: claim"
    )
    if claimed is None:
        log.info("audit %s not claimed (finished, cancelled or held by a live attempt)", audit_id)
        return None
    attempt, kind, tenant_id, request_json, request_id = claimed
    observability.tenant.set(tenant_id)
    if request_id:  # the submitting request's id, however the audit reached this process
        observability.request_id.set(request_id)
    log.info("audit %s (%s) claimed, attempt %d", audit_id, kind, attempt)

    progress = DbProgress(
        session_factory=session_factory,
        audit_id=audit_id,
        attempt=attempt,
        max_seconds=settings.max_audit_seconds,
        stopping=stopping,
        lease=lease_seconds(
            stale_after_seconds=settings.stale_after_seconds, heartbeat_seconds=settings.heartbeat_seconds
        ),
    )
    ctx = RunContext(
        progress=progress,
        engines=engines or RegistryEngines(progress=progress, check=progress.check),
        datasets=TenantDatasets(
            session_factory=session_factory,
            tenant_id=tenant_id,
            data_dir=settings.data_dir,
            max_rows=settings.upload_max_rows,
        ),
        egress=settings.endpoint_egress,
        secrets=tenant_secrets(session_factory, tenant_id, settings),
        responses=DbResponses(
            session_factory,
            audit_id,
            max_seconds=settings.db_retry_seconds,
            max_bytes=settings.target_max_stored_bytes,
        ),
    )

    def release(session: Session) -> bool:
        return audits.release_audit(session, audit_id=audit_id, attempt=attempt)

    with Heartbeat(
        session_factory=session_factory,
        audit_id=audit_id,
        attempt=attempt,
        interval=settings.heartbeat_seconds,
        progress=progress,
    ):
        try:
            state, result, error = _compute(kind, request_json, ctx)
            # no resolved secret in what is stored, answered or sent in a webhook (app/secrets.py)
            result, error = secrets.scrub_value(result), secrets.scrub_value(error)
        except ClaimLost:
            log.warning("audit %s attempt %d lost its claim; another attempt owns it", audit_id, attempt)
            return None
        except ServiceStopping:
            _write(session_factory, settings, audit_id, attempt, "release", release)
            log.warning("audit %s attempt %d interrupted by shutdown; back to PENDING", audit_id, attempt)
            return None
        except Exception as exc:
            if not is_transient(exc):
                raise
            # not the audit's fault: give it back for a fresh attempt (the sweep re-enqueues it)
            log.warning(
                "audit %s attempt %d: database unavailable (%s); back to PENDING",
                audit_id,
                attempt,
                short_reason(exc),
            )
            _write(session_factory, settings, audit_id, attempt, "release", release)
            return None

        loaded = getattr(ctx.engines, "load_seconds", 0.0)

        def finish(session: Session) -> bool:
            if audits.finish_audit(
                session, audit_id=audit_id, attempt=attempt, state=state, result=result, error=error
            ):
                if loaded:  # the model's load, apart from its calls: a plan's rates leave it out
                    audits.record_model_load(session, audit_id=audit_id, seconds=loaded)
                take_next_step(session, audit_id=audit_id, settings=settings)  # `until_answer`, if asked
                return True
            return audits.holds_outcome(session, audit_id=audit_id, attempt=attempt, state=state)

        written = _write(session_factory, settings, audit_id, attempt, "finish", finish)
    if not written:
        log.warning(
            "audit %s attempt %d finished but no longer held the claim; outcome dropped", audit_id, attempt
        )
        return None
    log.info("audit %s attempt %d → %s", audit_id, attempt, state)
    return state


def _compute(
    kind: str, request_json: dict[str, Any], ctx: RunContext
) -> tuple[AuditState, dict[str, Any] | None, dict[str, Any] | None]:
    """(state, result, error) for the audit's own outcome. Raises ClaimLost, ServiceStopping and transient
    database errors, which are not the audit's outcome."""
    try:
        module = kind_module(kind)
        request = module.Request.model_validate(request_json)
        result = module.run(request, ctx)  # its typed result (app/audit/results): validated as it is built
        if not isinstance(result, result_model(kind)):
            raise TypeError(f"kind {kind} returned {type(result).__name__}, not its result model")
        runtimes = getattr(ctx.engines, "runtimes", None)
        if runtimes is not None and (used := runtimes()):  # threads, library versions: the result's bits
            result.engines = used
        return AuditState.SUCCEEDED, result.stored(), None  # strict JSON: NaN/∞ fail the audit
    except (ClaimLost, ServiceStopping):
        raise
    except DeadlineExceeded as exc:
        return AuditState.FAILED, None, {"code": "DEADLINE_EXCEEDED", "message": str(exc)}
    except AuditCancelled:
        return AuditState.CANCELLED, None, None
    except AuditError as exc:
        return AuditState.FAILED, None, {"code": "AUDIT_ERROR", "message": str(exc)}
    except Exception as exc:
        if is_transient(exc):
            raise
        reference = uuid.uuid4().hex[:12]
        log.exception("audit failed with an internal error (reference %s)", reference)
        message = (
            f"The audit failed with an internal error (reference {reference}); the operator's log has it."
        )
        return AuditState.FAILED, None, {"code": "INTERNAL", "message": message}


def _write(
    session_factory: sessionmaker[Session],
    settings: Settings,
    audit_id: str,
    attempt: int,
    what: str,
    write: Callable[[Session], bool],
) -> bool:
    """An attempt-guarded write, retried through transient errors for ICLAUDIT_DB_RETRY_SECONDS; False
    when the claim is lost or the database stayed away (the stale heartbeat then gets it re-run)."""
    try:
        return in_transaction(
            session_factory, write, max_seconds=settings.db_retry_seconds, what=f"audit {audit_id}: {what}"
        )
    except Exception as exc:
        if not is_transient(exc):
            raise
        log.error("audit %s attempt %d: %s not written (%s)", audit_id, attempt, what, short_reason(exc))
        return False
