"""The one function every executor calls: audit id → claimed → kind.run(request, ctx) → result on the row.

Claiming is a conditional UPDATE (PENDING, or RUNNING with a stale heartbeat → RUNNING, attempt+1), so a
redelivered or re-enqueued audit never runs twice at once; only the attempt holding the claim may write
the outcome. Kinds are seeded, so a re-run after a dead worker gives the same result.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from app.audit.kinds.registry import kind_module
from app.audit.runtime import AuditCancelled, AuditError, EngineProvider, RunContext
from app.config import Settings
from app.db import audits
from app.db.models import Audit, AuditState
from app.jobs.progress import ClaimLost, DbProgress, DeadlineExceeded, Heartbeat, ServiceStopping
from app.jobs.providers import RegistryEngines, TenantDatasets

log = logging.getLogger(__name__)


def _json_result(result: Any) -> dict[str, Any]:
    """The result as stored: strict JSON (no NaN/inf), an object at the top."""
    if not isinstance(result, dict):
        raise TypeError(f"kind returned {type(result).__name__}, not a dict")
    return json.loads(json.dumps(result, allow_nan=False))


def run_audit(
    audit_id: str,
    *,
    session_factory: sessionmaker[Session],
    settings: Settings,
    engines: EngineProvider | None = None,
    stopping: threading.Event | None = None,
) -> AuditState | None:
    """Run one audit to a terminal state. Returns that state, or None when it was not ours to run
    (already finished, cancelled, or held by a live attempt) or the service stopped mid-way."""
    with session_factory.begin() as session:
        attempt = audits.claim_audit(
            session, audit_id=audit_id, stale_before=audits.stale_cutoff(settings.stale_after_seconds)
        )
        audit = session.get(Audit, audit_id) if attempt is not None else None
        if audit is None or attempt is None:
            log.info("audit %s not claimed (finished, cancelled or held by a live attempt)", audit_id)
            return None
        kind, tenant_id, request_json = audit.kind, audit.tenant_id, audit.request
    log.info("audit %s (%s) claimed, attempt %d", audit_id, kind, attempt)

    progress = DbProgress(
        session_factory=session_factory,
        audit_id=audit_id,
        attempt=attempt,
        max_seconds=settings.max_audit_seconds,
        stopping=stopping,
    )
    ctx = RunContext(
        progress=progress,
        engines=engines or RegistryEngines(progress=progress),
        datasets=TenantDatasets(
            session_factory=session_factory,
            tenant_id=tenant_id,
            data_dir=settings.data_dir,
            max_rows=settings.upload_max_rows,
        ),
        egress=settings.endpoint_egress,
    )
    state, result, error = AuditState.FAILED, None, None
    try:
        with Heartbeat(
            session_factory=session_factory,
            audit_id=audit_id,
            attempt=attempt,
            interval=settings.heartbeat_seconds,
            progress=progress,
        ):
            module = kind_module(kind)
            request = module.Request.model_validate(request_json)
            result = _json_result(module.run(request, ctx))
            state = AuditState.SUCCEEDED
    except ClaimLost:
        log.warning("audit %s attempt %d lost its claim; another attempt owns it", audit_id, attempt)
        return None
    except ServiceStopping:
        with session_factory.begin() as session:
            audits.release_audit(session, audit_id=audit_id, attempt=attempt)
        log.warning("audit %s attempt %d interrupted by shutdown; back to PENDING", audit_id, attempt)
        return None
    except DeadlineExceeded as exc:
        error = {"code": "DEADLINE_EXCEEDED", "message": str(exc)}
    except AuditCancelled:
        state = AuditState.CANCELLED
    except AuditError as exc:
        error = {"code": "AUDIT_ERROR", "message": str(exc)}
    except Exception as exc:
        log.exception("audit %s attempt %d failed", audit_id, attempt)
        error = {"code": "INTERNAL", "message": f"{type(exc).__name__}: {exc}"}
    with session_factory.begin() as session:
        written = audits.finish_audit(
            session, audit_id=audit_id, attempt=attempt, state=state, result=result, error=error
        )
    if not written:
        log.warning(
            "audit %s attempt %d finished but no longer held the claim; outcome dropped", audit_id, attempt
        )
        return None
    log.info("audit %s attempt %d → %s", audit_id, attempt, state)
    return state
